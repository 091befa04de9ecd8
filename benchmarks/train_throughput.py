"""Training throughput (tokens/s) and model FLOPs utilization of our models
against the same models built from Keras' and keras-hub's layers.

Two families, each timed as `model.train_on_batch` (Keras' own train step:
forward, loss, gradients, optimizer update), graph mode (`jit_compile=False`,
what Keras picks on a CPU-only machine):

* **classifier**: token + learned position embedding, `layers` post-norm
  encoder blocks (GELU feed-forward of width 4*d, heads of size 32), masked
  mean pooling, dropout 0.1 and a softmax head, built three ways:
  - `ours`: `keras_transformer.models.TransformerClassifier`;
  - `keras`: `ReferenceClassifier` below with
    `reference_block.KerasReferenceEncoderBlock` blocks
    (`keras.layers.MultiHeadAttention`, `Dense`, `LayerNormalization`);
  - `keras-hub`: `ReferenceClassifier` with `keras_hub.layers.TransformerEncoder`
    blocks.
  The three have the same weights' shapes and count (embedding, blocks, head):
  checked before each configuration is timed.
* **seq2seq**: the encoder-decoder of the TensorFlow tutorial "Neural machine
  translation with a Transformer and Keras" (its hyper-parameters: 4 layers,
  d_model 128, dff 512, 8 heads, dropout 0.1), built two ways plus one:
  - `tutorial`: `TutorialTransformer` below, the tutorial's architecture
    written here from the paper and the tutorial's description: post-norm
    `x = LayerNorm(x + sublayer(x))` with `keras.layers.MultiHeadAttention`
    and Keras masks from `mask_zero=True` embeddings, the concatenated
    sin|cos position encoding, ReLU feed-forward, a final Dense to logits;
  - `ours`: `keras_transformer.models.Seq2SeqTransformer` with the same sizes,
    post-norm (`normalize_first=False`), the same architecture;
  - `ours-app`: `build_translator_model` of the same sizes, i.e. what
    `apps.train_translator` trains (pre-norm, two more layer norms).
  The tutorial's code gives every head `key_dim=d_model` (8 heads of 128, 8x
  the paper's attention width); by default the tutorial model here uses the
  paper's `d_model // num_heads`, so `tutorial` and `ours` have the same
  weights' shapes (checked before timing; `ours-app` has its two extra norms).
  `--tutorial-key-dim d_model` builds it as the tutorial's code does instead.
* **translator**: what the translation benchmark trains, at the sizes of the
  KerasHub peer's short-budget recipe (3+3 blocks, width 256, feed-forward 512,
  4 heads, batch 64), two ways:
  - `ours-app`: `build_translator_model`, as in seq2seq;
  - `keras-hub`: `keras_hub_translator.build_peer_translator`, the peer of
    translation_quality.py: KerasHub's pre-norm blocks with the same final norms,
    learned position tables where ours are sinusoidal (checked: the same weight
    shapes but those two tables).
  Both compiled alike (Adam, the masked label-smoothed loss), so the ratio is the
  cost of a training step of the same model, not of a recipe.

Timing (`bench_common.time_interleaved`): in one process, after `--warmup` steps
each (the first traces), rounds of `--steps` steps per model, interleaved
A B C, B C A, C A B, then reversed C B A, A C B, B A C, ... (so no model always
runs first, or always right after the same other one). Tokens/s is
`batch * length / median seconds per step` (padding positions counted: they
are computed). `ours/keras` is the ratio of median tokens/s (>= 1.0: ours is
not slower); `paired` is the median over rounds of the same ratio within the
round, robust to load that drifts over seconds on a shared machine.

FLOPs are counted analytically, matmuls only (softmax, layer norm, GELU,
dropout, the loss and the optimizer update are left out, embeddings lookups
are free):

* a dense projection of `N` tokens from width `a` to `b`: `2 N a b`
  (so the model's matmuls are 2 x (kernel parameters) x tokens);
* attention of `T` queries over `S` keys, `h` heads of size `k`: `2 T S h k`
  for `QK^T` and as much for `weights V`, i.e. `2*2*T*S*d` with `h k = d`
  per sequence and layer. Causal self-attention is counted in full (the
  masked half is computed, then masked);
* training = 3 x forward (the backward pass costs two matmuls per forward
  matmul: one for the input gradient, one for the weight gradient).

MFU = achieved training FLOP/s / measured matmul ceiling, where the ceiling is
the best FLOP/s of a `--matmul-size`^2 float32 matmul through TensorFlow
(`tf.linalg.matmul` in a `tf.function`) on the same machine and threads,
measured before, between and after the configurations (the best of all: on a
shared machine the load drifts, and the ceiling is what the machine can do).

Usage (from the repository root; keras-hub from requirements-bench.txt):

    .venv/bin/python benchmarks/train_throughput.py
    .venv/bin/python benchmarks/train_throughput.py --quick
    .venv/bin/python benchmarks/train_throughput.py --family classifier --only "L4 d256"
"""

