"""An encoder-only Transformer that classifies token sequences."""

import numbers

import keras
from keras import ops

from keras_transformer.layers import BagOfNgrams, MultiHeadAttention
from keras_transformer.layers.masks import masked_value
from keras_transformer.models.encoder_stack import EncoderStack

POOLINGS = ("mean", "max", "cls")


class BagOfNgramsBeside:
    """What a classifier with a bag of n-grams beside its encoder keeps in one place: the
    `BagOfNgrams` made from its arguments, how far it reads (`ngram_length`), and the
    encoder's share of an input the bag reads further than the encoder attends.

    The class using it has `sequence_length` and calls `_create_bag_of_ngrams` in its
    constructor.
    """

    def _create_bag_of_ngrams(self, vocabulary_size, num_classes, bag_of_ngrams, ngram_length):
        if bag_of_ngrams is not None and not isinstance(bag_of_ngrams, dict):
            raise ValueError(
                "`bag_of_ngrams` must be None or a dict of BagOfNgrams arguments, "
                f"got {bag_of_ngrams!r}."
            )
        self.bag_of_ngrams = None if bag_of_ngrams is None else dict(bag_of_ngrams)
        self.ngrams = None
        if self.bag_of_ngrams is not None:
            self.ngrams = BagOfNgrams(
                vocabulary_size, num_classes, dtype="float32", name="ngrams", **self.bag_of_ngrams
            )
        if ngram_length is not None:
            if self.ngrams is None:
                raise ValueError(
                    "`ngram_length` is how far the bag of n-grams reads: it needs `bag_of_ngrams`."
                )
            if (
                not isinstance(ngram_length, numbers.Integral)
                or isinstance(ngram_length, bool)
                or ngram_length < 1
            ):
                raise ValueError(
                    f"`ngram_length` must be a positive integer, got {ngram_length!r}."
                )
        self.ngram_length = None if ngram_length is None else int(ngram_length)

    @property
    def input_length(self):
        """The longest input the model reads all of: `sequence_length`, or the
        bag of n-grams' `ngram_length` where that is longer."""
        return max(self.sequence_length, self.ngram_length or 0)

    def _transformer_ids(self, token_ids):
        # Only a bag that reads further than the Transformer makes longer inputs valid;
        # without one, a too long input is an error, as in any encoder.
        if self.ngram_length is None or self.ngram_length <= self.sequence_length:
            return token_ids
        return token_ids[:, : self.sequence_length]

    def _add_bag_logits(self, logits, token_ids):
        if self.ngrams is None:
            return logits
        return logits + self.ngrams(token_ids)


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerClassifier(BagOfNgramsBeside, EncoderStack, keras.Model):
    """Token ids in, class probabilities out.

    Embedding plus positions, `num_layers` encoder blocks, a pooling that
    ignores padding, dropout and a softmax head. Id 0 is padding.

    Args:
        vocabulary_size: number of token ids.
        num_classes: number of classes.
        sequence_length: the longest input, in tokens.
        num_layers: encoder blocks.
        d_model: width of embeddings and blocks.
        num_heads: attention heads per block.
        intermediate_dim: feed-forward hidden width.
        dropout: in the blocks, after the embedding and before the head.
        pooling: `"mean"` (mean over real tokens), `"max"` (max over real
            tokens) or `"cls"` (the first token's state: inputs must start
            with `[CLS]`).
        positional: `"learned"` or `"sinusoidal"` position information.
        normalize_first: pre-norm blocks (with a final layer norm).
        attention_class: `MultiHeadAttention` or a registered subclass, for
            every block's self-attention.
        bag_of_ngrams: None, or a dict of `BagOfNgrams` arguments: a bag of
            n-grams whose logits are added to the head's.
        ngram_length: None, or the most tokens the bag of n-grams reads,
            beyond `sequence_length`: the Transformer reads the first
            `sequence_length` tokens of a longer input, the bag all of them
            (`input_length` is the longest input worth giving).
        **kwargs: base `keras.Model` arguments (`name`, `dtype`).

    Call arguments:
        token_ids: int `[B, T]`, 0-padded.
        training: whether dropout is active.
        return_attention_scores: also return a list, one `[B, heads, T, T]`
            tensor per block.

    Example:

    >>> import keras
    >>> from keras_transformer.models import TransformerClassifier
    >>> model = TransformerClassifier(vocabulary_size=8000, num_classes=5)
    >>> probabilities = model(keras.ops.ones((2, 16), "int32"))
    >>> tuple(probabilities.shape)
    (2, 5)

    References:
        Vaswani et al., "Attention Is All You Need", 2017.
        Devlin et al., "BERT", 2019 (the `[CLS]` pooling).
    """

    def __init__(
        self,
        vocabulary_size,
        num_classes,
        sequence_length=256,
        num_layers=2,
        d_model=128,
        num_heads=4,
        intermediate_dim=256,
        dropout=0.1,
        pooling="mean",
        positional="learned",
        normalize_first=False,
        attention_class=MultiHeadAttention,
        bag_of_ngrams=None,
        ngram_length=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if pooling not in POOLINGS:
            raise ValueError(f"`pooling` must be one of {POOLINGS}, got {pooling!r}.")
        if not isinstance(num_classes, numbers.Integral) or num_classes < 2:
            raise ValueError(
                f"`num_classes` must be an integer of at least 2, got {num_classes!r}."
            )
        self.num_classes = int(num_classes)
        self.pooling = pooling
        self._create_encoder_stack(
            vocabulary_size,
            sequence_length,
            num_layers,
            d_model,
            num_heads,
            intermediate_dim,
            dropout,
            positional,
            normalize_first,
            attention_class,
        )
        self.head_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        # float32 logits and probabilities even under mixed precision.
        self.head = keras.layers.Dense(num_classes, dtype="float32", name="head")
        self._create_bag_of_ngrams(vocabulary_size, num_classes, bag_of_ngrams, ngram_length)

    def build(self, token_ids_shape):
        length = token_ids_shape[1]
        self._build_encoder_stack(
            (token_ids_shape[0], None if length is None else min(length, self.sequence_length))
        )
        self.head.build((token_ids_shape[0], self.d_model))
        if self.ngrams is not None:
            self.ngrams.build(token_ids_shape)
        self.built = True

    def call(self, token_ids, training=None, return_attention_scores=False):
        x, padding_mask, attention_scores = self._encode(
            self._transformer_ids(token_ids),
            training,
            with_attention_scores=return_attention_scores,
        )
        pooled = self._pool(x, padding_mask)
        logits = self.head(self.head_dropout(pooled, training=training))
        logits = self._add_bag_logits(logits, token_ids)
        probabilities = ops.softmax(logits, axis=-1)
        if return_attention_scores:
            return probabilities, attention_scores
        return probabilities

    def _pool(self, sequence, padding_mask):
        if self.pooling == "cls":
            return sequence[:, 0, :]
        real = ops.cast(ops.expand_dims(padding_mask, -1), sequence.dtype)
        if self.pooling == "max":
            lowest = ops.cast(masked_value(sequence.dtype), sequence.dtype)
            return ops.max(ops.where(real > 0, sequence, lowest), axis=1)
        # An input with no real token pools to zeros rather than dividing by zero.
        count = ops.maximum(ops.sum(real, axis=1), ops.cast(1.0, sequence.dtype))
        return ops.sum(sequence * real, axis=1) / count

    def compute_output_shape(self, token_ids_shape):
        return (token_ids_shape[0], self.num_classes)

    def get_config(self):
        config = super().get_config()
        config.update(self._encoder_config())
        config.update(
            {
                "num_classes": self.num_classes,
                "pooling": self.pooling,
                "bag_of_ngrams": self.bag_of_ngrams,
                "ngram_length": self.ngram_length,
            }
        )
        return config
