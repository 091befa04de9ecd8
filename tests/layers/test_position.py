"""Position encodings against the paper's formulas, computed here in numpy."""

import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import (
    PositionEmbedding,
    SinusoidalPositionEncoding,
    TokenAndPositionEmbedding,
)


def np_sinusoids(length, depth, start=0, max_wavelength=10000.0):
    """PE[p, 2i] = sin(p / w**(2i/d)), PE[p, 2i+1] = cos(p / w**(2i/d)), loop by loop."""
    table = np.zeros((length, depth), dtype=np.float64)
    for row in range(length):
        p = row + start
        for column in range(depth):
            i = column // 2
            angle = p / max_wavelength ** (2 * i / depth)
            table[row, column] = math.sin(angle) if column % 2 == 0 else math.cos(angle)
    return table


def as_numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor))


# SinusoidalPositionEncoding


def test_reference_formula_spot_values():
    # The reference itself, against values worked out by hand.
    table = np_sinusoids(3, 4)
    np.testing.assert_allclose(table[0], [0.0, 1.0, 0.0, 1.0])
    np.testing.assert_allclose(table[2], [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)])


@pytest.mark.parametrize("depth", [16, 7, 1])
@pytest.mark.parametrize("start_index", [0, 5])
def test_sinusoidal_matches_paper(depth, start_index):
    inputs = np.random.default_rng(0).normal(size=(3, 9, depth)).astype("float32")
    encoding = as_numpy(SinusoidalPositionEncoding()(inputs, start_index=start_index))
    assert encoding.shape == inputs.shape
    expected = np_sinusoids(9, depth, start=start_index)
    for batch in range(3):  # same encoding for every sequence, independent of values
        np.testing.assert_allclose(encoding[batch], expected, atol=1e-5)


def test_sinusoidal_max_wavelength():
    inputs = np.zeros((1, 6, 6), "float32")
    encoding = as_numpy(SinusoidalPositionEncoding(max_wavelength=100)(inputs))
    np.testing.assert_allclose(encoding[0], np_sinusoids(6, 6, max_wavelength=100.0), atol=1e-5)


def test_sinusoidal_start_index_continues_the_sequence():
    # Encoding positions 4..6 on their own equals rows 4..6 of one long encoding.
    layer = SinusoidalPositionEncoding()
    full = as_numpy(layer(np.zeros((1, 10, 8), "float32")))
    part = as_numpy(layer(np.zeros((1, 3, 8), "float32"), start_index=4))
    np.testing.assert_allclose(part[0], full[0, 4:7], atol=1e-6)


def test_sinusoidal_rejects_bad_wavelength():
    with pytest.raises(ValueError, match="max_wavelength"):
        SinusoidalPositionEncoding(max_wavelength=1)


# PositionEmbedding


def test_position_embedding_returns_table_rows():
    layer = PositionEmbedding(sequence_length=10)
    inputs = np.random.default_rng(1).normal(size=(2, 5, 4)).astype("float32")
    layer.build(inputs.shape)
    table = np.random.default_rng(2).normal(size=(10, 4)).astype("float32")
    layer.set_weights([table])
    output = as_numpy(layer(inputs))
    assert output.shape == (2, 5, 4)
    np.testing.assert_allclose(output[0], table[:5])
    np.testing.assert_allclose(output[1], table[:5])
    shifted = as_numpy(layer(inputs, start_index=3))
    np.testing.assert_allclose(shifted[0], table[3:8])