import argparse
import math
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if os.environ.setdefault("KERAS_BACKEND", "tensorflow") != "tensorflow":
    sys.exit("benchmarks/train_throughput.py needs KERAS_BACKEND=tensorflow.")

import keras
import numpy as np
import tensorflow as tf
from bench_common import (
    paired_ratio,
    set_tensorflow_threads,
    time_interleaved,
    write_json,
)
from keras import ops
from keras_hub_translator import DECODER_INPUTS, ENCODER_INPUTS, build_peer_translator
from reference_block import (
    LAYER_NORM_EPSILON,
    KerasReferenceEncoderBlock,
)

from keras_transformer.models import (
    Seq2SeqTransformer,
    TransformerClassifier,
)
from keras_transformer.training.compiling import build_optimizer
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.translator.model import build_translator_model
from keras_transformer.training.translator.settings import TranslatorSettings

RESULTS = os.path.join("benchmarks", "results", "train_throughput.json")
HEAD_SIZE = 32  # classifier heads: d_model // HEAD_SIZE of them
VOCABULARY_SIZE = 8000
NUM_CLASSES = 5
DROPOUT = 0.1
TOKENS_PER_CLASSIFIER_BATCH = 4096  # batch = this // length: 32 x 128, 8 x 512


# --- FLOPs ---------------------------------------------------------------------------


def dense_flops(tokens, input_width, output_width):
    """A dense projection of `tokens` positions: one multiply-add per kernel entry."""
    return 2 * tokens * input_width * output_width


def attention_flops(batch, query_length, key_length, num_heads, key_dim, value_dim):
    """`QK^T` and `weights V` of one multi-head attention (projections excluded)."""
    return 2 * batch * query_length * key_length * num_heads * (key_dim + value_dim)


def attention_layer_flops(batch, query_length, key_length, model_dim, num_heads, key_dim):
    """One multi-head attention layer: four projections plus the attention itself."""
    queries, keys = batch * query_length, batch * key_length
    width = num_heads * key_dim
    return (
        dense_flops(queries, model_dim, width)  # query
        + 2 * dense_flops(keys, model_dim, width)  # key, value
        + attention_flops(batch, query_length, key_length, num_heads, key_dim, key_dim)
        + dense_flops(queries, width, model_dim)  # output
    )


def feed_forward_flops(tokens, model_dim, intermediate_dim):
    return dense_flops(tokens, model_dim, intermediate_dim) + dense_flops(
        tokens, intermediate_dim, model_dim
    )


def classifier_forward_flops(
    batch, length, model_dim, num_heads, intermediate_dim, num_layers, num_classes
):
    """Forward matmul FLOPs of an encoder classifier (blocks and head)."""
    block = attention_layer_flops(
        batch, length, length, model_dim, num_heads, model_dim // num_heads
    )
    block += feed_forward_flops(batch * length, model_dim, intermediate_dim)
    return num_layers * block + dense_flops(batch, model_dim, num_classes)


def seq2seq_forward_flops(
    batch,
    source_length,
    target_length,
    model_dim,
    num_heads,
    key_dim,
    intermediate_dim,
    num_layers,
    target_vocabulary_size,
):
    """Forward matmul FLOPs of an encoder-decoder (blocks and output projection)."""
    sources, targets = batch * source_length, batch * target_length
    encoder_block = attention_layer_flops(
        batch, source_length, source_length, model_dim, num_heads, key_dim
    )
    encoder_block += feed_forward_flops(sources, model_dim, intermediate_dim)
    decoder_block = attention_layer_flops(
        batch, target_length, target_length, model_dim, num_heads, key_dim
    )
    decoder_block += attention_layer_flops(
        batch, target_length, source_length, model_dim, num_heads, key_dim
    )
    decoder_block += feed_forward_flops(targets, model_dim, intermediate_dim)
    return num_layers * (encoder_block + decoder_block) + dense_flops(
        targets, model_dim, target_vocabulary_size
    )


