"""The Transformer encoder block: self-attention and feed-forward, each residual."""

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.masks import keras_mask


def residual(sublayer, inputs, norm, normalize_first):
    """`norm(x + f(x))` (post-norm, the paper) or `x + f(norm(x))` (pre-norm).

    `sublayer` returns `(output, extra)`; `extra` (attention scores, a cache)
    is passed through.
    """
    if normalize_first:
        output, extra = sublayer(norm(inputs))
        return inputs + output, extra
    output, extra = sublayer(inputs)
    return norm(inputs + output), extra


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerEncoderBlock(keras.layers.Layer):
    """One encoder block: multi-head self-attention, then a feed-forward network.

    Each sub-layer is wrapped in dropout, a residual connection and layer
    normalization, after the sum as in the paper (`normalize_first=False`) or
    before the sub-layer (`normalize_first=True`, more stable for deep stacks).
    Heads have size `d_model // num_heads`.

    Args:
        num_heads: attention heads; must divide the input width.
        intermediate_dim: hidden width of the feed-forward network.
        dropout: rate for attention weights and both sub-layer outputs.
        activation: of the feed-forward network.
        layer_norm_epsilon: of both layer normalizations.
        normalize_first: pre-norm instead of the paper's post-norm.
        kernel_initializer, bias_initializer: of every dense projection.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `[B, T, d_model]`.
        padding_mask: bool `[B, T]`, True at real tokens; defaults to the
            Keras mask of `inputs` (e.g. from `mask_zero=True`).
        attention_mask: bool `[B, T, T]`, True = may attend.
        training: whether dropout is active.
        return_attention_scores: also return the weights `[B, heads, T, T]`.

    Example:

    >>> token_ids = keras.Input((None,), dtype="int32")
    >>> x = TokenAndPositionEmbedding(1000, 128, 64)(token_ids)
    >>> x = TransformerEncoderBlock(num_heads=4, intermediate_dim=128)(x)
    >>> model = keras.Model(token_ids, x)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.1.
        Xiong et al., "On Layer Normalization in the Transformer Architecture", 2020.
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        dropout=0.0,
        activation="relu",
        layer_norm_epsilon=1e-5,
        normalize_first=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def build(self, inputs_shape):
        model_dim = inputs_shape[-1]
        if model_dim is None or model_dim % self.num_heads:
            raise ValueError(
                f"The input width ({model_dim}) must be a multiple of `num_heads` ({self.num_heads})."
            )
        initializers = dict(
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
        )
        self.self_attention = MultiHeadAttention(
            self.num_heads, model_dim // self.num_heads, dropout=self.dropout,
            name="self_attention", **initializers,
        )
        self.self_attention.build(inputs_shape, inputs_shape)
        self.self_attention_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.self_attention_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="self_attention_norm"
        )
        self.self_attention_norm.build(inputs_shape)
        self.feed_forward = FeedForward(
            self.intermediate_dim, self.activation, self.dropout, name="feed_forward", **initializers
        )
        self.feed_forward.build(inputs_shape)
        self.feed_forward_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="feed_forward_norm"
        )
        self.feed_forward_norm.build(inputs_shape)

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        if padding_mask is None:
            padding_mask = keras_mask(inputs)

        def self_attention(x):
            output, scores = self.self_attention(
                x,
                x,
                query_mask=padding_mask,
                value_mask=padding_mask,
                attention_mask=attention_mask,
                return_attention_scores=True,
                training=training,
            )
            return self.self_attention_dropout(output, training=training), scores

        def feed_forward(x):
            return self.feed_forward(x, training=training), None

        x, scores = residual(self_attention, inputs, self.self_attention_norm, self.normalize_first)
        x, _ = residual(feed_forward, x, self.feed_forward_norm, self.normalize_first)
        if return_attention_scores:
            return x, scores
        return x

    def compute_mask(self, inputs, mask=None, **kwargs):
        return mask

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "activation": keras.activations.serialize(self.activation),
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "normalize_first": self.normalize_first,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
