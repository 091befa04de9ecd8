"""A pretrained encoder with a classification head: BERT's fine-tuning."""

import json
import os

import keras
import numpy as np
from keras import ops

from keras_transformer.layers.masks import masked_value
from keras_transformer.models.classifier import BagOfNgramsBeside
from keras_transformer.models.pretrained import PretrainedEncoder, masked_mean

POOLINGS = ("mean", "max", "cls")


@keras.saving.register_keras_serializable(package="keras_transformer")
class PretrainedClassifier(BagOfNgramsBeside, keras.Model):
    """Token ids in, class probabilities out, through a `PretrainedEncoder`.

    The encoder's hidden states are pooled, dropped out and classified by a
    softmax layer, as BERT is fine-tuned for sequence classification.
    Optionally a bag of n-grams beside the encoder adds its logits to the
    head's, and may read further into a text than the encoder's
    `sequence_length` (`TransformerClassifier` has the same bag).

    Args:
        encoder: a `PretrainedEncoder` (usually from `from_pretrained`).
        num_classes: number of classes.
        pooling: `"mean"` (the mean over real tokens, as sentence-transformers
            pools its checkpoints), `"max"` (the maximum over real tokens) or
            `"cls"` (BERT's pooler on the first token: inputs must start with
            `[CLS]`).
        dropout: before the head.
        sequence_length: the most tokens the encoder reads (`[CLS]` and
            `[SEP]` included); None: the encoder's positions.
        bag_of_ngrams: None, or a dict of `BagOfNgrams` arguments: a bag of
            n-grams whose logits are added to the head's.
        ngram_length: None, or the most tokens the bag of n-grams reads,
            beyond `sequence_length` (`input_length` is the longest input
            worth giving, which an export encodes its texts to).
        separator_id: None, or the id of `[SEP]`: where the bag reads
            further and a text goes on past `sequence_length`, the encoder's
            last token becomes `[SEP]`, so that the encoder sees a cut text
            as in pretraining, `[CLS] ... [SEP]`. `from_pretrained` takes it
            from the checkpoint's vocabulary.
        **kwargs: base `keras.Model` arguments (`name`, `dtype`).

    Call arguments:
        inputs: what the encoder takes: token ids `[B, T]` (`[PAD]` masked
            out), or a dict with `"token_ids"` and optionally
            `"token_type_ids"` and `"padding_mask"`.
        training: whether dropout is active.
        return_attention_scores: also return the encoder's attention
            scores, one `[B, heads, T, T]` tensor per block.

    Example:

    >>> import keras
    >>> from keras_transformer.models import PretrainedClassifier, PretrainedEncoder
    >>> encoder = PretrainedEncoder(vocabulary_size=100, sequence_length=16, num_layers=1,
    ...                             d_model=32, num_heads=4, intermediate_dim=64)
    >>> classifier = PretrainedClassifier(encoder, num_classes=3)
    >>> tuple(classifier(keras.ops.ones((2, 8), "int32")).shape)
    (2, 3)

    From a checkpoint folder, fine-tuning low-rank adapters only:
    `PretrainedClassifier.from_pretrained("path/to/all-MiniLM-L6-v2", num_classes=3,
    lora_rank=8)`.

    References:
        Devlin et al., "BERT", 2019, section 4.1.
        Reimers and Gurevych, "Sentence-BERT", 2019 (mean pooling).
        Hu et al., "LoRA: Low-Rank Adaptation of Large Language Models", 2021.
    """

    def __init__(
        self,
        encoder,
        num_classes,
        pooling="mean",
        dropout=0.1,
        sequence_length=None,
        bag_of_ngrams=None,
        ngram_length=None,
        separator_id=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if pooling not in POOLINGS:
            raise ValueError(f"`pooling` must be one of {POOLINGS}, got {pooling!r}.")
        if not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(
                f"`num_classes` must be an integer of at least 2, got {num_classes!r}."
            )
        if sequence_length is None:
            sequence_length = encoder.sequence_length
        if not isinstance(sequence_length, int) or not 1 <= sequence_length <= (
            encoder.sequence_length
        ):
            raise ValueError(
                f"`sequence_length` must be an integer from 1 to the encoder's "
                f"{encoder.sequence_length} positions, got {sequence_length!r}."
            )
        self.sequence_length = sequence_length
        self.encoder = encoder
        if pooling != "cls":
            # BERT's pooler is left out of the answer: no gradient would reach it.
            encoder.pooler.trainable = False
        self.num_classes = num_classes
        self.pooling = pooling
        self.dropout = dropout
        self.head_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        # float32 logits and probabilities under mixed precision, as Keras advises for outputs.
        self.head = keras.layers.Dense(
            num_classes,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            dtype="float32",
            name="head",
        )
        self.separator_id = separator_id
        self._create_bag_of_ngrams(
            encoder.vocabulary_size, num_classes, bag_of_ngrams, ngram_length
        )

    @property
    def vocabulary_size(self):
        return self.encoder.vocabulary_size

    def build(self, input_shape):
        if not self.encoder.built:
            self.encoder.build(input_shape)
        self.head.build((None, self.encoder.d_model))
        if self.ngrams is not None:
            self.ngrams.build(
                input_shape["token_ids"] if isinstance(input_shape, dict) else input_shape
            )
        self.built = True

    def call(self, inputs, training=None, return_attention_scores=False):
        encoder_inputs = self._encoder_inputs(inputs)
        states = self.encoder(
            encoder_inputs, training=training, return_attention_scores=return_attention_scores
        )
        if return_attention_scores:
            states, attention_scores = states
        pooled = self._pool(encoder_inputs, states)
        logits = self.head(self.head_dropout(pooled, training=training))
        token_ids = inputs["token_ids"] if isinstance(inputs, dict) else inputs
        probabilities = ops.softmax(self._add_bag_logits(logits, token_ids), axis=-1)
        if return_attention_scores:
            return probabilities, attention_scores
        return probabilities

    def _encoder_inputs(self, inputs):
        """What the encoder reads of `inputs`: all of it, or where the bag of n-grams reads
        further, the first `sequence_length` tokens, a cut text ending in `[SEP]`."""
        if not isinstance(inputs, dict):
            return self._cut_ids(inputs)
        cut = {
            name: self._transformer_ids(value)
            for name, value in inputs.items()
            if value is not None
        }
        cut["token_ids"] = self._cut_ids(inputs["token_ids"])
        return cut

    def _cut_ids(self, token_ids):
        cut = self._transformer_ids(token_ids)
        if cut is token_ids or self.separator_id is None:
            return cut
        real = ops.not_equal(token_ids, self.encoder.padding_id)
        goes_on = ops.sum(ops.cast(real, "int32"), axis=1, keepdims=True) > self.sequence_length
        last = ops.expand_dims(ops.arange(ops.shape(cut)[1]) == self.sequence_length - 1, 0)
        return ops.where(last & goes_on, ops.cast(self.separator_id, cut.dtype), cut)

    def _pool(self, inputs, states):
        if self.pooling == "cls":
            return self.encoder.pooled_output(states)
        token_ids = inputs["token_ids"] if isinstance(inputs, dict) else inputs
        real = ops.not_equal(token_ids, self.encoder.padding_id)
        if isinstance(inputs, dict) and inputs.get("padding_mask") is not None:
            real = ops.cast(inputs["padding_mask"], "bool")
        if self.pooling == "max":
            lowest = ops.cast(masked_value(states.dtype), states.dtype)
            return ops.max(ops.where(ops.expand_dims(real, -1), states, lowest), axis=1)
        return masked_mean(states, real)

    def embed(self, inputs, training=False):
        """Sentence embeddings of the encoder (`PretrainedEncoder.embed`: the mean
        of its hidden states over real tokens, L2-normalized, float32
        `[B, d_model]`), whatever this classifier's `pooling`, of the tokens the
        encoder reads: the first `sequence_length`, a cut text ending in `[SEP]`
        where the bag of n-grams reads further. After full fine-tuning they are
        the fine-tuned encoder's, no longer the checkpoint's.

        Args:
            inputs: what `call` takes.
            training: whether dropout is active.

        Example:

        >>> import keras
        >>> from keras_transformer.models import PretrainedClassifier, PretrainedEncoder
        >>> encoder = PretrainedEncoder(vocabulary_size=100, sequence_length=16, num_layers=1,
        ...                             d_model=32, num_heads=4, intermediate_dim=64)
        >>> classifier = PretrainedClassifier(encoder, num_classes=3)
        >>> tuple(classifier.embed(keras.ops.ones((2, 8), "int32")).shape)
        (2, 32)
        """
        return self.encoder.embed(self._encoder_inputs(inputs), training=training)

    def compute_output_shape(self, inputs_shape):
        shape = inputs_shape["token_ids"] if isinstance(inputs_shape, dict) else inputs_shape
        return (shape[0], self.num_classes)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                **self._head_arguments(),
            }
        )
        return config

    def _head_arguments(self):
        """The constructor's arguments but the encoder."""
        return {
            "num_classes": self.num_classes,
            "pooling": self.pooling,
            "dropout": self.dropout,
            "sequence_length": self.sequence_length,
            "bag_of_ngrams": self.bag_of_ngrams,
            "ngram_length": self.ngram_length,
            "separator_id": self.separator_id,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)

    def adapted_weights(self):
        """What fine-tuning low-rank adapters changes or fits beside the checkpoint, in a
        fixed order: every trainable weight (the adapters, the adapted projections'
        biases, the head) and the bag of n-grams' weights."""
        trainable = {id(weight) for weight in self.trainable_weights}
        bag = {id(weight) for weight in self.ngrams.weights} if self.ngrams is not None else set()
        return [weight for weight in self.weights if id(weight) in trainable | bag]

    def save_adapters(self, path):
        """Writes `adapted_weights()` and the arguments that rebuild this classifier on its
        checkpoint to `path` (a NumPy `.npz`), without the checkpoint's own weights, which
        `model.keras` holds again. `from_adapters` reads it back.

        Raises:
            ValueError: the encoder has no low-rank adapters (`lora_rank`).
        """
        if self.encoder.lora_rank is None:
            raise ValueError(
                "save_adapters writes low-rank adapters, and this classifier has none: "
                "build it with `from_pretrained(..., lora_rank=N)`, or save the whole model."
            )
        arguments = {**self._head_arguments(), "lora_rank": self.encoder.lora_rank}
        values = [keras.ops.convert_to_numpy(weight) for weight in self.adapted_weights()]
        with open(path, "wb") as adapters_file:
            np.savez(
                adapters_file,
                arguments=np.array(json.dumps(arguments)),
                **{f"weight_{index}": value for index, value in enumerate(values)},
            )

    @classmethod
    def from_adapters(cls, checkpoint_path, adapters_path):
        """The classifier `save_adapters` wrote to `adapters_path`, rebuilt on the
        checkpoint folder `checkpoint_path` it was fine-tuned from.

        Raises:
            ValueError: the file's weights do not fit the checkpoint's encoder.
        """
        with np.load(adapters_path) as archive:
            if "arguments" not in archive.files:
                raise ValueError(f"{adapters_path} is not a file of `save_adapters`.")
            arguments = json.loads(str(archive["arguments"]))
            values = [archive[f"weight_{index}"] for index in range(len(archive.files) - 1)]
        model = cls.from_pretrained(checkpoint_path, **arguments)
        model.build((None, model.input_length))
        weights = model.adapted_weights()
        shapes = [tuple(weight.shape) for weight in weights]
        if shapes != [value.shape for value in values]:
            raise ValueError(
                f"{adapters_path} holds {len(values)} weights that do not fit the encoder of "
                f"{checkpoint_path} ({len(weights)} adapted weights): were the adapters trained "
                "on another checkpoint?"
            )
        for weight, value in zip(weights, values):
            weight.assign(value)
        return model

    @classmethod
    def from_pretrained(
        cls,
        path,
        num_classes,
        pooling="mean",
        dropout=None,
        lora_rank=None,
        sequence_length=None,
        **kwargs,
    ):
        """A classifier on the encoder of a Hugging Face checkpoint folder
        (`PretrainedEncoder.from_pretrained`), its head new, `separator_id`
        the vocabulary's `[SEP]`.

        Args:
            path: the checkpoint folder.
            num_classes, pooling, sequence_length: as for the constructor.
            dropout: overrides the checkpoint's `hidden_dropout_prob`, in the
                encoder and before the head.
            lora_rank: None to fine-tune every weight; an int to train
                low-rank adapters of that rank on the attention's query and
                value projections, and the head, only
                (`PretrainedEncoder.enable_lora`).
            **kwargs: the constructor's `bag_of_ngrams` and `ngram_length`, and
                base `keras.Model` arguments (`name`, `dtype`).
        """
        kwargs.setdefault("separator_id", _separator_id(path))
        encoder = PretrainedEncoder.from_pretrained(path, dropout=dropout)
        if lora_rank is not None:
            encoder.enable_lora(lora_rank)
        return cls(
            encoder,
            num_classes,
            pooling=pooling,
            dropout=encoder.dropout,
            sequence_length=sequence_length,
            **kwargs,
        )


def _separator_id(path):
    """The id of `[SEP]` in the vocabulary of the checkpoint folder `path`; None where the
    folder has no vocabulary (a classifier of token ids only) or no `[SEP]`."""
    # Here, not at the top: `import keras_transformer.models` stays cheap.
    from keras_transformer.data.checkpoint_files import (
        FAST_TOKENIZER_FILE,
        VOCABULARY_NAME,
        tokenizer_rules,
    )

    if not any(
        os.path.isfile(os.path.join(path, name)) for name in (VOCABULARY_NAME, FAST_TOKENIZER_FILE)
    ):
        return None
    vocabulary, _ = tokenizer_rules(path)
    return vocabulary.index("[SEP]") if "[SEP]" in vocabulary else None