def training_flops(forward_flops):
    """Forward, then backward at twice the forward (input and weight gradients)."""
    return 3 * forward_flops


def matmul_ceiling(size, repeats=10):
    """Best float32 FLOP/s of a `size` x `size` matmul through TensorFlow here."""
    a = tf.random.normal((size, size), seed=1)
    b = tf.random.normal((size, size), seed=2)
    matmul = tf.function(tf.linalg.matmul)
    seconds = time_interleaved(
        {"matmul": lambda: matmul(a, b)}, repeats, warmup=1, wait=lambda product: product.numpy()
    )["matmul"]
    return 2 * size**3 / min(seconds)


# --- classifiers -----------------------------------------------------------------------


class ReferenceClassifier(keras.Model):
    """`TransformerClassifier`'s architecture around any encoder block.

    The same pieces as ours in Keras' own layers: token embedding scaled by
    sqrt(d) plus a learned position table, dropout, `blocks` (each called as
    `block(x, padding_mask=..., training=...)`), mean pooling over real tokens,
    dropout and a float32 softmax head. Id 0 is padding.
    """

    def __init__(
        self, blocks, vocabulary_size, num_classes, sequence_length, model_dim, dropout, **kwargs
    ):
        super().__init__(**kwargs)
        self.model_dim = model_dim
        self.sequence_length = sequence_length
        self.token_embedding = keras.layers.Embedding(
            vocabulary_size, model_dim, embeddings_initializer="uniform", name="token_embedding"
        )
        self.embedding_dropout = keras.layers.Dropout(dropout)
        self.blocks = blocks
        self.head_dropout = keras.layers.Dropout(dropout)
        self.head = keras.layers.Dense(
            num_classes, activation="softmax", dtype="float32", name="head"
        )

    def build(self, token_ids_shape):
        self.token_embedding.build(token_ids_shape)
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.sequence_length, self.model_dim),
            initializer="glorot_uniform",
        )
        for block in self.blocks:
            block.build((*token_ids_shape, self.model_dim))
        self.head.build((token_ids_shape[0], self.model_dim))
        self.built = True

    def call(self, token_ids, training=None):
        padding_mask = ops.not_equal(token_ids, 0)
        length = ops.shape(token_ids)[1]
        x = self.token_embedding(token_ids) * math.sqrt(self.model_dim)
        x = x + self.position_embeddings[:length]
        x = self.embedding_dropout(x, training=training)
        for block in self.blocks:
            x = block(x, padding_mask=padding_mask, training=training)
        real = ops.cast(ops.expand_dims(padding_mask, -1), x.dtype)
        pooled = ops.sum(x * real, axis=1) / ops.maximum(ops.sum(real, axis=1), 1.0)
        return self.head(self.head_dropout(pooled, training=training))


def classifier_config(num_layers, model_dim, length):
    return dict(
        name=f"L{num_layers} d{model_dim} T{length}",
        num_layers=num_layers,
        d_model=model_dim,
        num_heads=model_dim // HEAD_SIZE,
        intermediate_dim=4 * model_dim,
        length=length,
        batch=max(1, TOKENS_PER_CLASSIFIER_BATCH // length),
    )


def build_classifier(kind, config):
    """A built classifier of `config`'s sizes; `kind` is ours, keras or keras-hub."""
    common = dict(
        vocabulary_size=VOCABULARY_SIZE, num_classes=NUM_CLASSES, sequence_length=config["length"]
    )
    if kind == "ours":
        model = TransformerClassifier(
            num_layers=config["num_layers"],
            d_model=config["d_model"],
            num_heads=config["num_heads"],
            intermediate_dim=config["intermediate_dim"],
            dropout=DROPOUT,
            pooling="mean",
            positional="learned",
            normalize_first=False,
            name="ours",
            **common,
        )
    else:
        if kind == "keras":

            def make_block(index):
                return KerasReferenceEncoderBlock(
                    config["num_heads"],
                    config["intermediate_dim"],
                    LAYER_NORM_EPSILON,
                    activation="gelu",
                    dropout=DROPOUT,
                    name=f"block_{index}",
                )
        elif kind == "keras-hub":
            import keras_hub

            def make_block(index):
                return keras_hub.layers.TransformerEncoder(
                    config["intermediate_dim"],
                    config["num_heads"],
                    dropout=DROPOUT,
                    activation="gelu",
                    layer_norm_epsilon=LAYER_NORM_EPSILON,
                    name=f"block_{index}",
                )
        else:
            raise ValueError(f"unknown classifier kind {kind!r}")
        blocks = [make_block(index) for index in range(config["num_layers"])]
        model = ReferenceClassifier(
            blocks,
            model_dim=config["d_model"],
            dropout=DROPOUT,
            name=kind.replace("-", "_"),
            **common,
        )
    model.build((None, config["length"]))
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-4),
        loss="sparse_categorical_crossentropy",
        jit_compile=False,
    )
    build_optimizer(model)
    return model


