"""Transformer layers written with `keras.ops` only (TensorFlow and JAX backends)."""

from keras_transformer.layers.attention import MultiHeadAttention, scaled_dot_product_attention
from keras_transformer.layers.decoder import TransformerDecoderBlock
from keras_transformer.layers.encoder import TransformerEncoderBlock
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.initializers import ReceptiveFieldGlorotUniform
from keras_transformer.layers.masks import MASKED_LOGIT, causal_mask, merge_masks, padding_mask
from keras_transformer.layers.ngrams import BagOfNgrams
from keras_transformer.layers.position import (
    PositionEmbedding,
    SinusoidalPositionEncoding,
    TokenAndPositionEmbedding,
)

__all__ = [
    "MASKED_LOGIT",
    "BagOfNgrams",
    "FeedForward",
    "MultiHeadAttention",
    "PositionEmbedding",
    "ReceptiveFieldGlorotUniform",
    "SinusoidalPositionEncoding",
    "TokenAndPositionEmbedding",
    "TransformerDecoderBlock",
    "TransformerEncoderBlock",
    "causal_mask",
    "merge_masks",
    "padding_mask",
    "scaled_dot_product_attention",
]
