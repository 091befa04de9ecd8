"""A BERT-family encoder of our layers, and the loading of Hugging Face checkpoints into it."""

import json
import os

import keras
import numpy as np
from keras import ops

from keras_transformer.layers import TokenAndPositionEmbedding, TransformerEncoderBlock
from keras_transformer.layers.initializers import clone_initializer
from keras_transformer.models.encoder_stack import run_encoder_blocks


@keras.saving.register_keras_serializable(package="keras_transformer")
def gelu_approximate(x):
    """GELU's tanh approximation (Hugging Face's `gelu_new`, `gelu_pytorch_tanh`)."""
    return keras.activations.gelu(x, approximate=True)


# Hugging Face's activation names (a checkpoint's `hidden_act`) -> Keras activations;
# Keras' "gelu" is the exact (erf) one, as Hugging Face's.
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": gelu_approximate,
    "gelu_pytorch_tanh": gelu_approximate,
    "relu": "relu",
}
SUPPORTED_MODEL_TYPES = ("bert",)


@keras.saving.register_keras_serializable(package="keras_transformer")
class PretrainedEncoder(keras.Model):
    """BERT's encoder (Devlin et al., 2019) made of our layers.

    Token, position and token-type embeddings summed, then layer-normalized;
    `num_layers` post-norm `TransformerEncoderBlock`s; and BERT's pooler (a
    tanh dense layer on the first token) for whoever wants it. The layout of
    every Hugging Face BERT-family checkpoint (BERT, MiniLM, BGE, E5), which
    `from_pretrained` loads.

    Args:
        vocabulary_size: number of token ids.
        sequence_length: the most positions (the checkpoint's
            `max_position_embeddings`).
        num_layers: encoder blocks.
        d_model: width of the embeddings and blocks.
        num_heads: attention heads per block.
        intermediate_dim: feed-forward hidden width.
        activation: of the feed-forward network: a key of `ACTIVATIONS`
            (Hugging Face's names: `"gelu"` is the exact, erf one).
        layer_norm_epsilon: of every layer normalization.
        type_vocabulary_size: number of token types (segments).
        dropout: after the embeddings, in the attention and after each sublayer.
        padding_id: the id of `[PAD]`, masked out.
        **kwargs: base `keras.Model` arguments (`name`, `dtype`).

    Call arguments:
        token_ids: int `[B, T]`, or a dict with `"token_ids"` and optionally
            `"token_type_ids"` (default all 0) and `"padding_mask"` (default
            `token_ids != padding_id`).
        training: whether dropout is active.
        return_attention_scores: also return a list, one `[B, heads, T, T]`
            tensor per block.

    Returns the hidden states `[B, T, d_model]`. Those of padded positions
    are not BERT's (ours attend nowhere); use the ones at real tokens.

    Example:

    >>> import keras
    >>> from keras_transformer.models import PretrainedEncoder
    >>> encoder = PretrainedEncoder(vocabulary_size=100, sequence_length=16, num_layers=2,
    ...                             d_model=32, num_heads=4, intermediate_dim=64)
    >>> tuple(encoder(keras.ops.ones((2, 8), "int32")).shape)
    (2, 8, 32)

    A checkpoint folder (config.json, model.safetensors; nothing downloads):
    `PretrainedEncoder.from_pretrained("path/to/all-MiniLM-L6-v2")`.

    References:
        Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers
        for Language Understanding", 2019.
    """

    def __init__(
        self,
        vocabulary_size,
        sequence_length=512,
        num_layers=12,
        d_model=768,
        num_heads=12,
        intermediate_dim=3072,
        activation="gelu",
        layer_norm_epsilon=1e-12,
        type_vocabulary_size=2,
        dropout=0.1,
        padding_id=0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"Unsupported `activation` {activation!r}: use one of {sorted(ACTIVATIONS)}."
            )
        self.vocabulary_size = vocabulary_size
        self.sequence_length = sequence_length
        self.num_layers = num_layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.type_vocabulary_size = type_vocabulary_size
        self.dropout = dropout
        self.padding_id = padding_id
        self.lora_rank = None  # `enable_lora`'s rank, once enabled
        initializer = keras.initializers.TruncatedNormal(stddev=0.02)
        self.embedding = TokenAndPositionEmbedding(
            vocabulary_size,
            sequence_length,
            d_model,
            mask_zero=False,
            positional="learned",
            scale_embeddings=False,
            embeddings_initializer=clone_initializer(initializer, "token_embedding"),
            dtype=self.dtype_policy,
            name="embedding",
        )
        self.token_type_embedding = keras.layers.Embedding(
            type_vocabulary_size,
            d_model,
            embeddings_initializer=clone_initializer(initializer, "token_type_embedding"),
            dtype=self.dtype_policy,
            name="token_type_embedding",
        )
        self.embedding_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="embedding_norm"
        )
        self.embedding_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.encoder_blocks = [
            TransformerEncoderBlock(
                num_heads,
                intermediate_dim,
                dropout=dropout,
                activation=ACTIVATIONS[activation],
                layer_norm_epsilon=layer_norm_epsilon,
                normalize_first=False,
                kernel_initializer=clone_initializer(initializer, f"block_{index}"),
                dtype=self.dtype_policy,
                name=f"encoder_block_{index}",
            )
            for index in range(num_layers)
        ]
        self.pooler = keras.layers.Dense(
            d_model,
            activation="tanh",
            kernel_initializer=clone_initializer(initializer, "pooler"),
            dtype=self.dtype_policy,
            name="pooler",
        )

    def build(self, input_shape):
        shape = tuple(input_shape["token_ids"] if isinstance(input_shape, dict) else input_shape)
        self.embedding.build(shape)
        self.token_type_embedding.build(shape)
        self.embedding_norm.build((*shape, self.d_model))
        for block in self.encoder_blocks:
            block.build((*shape, self.d_model))
        self.pooler.build((shape[0], self.d_model))
        self.built = True

    def call(self, inputs, training=None, return_attention_scores=False):
        token_ids, token_type_ids, padding_mask = self._unpack(inputs)
        x = self.embedding(token_ids) + self.token_type_embedding(token_type_ids)
        x = self.embedding_dropout(self.embedding_norm(x), training=training)
        x, scores = run_encoder_blocks(
            self.encoder_blocks, x, padding_mask, training, return_attention_scores
        )
        if return_attention_scores:
            return x, scores
        return x

    def enable_lora(self, rank, target_names=("query", "value")):
        """Low-rank adapters (Hu et al., 2021) on the attention projections
        named `target_names` (of `"query"`, `"key"`, `"value"`,
        `"attention_output"`) of every block, through Keras' own
        `EinsumDense.enable_lora`; every other weight of the encoder is
        frozen, so training moves the adapters, and the biases of the
        adapted projections, only."""
        unknown = set(target_names) - {"query", "key", "value", "attention_output"}
        if unknown:
            raise ValueError(
                f"Unknown `target_names` {sorted(unknown)}: use query, key, value or "
                "attention_output."
            )
        # Keras' `trainable` flag reaches down to every variable: the whole
        # model first, then every layer off, then the adapted projections on.
        self.lora_rank = rank
        self.trainable = True
        for layer in self._flatten_layers(include_self=False):
            layer.trainable = False
        for block in self.encoder_blocks:
            attention = block.self_attention
            for dense in (
                attention.query_dense,
                attention.key_dense,
                attention.value_dense,
                attention.output_dense,
            ):
                if dense.name in target_names:
                    dense.trainable = True
                    dense.enable_lora(rank)

    def layer_decay_factors(self, layer_decay):
        """The learning-rate factors of layer-wise learning-rate decay, by layer
        name, for `FineTuningAdamW`'s `learning_rate_factors`.

        Block `i` of `num_layers` (0 at the bottom) learns at
        `layer_decay ** (num_layers - i)` times the base rate, the
        embeddings (token, position and type embeddings and their norm) at
        `layer_decay ** (num_layers + 1)`; the pooler and a head on top keep
        the base rate. The lower blocks hold the most general features, which
        fine-tuning should disturb least (Clark et al., "ELECTRA", 2020).
        """
        if not 0.0 < layer_decay <= 1.0:
            raise ValueError(f"`layer_decay` must be in (0, 1], got {layer_decay}.")
        depth = self.num_layers
        factors = {
            block.name: layer_decay ** (depth - index)
            for index, block in enumerate(self.encoder_blocks)
        }
        for layer in (self.embedding, self.token_type_embedding, self.embedding_norm):
            factors[layer.name] = layer_decay ** (depth + 1)
        return factors

    def compute_output_shape(self, inputs_shape):
        # Given, not traced: a symbolic length (`keras.Input((None,))`) cannot
        # be checked against the position table on JAX and PyTorch.
        shape = inputs_shape["token_ids"] if isinstance(inputs_shape, dict) else inputs_shape
        return (*tuple(shape), self.d_model)

    def pooled_output(self, hidden_states):
        """BERT's pooler: tanh(dense) of the first (`[CLS]`) token's state, `[B, d_model]`."""
        return self.pooler(hidden_states[:, 0])

    def embed(self, inputs, training=False):
        """Sentence embeddings, as sentence-transformers computes them from its
        BERT-family checkpoints (all-MiniLM-L6-v2, BGE, E5 with mean pooling):
        the hidden states' mean over the real tokens, divided by its L2 norm.

        Args:
            inputs: what `call` takes: int token ids `[B, T]` (`[PAD]` is not
                a real token), or a dict with `"token_ids"` and optionally
                `"token_type_ids"` and `"padding_mask"` (True at real tokens,
                Hugging Face's `attention_mask`).
            training: whether dropout is active.

        Returns:
            float32 `[B, d_model]`, each row of norm 1 (0 for a row without
            real tokens).

        Example:

        >>> import keras
        >>> encoder = PretrainedEncoder(vocabulary_size=100, sequence_length=16, num_layers=1,
        ...                             d_model=32, num_heads=4, intermediate_dim=64)
        >>> token_ids = keras.ops.convert_to_tensor([[2, 17, 43, 3, 0, 0], [2, 9, 3, 0, 0, 0]])
        >>> embeddings = encoder.embed(token_ids)
        >>> tuple(embeddings.shape)
        (2, 32)
        >>> round(float(keras.ops.sum(embeddings[0] ** 2)), 4)
        1.0

        With a checkpoint folder and its tokenizer (sentence-transformers'
        all-MiniLM-L6-v2 reads at most 256 word pieces):

            encoder = PretrainedEncoder.from_pretrained("path/to/all-MiniLM-L6-v2")
            tokenizer = PretrainedTokenizer.from_pretrained("path/to/all-MiniLM-L6-v2")
            embeddings = encoder.embed(
                tokenizer.encode(texts, 256, add_cls=True, add_sep=True))
        """
        _, _, padding_mask = self._unpack(inputs)
        states = self(inputs, training=training)
        return normalized_mean(states, padding_mask)

    def _unpack(self, inputs):
        if isinstance(inputs, dict):
            unknown = set(inputs) - {"token_ids", "token_type_ids", "padding_mask"}
            if unknown or "token_ids" not in inputs:
                raise ValueError(
                    "A dict input needs `token_ids`, and may have `token_type_ids` and "
                    f"`padding_mask`; got keys {sorted(inputs)}."
                )
            token_ids = inputs["token_ids"]
            token_type_ids = inputs.get("token_type_ids")
            padding_mask = inputs.get("padding_mask")
        else:
            token_ids, token_type_ids, padding_mask = inputs, None, None
        if token_type_ids is None:
            token_type_ids = ops.zeros_like(token_ids)
        if padding_mask is None:
            padding_mask = ops.not_equal(token_ids, self.padding_id)
        return token_ids, token_type_ids, ops.cast(padding_mask, "bool")

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "sequence_length": self.sequence_length,
                "num_layers": self.num_layers,
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "activation": self.activation,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "type_vocabulary_size": self.type_vocabulary_size,
                "dropout": self.dropout,
                "padding_id": self.padding_id,
            }
        )
        return config

    @classmethod
    def from_pretrained(cls, path, dropout=None, **kwargs):
        """The encoder of a Hugging Face BERT-family checkpoint folder.

        Reads `config.json` (`model_type` `"bert"`) and `model.safetensors`
        (through the `safetensors` package's NumPy API: no PyTorch). Nothing
        downloads. The tokenizer of the same folder:
        `keras_transformer.text.PretrainedTokenizer.from_pretrained(path)`.

        Args:
            path: the folder.
            dropout: overrides the checkpoint's `hidden_dropout_prob`.
            **kwargs: base `keras.Model` arguments (`name`, `dtype`).

        Raises:
            ValueError: a file is missing, or the checkpoint is not one this
                class holds; the message names the file and what is supported.
        """
        config = read_checkpoint_config(path)
        encoder = cls(**encoder_arguments(config, dropout), **kwargs)
        encoder.build((None, None))
        load_checkpoint_weights(encoder, path)
        return encoder