def padded_token_ids(rng, batch, length):
    """Token ids as in a padded batch: each row keeps a random length in
    [length/2, length] (about 25% padding), the longest row full length."""
    lengths = rng.integers(max(1, length // 2), length + 1, size=batch)
    lengths[0] = length
    token_ids = rng.integers(1, VOCABULARY_SIZE, size=(batch, length))
    token_ids[np.arange(length)[None, :] >= lengths[:, None]] = 0
    return token_ids.astype("int32")


def classifier_batch(config, seed):
    rng = np.random.default_rng(seed)
    token_ids = padded_token_ids(rng, config["batch"], config["length"])
    labels = rng.integers(0, NUM_CLASSES, size=config["batch"]).astype("int32")
    return tf.constant(token_ids), tf.constant(labels)


def classifier_flops(config):
    return training_flops(
        classifier_forward_flops(
            config["batch"],
            config["length"],
            config["d_model"],
            config["num_heads"],
            config["intermediate_dim"],
            config["num_layers"],
            NUM_CLASSES,
        )
    )


# --- the tutorial's seq2seq ------------------------------------------------------------


def tutorial_position_encoding(length, depth):
    """The tutorial's encoding: sines in the first half of the features, cosines
    in the second (not interleaved), wavelengths up to 10000."""
    half = depth // 2
    positions = np.arange(length)[:, None]
    rates = 1.0 / (10000.0 ** (np.arange(half)[None, :] / half))
    angles = positions * rates
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=-1).astype("float32")


class TutorialPositionalEmbedding(keras.layers.Layer):
    """`Embedding(mask_zero=True)` scaled by sqrt(d) plus the fixed encoding;
    passes the padding mask on as a Keras mask."""

    def __init__(self, vocabulary_size, model_dim, max_length=2048, **kwargs):
        super().__init__(**kwargs)
        self.model_dim = model_dim
        self.embedding = keras.layers.Embedding(vocabulary_size, model_dim, mask_zero=True)
        self.encoding = tutorial_position_encoding(max_length, model_dim)
        self.supports_masking = True

    def build(self, input_shape):
        self.embedding.build(input_shape)

    def compute_mask(self, inputs, mask=None):
        return self.embedding.compute_mask(inputs, mask)

    def call(self, token_ids):
        length = ops.shape(token_ids)[1]
        x = self.embedding(token_ids) * math.sqrt(self.model_dim)
        return x + self.encoding[None, :length, :]


class TutorialAttention(keras.layers.Layer):
    """`LayerNorm(x + MHA(x, context))`; masks come from the inputs' Keras masks."""

    def __init__(self, num_heads, key_dim, dropout, causal=False, **kwargs):
        super().__init__(**kwargs)
        self.attention = keras.layers.MultiHeadAttention(
            num_heads=num_heads, key_dim=key_dim, dropout=dropout
        )
        self.add = keras.layers.Add()
        self.norm = keras.layers.LayerNormalization()
        self.causal = causal
        self.supports_masking = True

    def build(self, query_shape, context_shape=None):
        context_shape = query_shape if context_shape is None else context_shape
        self.attention.build(query_shape, context_shape)
        self.norm.build(query_shape)

    def call(self, x, context=None, training=None):
        context = x if context is None else context
        attended = self.attention(
            query=x, value=context, key=context, use_causal_mask=self.causal, training=training
        )
        return self.norm(self.add([x, attended]))


class TutorialFeedForward(keras.layers.Layer):
    """`LayerNorm(x + Dropout(Dense(d)(relu(Dense(dff)(x)))))`."""

    def __init__(self, model_dim, intermediate_dim, dropout, **kwargs):
        super().__init__(**kwargs)
        # The tutorial's keras.Sequential, unrolled: Keras 3's Sequential warns
        # that it drops the Keras mask (the residual sum keeps it either way).
        self.intermediate_dense = keras.layers.Dense(intermediate_dim, activation="relu")
        self.output_dense = keras.layers.Dense(model_dim)
        self.dropout = keras.layers.Dropout(dropout)
        self.add = keras.layers.Add()
        self.norm = keras.layers.LayerNormalization()
        self.supports_masking = True

    def build(self, input_shape):
        self.intermediate_dense.build(input_shape)
        self.output_dense.build((*input_shape[:-1], self.intermediate_dense.units))
        self.norm.build(input_shape)

    def call(self, x, training=None):
        transformed = self.dropout(self.output_dense(self.intermediate_dense(x)), training=training)
        return self.norm(self.add([x, transformed]))


class TutorialTransformer(keras.Model):
    """The tutorial's encoder-decoder; takes the same inputs as `Seq2SeqTransformer`
    (`{"source_ids", "target_ids"}`) and returns float32 logits without a Keras mask."""

    def __init__(
        self,
        num_layers,
        model_dim,
        num_heads,
        intermediate_dim,
        source_vocabulary_size,
        target_vocabulary_size,
        key_dim=None,
        dropout=0.1,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.model_dim = model_dim
        key_dim = key_dim or model_dim // num_heads
        self.source_embedding = TutorialPositionalEmbedding(source_vocabulary_size, model_dim)
        self.target_embedding = TutorialPositionalEmbedding(target_vocabulary_size, model_dim)
        self.source_dropout = keras.layers.Dropout(dropout)
        self.target_dropout = keras.layers.Dropout(dropout)
        self.encoder_layers = [
            (
                TutorialAttention(num_heads, key_dim, dropout),
                TutorialFeedForward(model_dim, intermediate_dim, dropout),
            )
            for _ in range(num_layers)
        ]
        self.decoder_layers = [
            (
                TutorialAttention(num_heads, key_dim, dropout, causal=True),
                TutorialAttention(num_heads, key_dim, dropout),
                TutorialFeedForward(model_dim, intermediate_dim, dropout),
            )
            for _ in range(num_layers)
        ]
        self.final_layer = keras.layers.Dense(target_vocabulary_size)

    def build(self, input_shape=None):
        ids = (None, None)
        width = (None, None, self.model_dim)
        self.source_embedding.build(ids)
        self.target_embedding.build(ids)
        for attention, feed_forward in self.encoder_layers:
            attention.build(width)
            feed_forward.build(width)
        for self_attention, cross_attention, feed_forward in self.decoder_layers:
            self_attention.build(width)
            cross_attention.build(width, width)
            feed_forward.build(width)
        self.final_layer.build(width)
        self.built = True

    def call(self, inputs, training=None):
        context = self.source_dropout(
            self.source_embedding(inputs["source_ids"]), training=training
        )
        for attention, feed_forward in self.encoder_layers:
            context = feed_forward(attention(context, training=training), training=training)
        x = self.target_dropout(self.target_embedding(inputs["target_ids"]), training=training)
        for self_attention, cross_attention, feed_forward in self.decoder_layers:
            x = self_attention(x, training=training)
            x = cross_attention(x, context, training=training)
            x = feed_forward(x, training=training)
        # A fresh tensor without the Keras mask (the tutorial deletes it): the
        # loss masks padding itself.
        return ops.copy(ops.cast(self.final_layer(x), "float32"))


def seq2seq_config(length, batch, tutorial_key_dim="paper"):
    config = dict(
        name=f"L4 d128 T{length}",
        num_layers=4,
        d_model=128,
        num_heads=8,
        intermediate_dim=512,
        length=length,
        batch=batch,
    )
    config["tutorial_key_dim"] = (
        config["d_model"] if tutorial_key_dim == "d_model" else config["d_model"] // 8
    )
    return config


def translator_config(length, batch):
    return dict(
        name=f"L3 d256 T{length}",
        num_layers=3,
        d_model=256,
        num_heads=4,
        intermediate_dim=512,
        length=length,
        batch=batch,
    )


def peer_position_tables(config):
    """The weight shapes the KerasHub translator has beyond ours: a learned position
    table a side."""
    return [(config["length"], config["d_model"])] * 2


def build_seq2seq(kind, config):
    """A built, compiled seq2seq model; `kind` is tutorial, ours, ours-app or keras-hub."""
    sizes = dict(
        d_model=config["d_model"],
        num_heads=config["num_heads"],
        intermediate_dim=config["intermediate_dim"],
        dropout=DROPOUT,
    )
    if kind == "tutorial":
        model = TutorialTransformer(
            config["num_layers"],
            config["d_model"],
            config["num_heads"],
            config["intermediate_dim"],
            VOCABULARY_SIZE,
            VOCABULARY_SIZE,
            key_dim=config["tutorial_key_dim"],
            dropout=DROPOUT,
        )
    elif kind == "ours":
        model = Seq2SeqTransformer(
            VOCABULARY_SIZE,
            VOCABULARY_SIZE,
            sequence_length=config["length"],
            num_encoder_layers=config["num_layers"],
            num_decoder_layers=config["num_layers"],
            normalize_first=False,
            **sizes,
        )
    elif kind == "ours-app":
        settings = TranslatorSettings(
            sequence_length=config["length"],
            num_layers=config["num_layers"],
            vocabulary_size=VOCABULARY_SIZE,
            source_word_dropout=0.0,
            **sizes,
        )
        model = build_translator_model(settings, VOCABULARY_SIZE, VOCABULARY_SIZE)  # built
    elif kind == "keras-hub":
        model = build_peer_translator(
            VOCABULARY_SIZE,
            VOCABULARY_SIZE,
            config["length"],
            config["num_layers"],
            config["d_model"],
            config["intermediate_dim"],
            config["num_heads"],
            DROPOUT,
        )
    else:
        raise ValueError(f"unknown seq2seq kind {kind!r}")
    if not model.built:
        model.build()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=0.1),
        jit_compile=False,
    )
    build_optimizer(model)
    return model


