"""A pretrained encoder with a classification head: BERT's fine-tuning."""

import keras
from keras import ops

from keras_transformer.layers.masks import masked_value
from keras_transformer.models.pretrained import PretrainedEncoder

POOLINGS = ("mean", "max", "cls")


@keras.saving.register_keras_serializable(package="keras_transformer")
class PretrainedClassifier(keras.Model):
    """Token ids in, class probabilities out, through a `PretrainedEncoder`.

    The encoder's hidden states are pooled, dropped out and classified by a
    softmax layer, as BERT is fine-tuned for sequence classification.

    Args:
        encoder: a `PretrainedEncoder` (usually from `from_pretrained`).
        num_classes: number of classes.
        pooling: `"mean"` (the mean over real tokens, as sentence-transformers
            pools its checkpoints), `"max"` (the maximum over real tokens) or
            `"cls"` (BERT's pooler on the first token: inputs must start with
            `[CLS]`).
        dropout: before the head.
        sequence_length: the most tokens an input has (`[CLS]` and `[SEP]`
            included), which an export encodes its texts to; None: the
            encoder's positions.
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

    # No bag of n-grams reads beside the encoder (`TransformerClassifier.ngrams`).
    ngrams = None

    def __init__(
        self, encoder, num_classes, pooling="mean", dropout=0.1, sequence_length=None, **kwargs
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
        # The softmax in float32 under mixed precision, as Keras advises for outputs.
        self.head = keras.layers.Dense(
            num_classes,
            activation="softmax",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            dtype="float32",
            name="head",
        )

    @property
    def input_length(self):
        """The tokens an input is encoded to (`sequence_length`)."""
        return self.sequence_length

    @property
    def vocabulary_size(self):
        return self.encoder.vocabulary_size

    def build(self, input_shape):
        if not self.encoder.built:
            self.encoder.build(input_shape)
        self.head.build((None, self.encoder.d_model))
        self.built = True

    def call(self, inputs, training=None, return_attention_scores=False):
        states = self.encoder(
            inputs, training=training, return_attention_scores=return_attention_scores
        )
        if return_attention_scores:
            states, attention_scores = states
        probabilities = self.head(self.head_dropout(self._pool(inputs, states), training=training))
        if return_attention_scores:
            return probabilities, attention_scores
        return probabilities

    def _pool(self, inputs, states):
        if self.pooling == "cls":
            return self.encoder.pooled_output(states)
        token_ids = inputs["token_ids"] if isinstance(inputs, dict) else inputs
        real = ops.cast(ops.not_equal(token_ids, self.encoder.padding_id), states.dtype)
        if isinstance(inputs, dict) and inputs.get("padding_mask") is not None:
            real = ops.cast(inputs["padding_mask"], states.dtype)
        real = ops.expand_dims(real, -1)
        if self.pooling == "max":
            lowest = ops.cast(masked_value(states.dtype), states.dtype)
            return ops.max(ops.where(real > 0, states, lowest), axis=1)
        return ops.sum(states * real, axis=1) / ops.maximum(ops.sum(real, axis=1), 1.0)

    def compute_output_shape(self, inputs_shape):
        shape = inputs_shape["token_ids"] if isinstance(inputs_shape, dict) else inputs_shape
        return (shape[0], self.num_classes)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "encoder": keras.saving.serialize_keras_object(self.encoder),
                "num_classes": self.num_classes,
                "pooling": self.pooling,
                "dropout": self.dropout,
                "sequence_length": self.sequence_length,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)

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
        (`PretrainedEncoder.from_pretrained`), its head new.

        Args:
            path: the checkpoint folder.
            num_classes, pooling, sequence_length: as for the constructor.
            dropout: overrides the checkpoint's `hidden_dropout_prob`, in the
                encoder and before the head.
            lora_rank: None to fine-tune every weight; an int to train
                low-rank adapters of that rank on the attention's query and
                value projections, and the head, only
                (`PretrainedEncoder.enable_lora`).
            **kwargs: base `keras.Model` arguments (`name`, `dtype`).
        """
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
