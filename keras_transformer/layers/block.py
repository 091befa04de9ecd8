"""What encoder and decoder blocks share: arguments, config, sub-layer builders, residuals."""

import keras

from keras_transformer.layers.attention import (
    MultiHeadAttention,
    get_attention_class,
    serialize_attention_class,
)
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.initializers import clone_initializer


class TransformerBlock(keras.layers.Layer):
    """Base of `TransformerEncoderBlock` and `TransformerDecoderBlock`; not used alone.

    Holds the arguments both blocks take (see their docstrings), their
    config, and the builders of the sub-layers, so the two blocks differ only
    in which sub-layers they chain.
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
        attention_class=MultiHeadAttention,
        **kwargs,
    ):
        super().__init__(**kwargs)
        for name, number in (("num_heads", num_heads), ("intermediate_dim", intermediate_dim)):
            if not isinstance(number, int) or number <= 0:
                raise ValueError(f"`{name}` must be a positive integer, got {number!r}.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1), got {dropout!r}.")
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.normalize_first = normalize_first
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.attention_class = get_attention_class(attention_class)
        self.supports_masking = True

    def _head_dim(self, model_dim):
        if model_dim is None or model_dim % self.num_heads:
            raise ValueError(
                f"The input width ({model_dim}) must be a multiple of "
                f"`num_heads` ({self.num_heads})."
            )
        return model_dim // self.num_heads

    def _sublayer_arguments(self, name):
        return dict(
            kernel_initializer=clone_initializer(self.kernel_initializer, name),
            bias_initializer=clone_initializer(self.bias_initializer, name),
            dtype=self.dtype_policy,
            name=name,
        )

    def _build_attention(self, name, query_shape, value_shape):
        attention = self.attention_class(
            self.num_heads,
            self._head_dim(query_shape[-1]),
            dropout=self.dropout,
            **self._sublayer_arguments(name),
        )
        attention.build(query_shape, value_shape)
        return attention

    def _build_feed_forward(self, input_shape):
        feed_forward = FeedForward(
            self.intermediate_dim,
            self.activation,
            self.dropout,
            **self._sublayer_arguments("feed_forward"),
        )
        feed_forward.build(input_shape)
        return feed_forward

    def _build_norm(self, name, input_shape):
        # Keras' LayerNormalization computes in float32 under mixed precision.
        norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )
        norm.build(input_shape)
        return norm

    def _residual(self, sublayer, inputs, norm, *arguments):
        """`norm(x + f(x))` (post-norm, the paper) or `x + f(norm(x))` (pre-norm).

        `sublayer(x, *arguments)` returns `(output, extra)`; `extra` (attention
        scores, a cache) is passed through. Arguments rather than lambdas:
        autograph, which converts the decoding loop, can mistake one lambda's
        source for another function's.
        """
        if self.normalize_first:
            output, extra = sublayer(norm(inputs), *arguments)
            return inputs + output, extra
        output, extra = sublayer(inputs, *arguments)
        return norm(inputs + output), extra

    def _feed_forward_sublayer(self, x, training=None):
        return self.feed_forward(x, training=training), None

    def compute_output_spec(self, *args, **kwargs):
        # Symbolic calls trace `call`, which knows every output it may return
        # (scores, a cache); Keras would otherwise build them from
        # `compute_output_shape`, which it calls with shapes only.
        return keras.Operation.compute_output_spec(self, *args, **kwargs)

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
                "attention_class": serialize_attention_class(self.attention_class),
            }
        )
        return config