def seq2seq_batch(config, seed):
    """`kind -> (inputs, labels)`: the same ids for every kind, under the input names
    its model takes."""
    rng = np.random.default_rng(seed)
    source_ids = tf.constant(padded_token_ids(rng, config["batch"], config["length"]))
    # Decoder inputs and labels share their padding.
    target_ids = padded_token_ids(rng, config["batch"], config["length"])
    labels = np.where(target_ids > 0, rng.integers(1, VOCABULARY_SIZE, size=target_ids.shape), 0)
    target_ids, labels = tf.constant(target_ids), tf.constant(labels.astype("int32"))

    def batch_for(kind):
        if kind == "keras-hub":
            return {ENCODER_INPUTS: source_ids, DECODER_INPUTS: target_ids}, labels
        return {"source_ids": source_ids, "target_ids": target_ids}, labels

    return batch_for


def seq2seq_flops(config, kind):
    key_dim = (
        config["tutorial_key_dim"]
        if kind == "tutorial"
        else config["d_model"] // config["num_heads"]
    )
    return training_flops(
        seq2seq_forward_flops(
            config["batch"],
            config["length"],
            config["length"],
            config["d_model"],
            config["num_heads"],
            key_dim,
            config["intermediate_dim"],
            config["num_layers"],
            VOCABULARY_SIZE,
        )
    )


