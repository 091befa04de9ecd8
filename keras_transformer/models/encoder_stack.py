"""The encoder that `TransformerClassifier` and `MaskedLanguageModel` share."""

import numbers

import keras

from keras_transformer.layers import TokenAndPositionEmbedding, TransformerEncoderBlock
from keras_transformer.layers import padding_mask as make_padding_mask
from keras_transformer.layers.attention import get_attention_class, serialize_attention_class


def run_encoder_blocks(blocks, x, padding_mask, training, return_attention_scores=False):
    """`x` through encoder `blocks` in turn: `(states, scores)`, the scores a
    list of one `[B, heads, T, T]` per block when asked for, else empty (and
    not computed: without them the attention may run fused)."""
    attention_scores = []
    for block in blocks:
        if return_attention_scores:
            x, scores = block(
                x, padding_mask=padding_mask, training=training, return_attention_scores=True
            )
            attention_scores.append(scores)
        else:
            x = block(x, padding_mask=padding_mask, training=training)
    return x, attention_scores


class EncoderStack:
    """A `keras.Model` mixin: embedding, its dropout, encoder blocks and an optional final norm.

    The attribute and layer names are the ones saved weights are keyed by, and
    the same in both models, so that a masked LM's weights fit a classifier.
    """

    def _create_encoder_stack(
        self,
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
    ):
        if not isinstance(num_layers, numbers.Integral) or num_layers < 1:
            raise ValueError(f"`num_layers` must be a positive integer, got {num_layers!r}.")
        if not isinstance(d_model, int) or not isinstance(num_heads, int) or d_model % num_heads:
            raise ValueError(
                f"`d_model` ({d_model}) must be divisible by `num_heads` ({num_heads})."
            )
        self.vocabulary_size = vocabulary_size
        self.sequence_length = sequence_length
        self.num_layers = num_layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.positional = positional
        self.normalize_first = normalize_first
        self.attention_class = get_attention_class(attention_class)

        self.embedding = TokenAndPositionEmbedding(
            vocabulary_size,
            sequence_length,
            d_model,
            mask_zero=True,
            positional=positional,
            dtype=self.dtype_policy,
            name="embedding",
        )
        self.embedding_dropout = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.encoder_blocks = [
            TransformerEncoderBlock(
                num_heads=num_heads,
                intermediate_dim=intermediate_dim,
                dropout=dropout,
                activation="gelu",
                normalize_first=normalize_first,
                attention_class=self.attention_class,
                dtype=self.dtype_policy,
                name=f"encoder_block_{index}",
            )
            for index in range(num_layers)
        ]
        # Pre-norm stacks leave the residual stream un-normalized; post-norm ends normalized.
        self.final_norm = (
            keras.layers.LayerNormalization(
                epsilon=1e-5, dtype=self.dtype_policy, name="final_norm"
            )
            if normalize_first
            else None
        )

    @property
    def encoder_layers(self):
        """The layers with weights, in order: embedding, blocks, final norm."""
        return [
            self.embedding,
            *self.encoder_blocks,
            *([self.final_norm] if self.final_norm else []),
        ]

    def _build_encoder_stack(self, token_ids_shape):
        """Builds the stack for `token_ids_shape`; returns the shape of its output."""
        self.embedding.build(token_ids_shape)
        sequence_shape = (*token_ids_shape, self.d_model)
        for block in self.encoder_blocks:
            block.build(sequence_shape)
        if self.final_norm is not None:
            self.final_norm.build(sequence_shape)
        return sequence_shape

    def _encode(self, token_ids, training, with_attention_scores=False):
        """`(states [B, T, d], padding mask [B, T], attention scores)`: the scores a list of one
        `[B, heads, T, T]` per block with `with_attention_scores`, else empty."""
        padding_mask = make_padding_mask(token_ids)
        x = self.embedding_dropout(self.embedding(token_ids), training=training)
        x, attention_scores = run_encoder_blocks(
            self.encoder_blocks, x, padding_mask, training, with_attention_scores
        )
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, padding_mask, attention_scores

    def _encoder_config(self):
        """The constructor arguments of `_create_encoder_stack`, for `get_config`."""
        return {
            "vocabulary_size": self.vocabulary_size,
            "sequence_length": self.sequence_length,
            "num_layers": self.num_layers,
            "d_model": self.d_model,
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "positional": self.positional,
            "normalize_first": self.normalize_first,
            "attention_class": serialize_attention_class(self.attention_class),
        }
