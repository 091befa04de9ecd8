"""The peer our encoder block is measured against: the same block built from
Keras' own layers, plus our block configured to match it and the weight copy
between the two.

Used by layer_speed.py (TensorFlow), train_throughput.py (inside a classifier)
and gpu_speed_jax.py (JAX, on machines without TensorFlow), so it imports
only Keras and our layers.
"""

import keras
import numpy as np
from keras import ops

from keras_transformer.layers import TransformerEncoderBlock

LAYER_NORM_EPSILON = (
    1e-5  # ours and keras-hub's default; Keras' LayerNormalization defaults to 1e-3
)


class KerasReferenceEncoderBlock(keras.layers.Layer):
    """The paper's post-norm encoder block from Keras layers only.

    `norm(x + MHA(x, x))`, then `norm(x + Dense(d)(activation(Dense(ff)(x))))`,
    head size `d // num_heads`, the same weight order as ours. With
    `dropout`, as ours: on the attention weights (inside Keras' MHA) and on
    both sub-layer outputs before the residual sum. The sub-layers take the
    block's dtype policy, so it runs under mixed precision as ours does.
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        activation="relu",
        dropout=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.layer_norm_epsilon = layer_norm_epsilon
        self.activation = activation
        self.dropout = dropout

    def build(self, input_shape):
        model_dim = input_shape[-1]
        if model_dim % self.num_heads:
            raise ValueError(
                f"the model width {model_dim} is not a multiple of num_heads={self.num_heads}"
            )
        policy = self.dtype_policy
        self.attention = keras.layers.MultiHeadAttention(
            self.num_heads,
            model_dim // self.num_heads,
            dropout=self.dropout,
            dtype=policy,
            name="attention",
        )
        self.attention.build(input_shape, input_shape)
        self.attention_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=policy, name="attention_norm"
        )
        self.attention_norm.build(input_shape)
        self.intermediate_dense = keras.layers.Dense(
            self.intermediate_dim,
            activation=self.activation,
            dtype=policy,
            name="intermediate_dense",
        )
        self.intermediate_dense.build(input_shape)
        self.output_dense = keras.layers.Dense(model_dim, dtype=policy, name="output_dense")
        self.output_dense.build((*input_shape[:-1], self.intermediate_dim))
        self.feed_forward_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=policy, name="feed_forward_norm"
        )
        self.feed_forward_norm.build(input_shape)
        self.attention_dropout = keras.layers.Dropout(self.dropout, dtype=policy)
        self.feed_forward_dropout = keras.layers.Dropout(self.dropout, dtype=policy)

    def call(self, inputs, padding_mask=None, training=None):
        attention_mask = None
        if padding_mask is not None:
            # What Keras MHA builds from mask_zero inputs: query mask AND key mask.
            attention_mask = ops.logical_and(
                ops.expand_dims(padding_mask, -1), ops.expand_dims(padding_mask, -2)
            )
        attended = self.attention(inputs, inputs, attention_mask=attention_mask, training=training)
        x = self.attention_norm(inputs + self.attention_dropout(attended, training=training))
        transformed = self.output_dense(self.intermediate_dense(x))
        return self.feed_forward_norm(x + self.feed_forward_dropout(transformed, training=training))


def matching_encoder_block(num_heads, intermediate_dim, activation="relu", dropout=0.0, **kwargs):
    """Our `TransformerEncoderBlock` with the reference's architecture (post-norm, its epsilon)."""
    return TransformerEncoderBlock(
        num_heads=num_heads,
        intermediate_dim=intermediate_dim,
        dropout=dropout,
        activation=activation,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        normalize_first=False,
        **kwargs,
    )


def sublayer_pairs(ours, reference):
    """(our sub-layer, the reference's) for each weight-holding part, in weight order."""
    return [
        (ours.self_attention, reference.attention),
        (ours.self_attention_norm, reference.attention_norm),
        (ours.feed_forward.intermediate_dense, reference.intermediate_dense),
        (ours.feed_forward.output_dense, reference.output_dense),
        (ours.feed_forward_norm, reference.feed_forward_norm),
    ]


def copy_block_weights(ours, reference):
    """Gives the reference block the weights of ours, sub-layer by sub-layer.

    Raises ValueError naming the sub-layers whose weight shapes differ; after it,
    the two blocks' trainable variables pair up one to one, in the same order.
    """
    for source, target in sublayer_pairs(ours, reference):
        source_shapes = [tuple(w.shape) for w in source.weights]
        target_shapes = [tuple(w.shape) for w in target.weights]
        if source_shapes != target_shapes:
            raise ValueError(
                f"weight layouts differ: {source.name} {source_shapes} vs {target.name} "
                f"{target_shapes}"
            )
        target.set_weights(source.get_weights())
    ours_shapes = [tuple(v.shape) for v in ours.trainable_variables]
    reference_shapes = [tuple(v.shape) for v in reference.trainable_variables]
    if ours_shapes != reference_shapes:
        raise ValueError(f"trainable variables do not pair up: {ours_shapes} vs {reference_shapes}")


def perturb_biases_and_norms(layer, seed, scale=0.1):
    """Adds noise to every weight but the kernels: biases start at 0 and norms at
    1, where a wrong bias or norm parameter would go unnoticed by a comparison."""
    rng = np.random.default_rng(seed)
    for variable in layer.trainable_variables:
        if "kernel" not in variable.path:
            noise = scale * rng.standard_normal(variable.shape).astype("float32")
            variable.assign(variable + noise)