# --- timing ----------------------------------------------------------------------------


def weight_shapes(model):
    return sorted(tuple(variable.shape) for variable in model.trainable_variables)


def check_same_weight_shapes(models, reference, kinds, extra_shapes=()):
    """Raises ValueError unless each of `kinds` has the trainable weight shapes of
    `reference` (plus `extra_shapes`, those only the kinds have): a speed ratio
    between models of different sizes would not compare implementations."""
    expected = sorted(weight_shapes(models[reference]) + [tuple(s) for s in extra_shapes])
    for kind in kinds:
        shapes = weight_shapes(models[kind])
        if shapes != expected:
            only_here = sorted(set(shapes) - set(expected))
            only_there = sorted(set(expected) - set(shapes))
            raise ValueError(
                f"{kind} does not have the weight shapes of {reference} ({len(shapes)} vs "
                f"{len(expected)} "
                f"weights; shapes only in {kind}: {only_here}, only in {reference}: {only_there})"
            )


def benchmark(
    config,
    kinds,
    build,
    flops_of,
    batch,
    rounds,
    steps,
    warmup,
    seed,
    same_weights=(),
    extra_shapes=(),
):
    """Builds every kind, checks that the kinds in `same_weights` have the first
    kind's weight shapes (plus `extra_shapes`), then times them interleaved; returns
    one result dict. `batch` is `(inputs, labels)` or a function of the kind giving them."""
    models = {}
    for kind in kinds:
        keras.utils.set_random_seed(seed)
        models[kind] = build(kind, config)
    check_same_weight_shapes(models, kinds[0], same_weights, extra_shapes)
    parameters = {kind: int(model.count_params()) for kind, model in models.items()}
    batches = {kind: batch(kind) if callable(batch) else batch for kind in kinds}
    # train_on_batch returns its loss to Python, so every step has finished when the clock stops.
    seconds = time_interleaved(
        {
            kind: lambda model=model, kind=kind: model.train_on_batch(*batches[kind])
            for kind, model in models.items()
        },
        rounds,
        calls=steps,
        warmup=warmup,
    )
    tokens = config["batch"] * config["length"]
    result = dict(config, parameters=parameters, kinds={})
    for kind in kinds:
        median = statistics.median(seconds[kind])
        flops = flops_of(kind)
        result["kinds"][kind] = {
            "seconds_per_step": median,
            "tokens_per_second": tokens / median,
            "training_flops_per_step": flops,
            "flops_per_second": flops / median,
            "rounds_seconds": seconds[kind],
        }
    reference = kinds[0]  # ours
    for kind in kinds[1:]:
        result["kinds"][kind]["ours_over_this"] = (
            result["kinds"][reference]["tokens_per_second"]
            / result["kinds"][kind]["tokens_per_second"]
        )
        result["kinds"][kind]["paired_ours_over_this"] = paired_ratio(
            seconds[kind], seconds[reference]
        )
    return result


