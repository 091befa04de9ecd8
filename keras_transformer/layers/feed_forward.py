"""The position-wise feed-forward network of a Transformer block."""

import keras
from keras import ops

from keras_transformer.layers.initializers import clone_initializer


@keras.saving.register_keras_serializable(package="keras_transformer")
class FeedForward(keras.layers.Layer):
    """Two dense layers applied at every position: `Dense(d)(act(Dense(intermediate)(x)))`.

    Dropout applies to the output, the sub-layer dropout of the paper, so a
    block adds the result to its residual stream directly.

    Args:
        intermediate_dim: width of the hidden layer (d_ff, 2048 in the paper).
        activation: of the hidden layer, any Keras activation.
        dropout: rate on the output.
        output_dim: defaults to the input width.
        kernel_initializer, bias_initializer: of both dense layers (each
            gets its own copy, see `clone_initializer`).
        **kwargs: base `keras.layers.Layer` arguments.

    Example:

    >>> import keras
    >>> from keras_transformer.layers import FeedForward
    >>> feed_forward = FeedForward(intermediate_dim=64)
    >>> tuple(feed_forward(keras.random.normal((2, 5, 16))).shape)
    (2, 5, 16)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.3.
    """

    def __init__(
        self,
        intermediate_dim,
        activation="relu",
        dropout=0.0,
        output_dim=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if not isinstance(intermediate_dim, int) or intermediate_dim <= 0:
            raise ValueError(
                f"`intermediate_dim` must be a positive integer, got {intermediate_dim!r}."
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1), got {dropout!r}.")
        self.intermediate_dim = intermediate_dim
        self.activation = keras.activations.get(activation)
        self.dropout = dropout
        self.output_dim = output_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def build(self, input_shape):
        def dense_arguments(name):
            return dict(
                kernel_initializer=clone_initializer(self.kernel_initializer, name),
                bias_initializer=clone_initializer(self.bias_initializer, name),
                dtype=self.dtype_policy,
                name=name,
            )

        self.intermediate_dense = keras.layers.Dense(
            self.intermediate_dim,
            activation=self.activation,
            **dense_arguments("intermediate_dense"),
        )
        self.intermediate_dense.build(input_shape)
        self.output_dense = keras.layers.Dense(
            self.output_dim or input_shape[-1], **dense_arguments("output_dense")
        )
        self.output_dense.build((*input_shape[:-1], self.intermediate_dim))
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    def call(self, inputs, training=None):
        # Dense layers on [N, d] rather than [..., d]: on the TensorFlow
        # backend a rank-3 `Dense` is a `tensordot` with a dozen shape ops,
        # the bulk of the work when decoding one token.
        shape = ops.shape(inputs)
        flat = ops.reshape(inputs, (-1, inputs.shape[-1]))
        outputs = self.output_dense(self.intermediate_dense(flat))
        outputs = ops.reshape(outputs, (*shape[:-1], outputs.shape[-1]))
        return self.dropout_layer(outputs, training=training)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.output_dim or input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "intermediate_dim": self.intermediate_dim,
                "activation": keras.activations.serialize(self.activation),
                "dropout": self.dropout,
                "output_dim": self.output_dim,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
