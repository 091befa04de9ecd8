"""benchmarks/reference_block.py: the Keras-built peer our encoder block is timed against.

layer_speed.py, train_throughput.py and gpu_speed_jax.py compare speeds with
it, which only means something if it is the same block as ours: the same
weights (shapes, count, order), the same function once ours' weights are
copied in, dropout where ours has it, and the dtype policy it is given.
Any backend: the JAX benchmark uses it without TensorFlow.
"""

import keras
import numpy as np
import pytest
from reference_block import (
    KerasReferenceEncoderBlock,
    copy_block_weights,
    matching_encoder_block,
    perturb_biases_and_norms,
)

BATCH, LENGTH, WIDTH, HEADS, INTERMEDIATE = 2, 5, 16, 2, 32
SHAPE = (BATCH, LENGTH, WIDTH)


def built_pair(activation="relu", dropout=0.0, **kwargs):
    ours = matching_encoder_block(
        HEADS, INTERMEDIATE, activation=activation, dropout=dropout, **kwargs
    )
    ours.build(SHAPE)
    reference = KerasReferenceEncoderBlock(
        HEADS, INTERMEDIATE, activation=activation, dropout=dropout, **kwargs
    )
    reference.build(SHAPE)
    return ours, reference


def test_the_reference_has_the_papers_parameter_count_and_ours_weight_order():
    ours, reference = built_pair()
    attention = 4 * (WIDTH * WIDTH + WIDTH)  # query, key, value and output projections with biases
    norms = 2 * (2 * WIDTH)  # scale and offset, twice
    feed_forward = (WIDTH * INTERMEDIATE + INTERMEDIATE) + (INTERMEDIATE * WIDTH + WIDTH)
    assert reference.count_params() == attention + norms + feed_forward == 2224
    assert ours.count_params() == reference.count_params()
    assert [tuple(v.shape) for v in reference.trainable_variables] == [
        tuple(v.shape) for v in ours.trainable_variables
    ]


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_with_ours_weights_the_reference_computes_ours_function(activation):
    ours, reference = built_pair(activation=activation)
    perturb_biases_and_norms(ours, seed=0)
    copy_block_weights(ours, reference)
    rng = np.random.default_rng(0)
    inputs = rng.standard_normal(SHAPE).astype("float32")
    padding_mask = np.arange(LENGTH)[None, :] < np.array([[LENGTH], [3]])
    expected = np.asarray(ours(inputs, padding_mask=padding_mask))
    actual = np.asarray(reference(inputs, padding_mask=padding_mask))
    # Keras attends uniformly from a padded query where ours gives it zero
    # weights, so the two agree at real tokens only.
    np.testing.assert_allclose(actual[padding_mask], expected[padding_mask], atol=1e-5)


def test_perturbing_moves_the_biases_and_norms_and_leaves_the_kernels():
    ours, _ = built_pair()
    before = {v.path: np.asarray(v) for v in ours.trainable_variables}
    perturb_biases_and_norms(ours, seed=0)
    for variable in ours.trainable_variables:
        changed = not np.array_equal(np.asarray(variable), before[variable.path])
        assert changed == ("kernel" not in variable.path), variable.path


def test_weights_of_another_size_are_refused_naming_the_sublayer():
    ours = matching_encoder_block(HEADS, INTERMEDIATE)
    ours.build(SHAPE)
    wider = KerasReferenceEncoderBlock(HEADS, 2 * INTERMEDIATE)
    wider.build(SHAPE)
    with pytest.raises(ValueError, match="weight layouts differ: intermediate_dense"):
        copy_block_weights(ours, wider)


def test_dropout_applies_where_ours_has_it_and_in_training_only(monkeypatch):
    _, reference = built_pair(dropout=0.5)
    inputs = np.random.default_rng(0).standard_normal(SHAPE).astype("float32")
    inference = np.asarray(reference(inputs, training=False))
    np.testing.assert_array_equal(np.asarray(reference(inputs, training=False)), inference)

    training_calls = []
    call = keras.layers.Dropout.call

    def counting_call(layer, inputs, training=False):
        if training:
            training_calls.append(layer.rate)
        return call(layer, inputs, training=training)

    monkeypatch.setattr(keras.layers.Dropout, "call", counting_call)
    outputs = np.asarray(reference(inputs, training=True))
    # On the attention weights (inside Keras' attention) and on both sub-layer outputs.
    assert training_calls == [0.5, 0.5, 0.5]
    assert not np.allclose(outputs, inference)


def test_every_sublayer_takes_the_blocks_dtype_policy():
    _, reference = built_pair(dtype="mixed_bfloat16")
    sublayers = [
        reference.attention,
        reference.attention_norm,
        reference.intermediate_dense,
        reference.output_dense,
        reference.feed_forward_norm,
    ]
    assert [layer.dtype_policy.name for layer in sublayers] == ["mixed_bfloat16"] * len(sublayers)
    outputs = reference(np.zeros(SHAPE, "float32") + 1.0)
    assert keras.backend.standardize_dtype(outputs.dtype) == "bfloat16"


def test_a_width_the_heads_do_not_divide_is_refused():
    block = KerasReferenceEncoderBlock(3, INTERMEDIATE)
    with pytest.raises(ValueError, match="not a multiple of num_heads=3"):
        block.build(SHAPE)