def test_position_embedding_learns_positions():
    """A task that only position information can solve: predict each step's index.

    The inputs are all zeros and the classifier on top is frozen, so the loss
    can only fall if the position table itself is trained.
    """
    length, depth = 6, 8
    inputs = keras.Input((length, depth))
    positions = PositionEmbedding(length, name="positions")(inputs)
    logits = keras.layers.Dense(length, name="classifier", trainable=False)(positions)
    model = keras.Model(inputs, logits)
    model.compile(
        optimizer=keras.optimizers.Adam(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    x = np.zeros((8, length, depth), "float32")
    y = np.tile(np.arange(length), (8, 1))
    table_before = as_numpy(model.get_layer("positions").position_embeddings)
    loss_before = float(model.evaluate(x, y, verbose=0))
    # 40 steps on the batch (x, y). Every row of it is the same, so one epoch
    # over 40 copies is those 40 steps, without 40 epochs' fixed costs.
    model.fit(np.tile(x, (40, 1, 1)), np.tile(y, (40, 1)), epochs=1, batch_size=8, verbose=0)
    loss_after = float(model.evaluate(x, y, verbose=0))
    table_after = as_numpy(model.get_layer("positions").position_embeddings)
    assert np.abs(table_after - table_before).max() > 1e-2
    assert loss_after < 0.5 * loss_before
    predictions = np.argmax(as_numpy(model(x[:1])), axis=-1)[0]
    np.testing.assert_array_equal(predictions, np.arange(length))


def test_position_embedding_bad_arguments():
    with pytest.raises(ValueError, match="sequence_length"):
        PositionEmbedding(sequence_length=0)
    with pytest.raises(ValueError, match="sequence_length"):
        PositionEmbedding(sequence_length=4)(np.zeros((1, 5, 2), "float32"))


def test_position_embedding_rejects_positions_past_the_table():
    # Built for 4 positions; positions 2..4 do not exist. On every backend this
    # must raise rather than silently return other rows (e.g. clamped slices).
    layer = PositionEmbedding(sequence_length=4)
    layer(np.zeros((1, 3, 2), "float32"))
    with pytest.raises(ValueError, match=r"Positions 2\.\.4 are past `sequence_length` \(4\)"):
        layer(np.zeros((1, 3, 2), "float32"), start_index=2)


# TokenAndPositionEmbedding

VOCAB, LENGTH, DIM = 20, 8, 6
IDS = np.array([[3, 7, 1, 9, 0, 0], [5, 0, 2, 4, 8, 0]], dtype="int32")


def token_table(layer):
    return as_numpy(layer.token_embedding.embeddings)


@pytest.mark.parametrize("scale", [True, False])
def test_token_and_sinusoidal_position(scale):
    layer = TokenAndPositionEmbedding(VOCAB, LENGTH, DIM, scale_embeddings=scale)
    output = as_numpy(layer(IDS))
    assert output.shape == (2, 6, DIM)
    factor = math.sqrt(DIM) if scale else 1.0
    expected = token_table(layer)[IDS] * factor + np_sinusoids(6, DIM)[None]
    np.testing.assert_allclose(output, expected, atol=1e-5)


def test_token_and_sinusoidal_position_start_index():
    layer = TokenAndPositionEmbedding(VOCAB, LENGTH, DIM)
    output = as_numpy(layer(IDS[:, :2], start_index=3))
    expected = token_table(layer)[IDS[:, :2]] * math.sqrt(DIM) + np_sinusoids(2, DIM, start=3)[None]
    np.testing.assert_allclose(output, expected, atol=1e-5)


@pytest.mark.parametrize("scale", [True, False])
def test_token_and_learned_position(scale):
    layer = TokenAndPositionEmbedding(
        VOCAB, LENGTH, DIM, positional="learned", scale_embeddings=scale
    )
    output = as_numpy(layer(IDS))
    positions = as_numpy(layer.position_encoding.position_embeddings)
    assert positions.shape == (LENGTH, DIM)
    factor = math.sqrt(DIM) if scale else 1.0
    expected = token_table(layer)[IDS] * factor + positions[None, :6]
    np.testing.assert_allclose(output, expected, atol=1e-5)
    # Learned positions are trainable weights of the layer; sinusoids are not.
    assert len(layer.trainable_weights) == 2
    assert len(TokenAndPositionEmbedding(VOCAB, LENGTH, DIM).trainable_weights) <= 1


class _MaskProbe(keras.layers.Layer):
    """Returns, per position, 1.0 where the mask it receives is True (-1 without a mask)."""

    def call(self, inputs, mask=None):
        if mask is None:
            return ops.zeros(ops.shape(inputs)[:2]) - 1.0
        return ops.cast(mask, "float32")

    def compute_output_shape(self, input_shape):
        return input_shape[:2]

    def compute_mask(self, inputs, mask=None):
        return None


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_mask_zero_reaches_downstream_layers(positional):
    ids = keras.Input((None,), dtype="int32")
    embedded = TokenAndPositionEmbedding(VOCAB, LENGTH, DIM, mask_zero=True, positional=positional)(
        ids
    )
    model = keras.Model(
        ids, [_MaskProbe()(embedded), keras.layers.GlobalAveragePooling1D()(embedded)]
    )
    received, pooled = model(IDS)
    np.testing.assert_array_equal(as_numpy(received), (IDS != 0).astype("float32"))
    # A standard Keras layer honours it too: the average is over real tokens only.
    vectors = as_numpy(model.layers[1](IDS))
    real = (IDS != 0)[..., None]
    expected = (vectors * real).sum(axis=1) / real.sum(axis=1)
    np.testing.assert_allclose(as_numpy(pooled), expected, atol=1e-5)


def test_no_mask_without_mask_zero():
    ids = keras.Input((None,), dtype="int32")
    embedded = TokenAndPositionEmbedding(VOCAB, LENGTH, DIM, mask_zero=False)(ids)
    model = keras.Model(ids, _MaskProbe()(embedded))
    np.testing.assert_array_equal(as_numpy(model(IDS)), -np.ones(IDS.shape, "float32"))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(positional="relative"), "positional"),
        (dict(vocabulary_size=0), "vocabulary_size"),
        (dict(sequence_length=-1), "sequence_length"),
        (dict(embedding_dim=2.5), "embedding_dim"),
        (dict(embedding_dim="8"), "embedding_dim"),
    ],
)
def test_token_and_position_bad_arguments(kwargs, message):
    arguments = dict(vocabulary_size=VOCAB, sequence_length=LENGTH, embedding_dim=DIM)
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        TokenAndPositionEmbedding(**arguments)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_token_and_position_too_long_static(positional):
    layer = TokenAndPositionEmbedding(VOCAB, 4, DIM, positional=positional)
    with pytest.raises(ValueError, match="sequence_length"):
        layer(np.ones((1, 5), "int32"))


def test_token_and_learned_position_too_long_dynamic():
    # Built for any length in a Functional model, then given more tokens than it has positions.
    ids = keras.Input((None,), dtype="int32")
    model = keras.Model(ids, TokenAndPositionEmbedding(VOCAB, 4, DIM, positional="learned")(ids))
    model(np.ones((1, 4), "int32"))  # fits
    with pytest.raises(ValueError, match=r"past `sequence_length` \(4\)"):
        model(np.ones((1, 6), "int32"))
