"""FeedForward against Dense -> activation -> Dense computed in numpy from its weights."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import FeedForward


def as_numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor))


NP_ACTIVATIONS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
    "linear": lambda x: x,
}


def randomize(layer, rng):
    """Random kernels and (non-zero) biases, returned as numpy arrays."""
    weights = [rng.normal(size=w.shape).astype("float32") for w in layer.get_weights()]
    layer.set_weights(weights)
    return weights


def np_feed_forward(x, weights, activation):
    kernel_1, bias_1, kernel_2, bias_2 = weights
    return NP_ACTIVATIONS[activation](x @ kernel_1 + bias_1) @ kernel_2 + bias_2


@pytest.mark.parametrize("activation", ["relu", "tanh", "linear"])
def test_matches_numpy(activation):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    layer = FeedForward(intermediate_dim=16, activation=activation)
    layer.build(x.shape)
    weights = randomize(layer, rng)
    assert [w.shape for w in weights] == [(8, 16), (16,), (16, 8), (8,)]
    output = as_numpy(layer(x))
    assert output.shape == x.shape
    np.testing.assert_allclose(
        output, np_feed_forward(x, weights, activation), rtol=1e-5, atol=1e-5
    )


def test_output_dim():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(3, 4, 8)).astype("float32")
    layer = FeedForward(intermediate_dim=12, output_dim=5)
    layer.build(x.shape)
    assert layer.compute_output_shape(x.shape) == (3, 4, 5)
    weights = randomize(layer, rng)
    assert [w.shape for w in weights] == [(8, 12), (12,), (12, 5), (5,)]
    output = as_numpy(layer(x))
    assert output.shape == (3, 4, 5)
    np.testing.assert_allclose(output, np_feed_forward(x, weights, "relu"), rtol=1e-5, atol=1e-5)


def test_dropout_only_in_training():
    rate = 0.5
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 6, 8)).astype("float32")
    layer = FeedForward(intermediate_dim=16, dropout=rate)
    layer.build(x.shape)
    expected = np_feed_forward(x, randomize(layer, rng), "relu")

    for inference in (layer(x), layer(x, training=False)):
        np.testing.assert_allclose(as_numpy(inference), expected, rtol=1e-5, atol=1e-5)

    trained = as_numpy(layer(x, training=True))
    dropped = trained == 0.0
    # About half the outputs are dropped (192 values: 40..152 is far outside chance).
    assert 40 < dropped.sum() < 152
    # Survivors are rescaled by 1 / (1 - rate), the inverted dropout of the paper's
    # sub-layer dropout.
    np.testing.assert_allclose(
        trained[~dropped], expected[~dropped] / (1 - rate), rtol=1e-5, atol=1e-5
    )


def test_dropout_inactive_in_predict_and_plain_call():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(4, 6, 8)).astype("float32")
    inputs = keras.Input((6, 8))
    model = keras.Model(inputs, FeedForward(16, dropout=0.5)(inputs))
    np.testing.assert_allclose(model.predict(x, verbose=0), model.predict(x, verbose=0))
    np.testing.assert_allclose(
        as_numpy(model(x)), model.predict(x, verbose=0), rtol=1e-6, atol=1e-6
    )


@pytest.mark.parametrize(
    "kwargs",
    [dict(intermediate_dim=0), dict(intermediate_dim=8.0), dict(intermediate_dim=8, dropout=1.0)],
)
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        FeedForward(**kwargs)


def test_passes_keras_mask_through():
    ids = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(10, 8, mask_zero=True)(ids)
    pooled = keras.layers.GlobalAveragePooling1D()(FeedForward(16)(embedded))
    model = keras.Model(ids, pooled)
    short = np.array([[3, 4, 5]], "int32")
    padded = np.array([[3, 4, 5, 0, 0]], "int32")
    # The padding is excluded from the average only if the mask survives FeedForward.
    np.testing.assert_allclose(
        as_numpy(model(short)), as_numpy(model(padded)), rtol=1e-5, atol=1e-6
    )