def masked_mean(states, mask):
    """The mean of `states` `[B, T, d]` over the positions where `mask` `[B, T]` is
    True (or 1), in the dtype of `states`; 0 for a row where it is nowhere True."""
    weights = ops.expand_dims(ops.cast(mask, states.dtype), -1)
    return ops.sum(states * weights, axis=1) / ops.maximum(ops.sum(weights, axis=1), 1.0)


def normalized_mean(states, mask, epsilon=1e-12):
    """`masked_mean` in float32, divided by its L2 norm (at least `epsilon`, as
    `torch.nn.functional.normalize`, which sentence-transformers' `Normalize` calls)."""
    mean = masked_mean(ops.cast(states, "float32"), mask)
    norm = ops.sqrt(ops.sum(ops.square(mean), axis=-1, keepdims=True))
    return mean / ops.maximum(norm, epsilon)


def read_checkpoint_config(path):
    """The checkpoint folder's `config.json`, checked to be one `PretrainedEncoder` holds."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise ValueError(f"{path} is not a folder: give a Hugging Face checkpoint folder.")
    config_path = os.path.join(path, "config.json")
    if not os.path.isfile(config_path):
        raise ValueError(f"{config_path} is missing: a Hugging Face checkpoint folder has one.")
    with open(config_path, encoding="utf-8") as config_file:
        try:
            config = json.load(config_file)
        except json.JSONDecodeError as error:
            raise ValueError(f"{config_path} is not JSON: {error}.") from error
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"{config_path}: model_type {model_type!r} is not supported; supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)} (BERT, MiniLM, BGE, E5 checkpoints)."
        )
    position_type = config.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise ValueError(
            f"{config_path}: position_embedding_type {position_type!r} is not supported; "
            "supported: absolute."
        )
    if config.get("hidden_act", "gelu") not in ACTIVATIONS:
        raise ValueError(
            f"{config_path}: hidden_act {config['hidden_act']!r} is not supported; supported: "
            f"{', '.join(sorted(ACTIVATIONS))}."
        )
    return config


def encoder_arguments(config, dropout=None):
    """`PretrainedEncoder` arguments from a checkpoint's `config.json` contents."""
    if config["hidden_size"] % config["num_attention_heads"]:
        raise ValueError(
            f"hidden_size {config['hidden_size']} is not a multiple of num_attention_heads "
            f"{config['num_attention_heads']}."
        )
    return {
        "vocabulary_size": config["vocab_size"],
        "sequence_length": config.get("max_position_embeddings", 512),
        "num_layers": config["num_hidden_layers"],
        "d_model": config["hidden_size"],
        "num_heads": config["num_attention_heads"],
        "intermediate_dim": config["intermediate_size"],
        "activation": config.get("hidden_act", "gelu"),
        "layer_norm_epsilon": config.get("layer_norm_eps", 1e-12),
        "type_vocabulary_size": config.get("type_vocab_size", 2),
        "dropout": config.get("hidden_dropout_prob", 0.1) if dropout is None else dropout,
        "padding_id": config.get("pad_token_id") or 0,
    }