def format_table(results, kinds, ceiling):
    header = ["config", "batch"]
    for kind in kinds:
        header += [f"{kind} tok/s", f"{kind} MFU"]
    for kind in kinds[1:]:
        header += [f"{kinds[0]}/{kind}", "paired"]
    rows = []
    for result in results:
        row = [result["name"], str(result["batch"])]
        for kind in kinds:
            entry = result["kinds"][kind]
            row += [
                f"{entry['tokens_per_second']:,.0f}",
                f"{entry['flops_per_second'] / ceiling:.1%}",
            ]
        for kind in kinds[1:]:
            entry = result["kinds"][kind]
            row += [f"{entry['ours_over_this']:.3f}", f"{entry['paired_ours_over_this']:.3f}"]
        rows.append(row)
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]

    def line(columns):
        return "  ".join(
            str(c).rjust(w) if i else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(columns, widths))
        )

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--family", choices=("all", "classifier", "seq2seq", "translator"), default="all"
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="timed rounds per model (median taken)"
    )
    parser.add_argument("--steps", type=int, default=1, help="training steps per round")
    parser.add_argument(
        "--warmup", type=int, default=2, help="untimed steps per model first (the first traces)"
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a few steps (seconds)")
    parser.add_argument(
        "--only", default=None, help="only configurations whose name contains this text"
    )
    parser.add_argument("--seq2seq-batch", type=int, default=32)
    parser.add_argument("--translator-batch", type=int, default=64)
    parser.add_argument(
        "--tutorial-key-dim",
        choices=("paper", "d_model"),
        default="paper",
        help="the tutorial model's head size: d_model // heads (paper, same sizes as ours) "
        "or d_model (as the tutorial's code writes it)",
    )
    parser.add_argument("--matmul-size", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=0, help="TensorFlow threads (0: all)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument(
        "--output",
        default=None,
        help=f"JSON results path (default {RESULTS}, or train_throughput_quick.json with --quick)",
    )
    args = parser.parse_args(argv)
    if args.output is None:
        args.output = RESULTS.replace(".json", "_quick.json") if args.quick else RESULTS
    set_tensorflow_threads(args.threads)
    if args.quick:
        args.rounds, args.steps, args.warmup, args.matmul_size = 3, 1, 1, 512
        classifier_configs = [dict(classifier_config(1, 64, 32), batch=4)]
        seq2seq_configs = [
            dict(
                seq2seq_config(16, 4, args.tutorial_key_dim),
                name="L1 d32 T16",
                num_layers=1,
                d_model=32,
                num_heads=4,
                intermediate_dim=64,
                tutorial_key_dim=32 if args.tutorial_key_dim == "d_model" else 8,
            )
        ]
        translator_configs = [
            dict(
                translator_config(16, 4),
                name="L1 d32 T16",
                num_layers=1,
                d_model=32,
                intermediate_dim=64,
            )
        ]
    else:
        classifier_configs = [
            classifier_config(num_layers, model_dim, length)
            for num_layers in (2, 4)
            for model_dim in (128, 256)
            for length in (128, 512)
        ]
        seq2seq_configs = [
            seq2seq_config(length, args.seq2seq_batch, args.tutorial_key_dim)
            for length in (64, 128)
        ]
        # Bible verses and dictionary sentences: 30-45 word pieces a side.
        translator_configs = [
            translator_config(length, args.translator_batch) for length in (32, 64)
        ]
    families = []
    if args.family in ("all", "classifier"):
        families.append(("classifier", ["ours", "keras", "keras-hub"], classifier_configs))
    if args.family in ("all", "seq2seq"):
        families.append(("seq2seq", ["ours", "tutorial", "ours-app"], seq2seq_configs))
    if args.family in ("all", "translator"):
        families.append(("translator", ["ours-app", "keras-hub"], translator_configs))

    print(
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, {os.cpu_count()} CPUs, "
        f"threads {args.threads or 'all'}, {args.rounds} rounds x {args.steps} steps, "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    ceilings = [matmul_ceiling(args.matmul_size)]
    print(
        f"matmul ceiling ({args.matmul_size}^2 float32): {ceilings[0] / 1e9:.1f} GFLOP/s",
        flush=True,
    )
    started = time.perf_counter()
    report = {"families": {}}
    for family, kinds, configs in families:
        results = []
        for index, config in enumerate(
            c for c in configs if args.only is None or args.only in c["name"]
        ):
            print(f"[{family}] {config['name']} batch {config['batch']} ...", end=" ", flush=True)
            config_started = time.perf_counter()
            if family == "classifier":
                result = benchmark(
                    config,
                    kinds,
                    build_classifier,
                    lambda kind: classifier_flops(config),
                    classifier_batch(config, args.seed + index),
                    args.rounds,
                    args.steps,
                    args.warmup,
                    args.seed,
                    same_weights=["keras", "keras-hub"],
                )
            else:
                if family == "translator":
                    same_weights, extra_shapes = ["keras-hub"], peer_position_tables(config)
                else:
                    # The tutorial's model matches ours unless built with its code's wider heads.
                    paper_heads = (
                        config["tutorial_key_dim"] == config["d_model"] // config["num_heads"]
                    )
                    same_weights, extra_shapes = (["tutorial"] if paper_heads else []), ()
                result = benchmark(
                    config,
                    kinds,
                    build_seq2seq,
                    lambda kind: seq2seq_flops(config, kind),
                    seq2seq_batch(config, args.seed + index),
                    args.rounds,
                    args.steps,
                    args.warmup,
                    args.seed,
                    same_weights=same_weights,
                    extra_shapes=extra_shapes,
                )
            results.append(result)
            # the machine's load drifts
            ceilings.append(matmul_ceiling(args.matmul_size, repeats=5))
            print(
                ", ".join(
                    f"{kind} {result['kinds'][kind]['tokens_per_second']:,.0f} tok/s"
                    for kind in kinds
                )
                + f" ({time.perf_counter() - config_started:.0f} s)",
                flush=True,
            )
        report["families"][family] = {"kinds": kinds, "results": results}
    ceilings.append(matmul_ceiling(args.matmul_size))
    ceiling = max(ceilings)
    for family, entry in report["families"].items():
        print(f"\n{family} (MFU over the matmul ceiling {ceiling / 1e9:.1f} GFLOP/s)")
        print(format_table(entry["results"], entry["kinds"], ceiling))
    print(
        f"\ntok/s: batch x length / median seconds per train_on_batch step. "
        "ours/X: ratio of median tok/s (>= 1: ours is not slower); paired: median of per-round "
        "ratios.\n"
        f"total {time.perf_counter() - started:.0f} s, load average now {os.getloadavg()[0]:.2f}"
    )
    report.update(
        {
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "threads": args.threads,
            "rounds": args.rounds,
            "steps": args.steps,
            "warmup": args.warmup,
            "matmul_size": args.matmul_size,
            "matmul_ceilings_flops": ceilings,
            "matmul_ceiling_flops": ceiling,
            "load_average_at_end": os.getloadavg()[0],
        }
    )
    for entry in report["families"].values():
        for result in entry["results"]:
            for kind_result in result["kinds"].values():
                kind_result["mfu"] = kind_result["flops_per_second"] / ceiling
    if args.output:
        write_json(args.output, report)
        print(f"wrote {args.output}")
    return report


if __name__ == "__main__":
    main()