def read_checkpoint_weights(path):
    """`{name: float32 array}` of the folder's `model.safetensors`, with the
    `bert.` prefix of task checkpoints (`BertForSequenceClassification` & co.) removed."""
    weights_path = os.path.join(os.fspath(path), "model.safetensors")
    if not os.path.isfile(weights_path):
        others = [
            name
            for name in ("pytorch_model.bin", "tf_model.h5", "model.safetensors.index.json")
            if os.path.isfile(os.path.join(os.fspath(path), name))
        ]
        found = f" (found {', '.join(others)})" if others else ""
        raise ValueError(
            f"{weights_path} is missing{found}: only single-file safetensors weights are "
            "supported (save with `save_pretrained(..., safe_serialization=True)`)."
        )
    try:
        from safetensors.numpy import load_file
    except ImportError as error:
        raise ImportError(
            "Reading a checkpoint needs the `safetensors` package: pip install safetensors"
        ) from error
    weights = load_file(weights_path)
    if any(name.startswith("bert.") for name in weights):
        weights = {
            name.removeprefix("bert."): value
            for name, value in weights.items()
            if name.startswith("bert.")
        }
    return {name: np.asarray(value, dtype="float32") for name, value in weights.items()}


def load_checkpoint_weights(encoder, path):
    """Assigns a checkpoint folder's weights to a built `PretrainedEncoder` of its sizes."""
    weights = read_checkpoint_weights(path)
    used = set()

    def take(name):
        if name not in weights:
            raise ValueError(
                f"{os.path.join(os.fspath(path), 'model.safetensors')} has no weight {name!r}: "
                "not a BERT checkpoint of the sizes its config.json gives."
            )
        used.add(name)
        return weights[name]

    def assign(variable, value, name, layout=lambda value: value):
        """`variable` takes `layout(value)`, the checkpoint's array in our layout."""
        shape = tuple(variable.shape)
        if value.size != np.prod(shape) or layout(value).shape != shape:
            raise ValueError(
                f"{name}: the checkpoint's shape {value.shape} does not fit {shape}, the shape "
                "its config.json implies."
            )
        variable.assign(layout(value))

    def norm(layer, prefix):
        # Older checkpoints name the parameters gamma and beta.
        scale = f"{prefix}.weight" if f"{prefix}.weight" in weights else f"{prefix}.gamma"
        shift = f"{prefix}.bias" if f"{prefix}.bias" in weights else f"{prefix}.beta"
        assign(layer.gamma, take(scale), scale)
        assign(layer.beta, take(shift), shift)

    def dense(layer, prefix):
        # PyTorch's Linear holds [out, in]; Keras' kernels are [in, out], split
        # into heads for the attention's EinsumDense.
        kernel_shape, bias_shape = tuple(layer.kernel.shape), tuple(layer.bias.shape)
        assign(
            layer.kernel,
            take(f"{prefix}.weight"),
            f"{prefix}.weight",
            lambda weight: weight.T.reshape(kernel_shape),
        )
        assign(
            layer.bias, take(f"{prefix}.bias"), f"{prefix}.bias", lambda b: b.reshape(bias_shape)
        )

    embedding = encoder.embedding
    assign(
        embedding.token_embedding.embeddings,
        take("embeddings.word_embeddings.weight"),
        "embeddings.word_embeddings.weight",
    )
    assign(
        embedding.position_encoding.position_embeddings,
        take("embeddings.position_embeddings.weight"),
        "embeddings.position_embeddings.weight",
    )
    assign(
        encoder.token_type_embedding.embeddings,
        take("embeddings.token_type_embeddings.weight"),
        "embeddings.token_type_embeddings.weight",
    )
    norm(encoder.embedding_norm, "embeddings.LayerNorm")
    for index, block in enumerate(encoder.encoder_blocks):
        prefix = f"encoder.layer.{index}"
        attention = block.self_attention
        dense(attention.query_dense, f"{prefix}.attention.self.query")
        dense(attention.key_dense, f"{prefix}.attention.self.key")
        dense(attention.value_dense, f"{prefix}.attention.self.value")
        dense(attention.output_dense, f"{prefix}.attention.output.dense")
        norm(block.self_attention_norm, f"{prefix}.attention.output.LayerNorm")
        dense(block.feed_forward.intermediate_dense, f"{prefix}.intermediate.dense")
        dense(block.feed_forward.output_dense, f"{prefix}.output.dense")
        norm(block.feed_forward_norm, f"{prefix}.output.LayerNorm")
    if "pooler.dense.weight" in weights:
        dense(encoder.pooler, "pooler.dense")
    extra = [
        name
        for name in weights
        if name not in used
        and name.startswith(("embeddings.", "encoder.layer."))
        and not name.endswith("position_ids")
    ]
    if extra:
        raise ValueError(
            f"{os.path.join(os.fspath(path), 'model.safetensors')} holds encoder weights this "
            f"model has no place for (e.g. {extra[:3]}): more layers than config.json says?"
        )
    return encoder
