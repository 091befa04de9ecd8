"""TransformerEncoderBlock: numpy reference, padding invariance, masks, scores, training."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import TokenAndPositionEmbedding, TransformerEncoderBlock

D_MODEL, HEADS, FF = 8, 2, 16
VOCAB = 30
ATOL = 1e-5


def as_numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor))


@pytest.fixture(scope="module", params=[False, True], ids=["post_norm", "pre_norm"])
def block(request, randomize):
    keras.utils.set_random_seed(7)
    layer = TransformerEncoderBlock(HEADS, FF, normalize_first=request.param)
    layer(np.zeros((1, 4, D_MODEL), "float32"))
    randomize(layer, seed=11)
    return layer


@pytest.fixture(scope="module")
def masked_model(block):
    """ids -> Embedding(mask_zero=True) -> block, so the block gets a Keras mask."""
    keras.utils.set_random_seed(8)
    ids = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(VOCAB, D_MODEL, mask_zero=True)(ids)
    return keras.Model(ids, block(embedded))


def random_inputs(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def test_matches_numpy_reference(block, np_reference):
    x = random_inputs(2, 5, D_MODEL)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=bool)
    output = as_numpy(block(x, padding_mask=mask))
    expected, _ = np_reference.encoder_block(block, x.astype(np.float64), padding_mask=mask)
    np.testing.assert_allclose(output, expected, atol=ATOL, rtol=1e-4)
    # Without any mask, every token attends every token.
    expected, _ = np_reference.encoder_block(block, x.astype(np.float64))
    np.testing.assert_allclose(as_numpy(block(x)), expected, atol=ATOL, rtol=1e-4)


def test_padding_invariance_with_keras_mask(masked_model):
    ids = np.array([[4, 9, 2, 7, 5], [3, 8, 6, 0, 0]], dtype="int32")
    real = ids != 0
    short = as_numpy(masked_model(ids))
    longer = as_numpy(masked_model(np.pad(ids, ((0, 0), (0, 3)))))
    np.testing.assert_allclose(longer[:, :5][real], short[real], atol=ATOL)
    # The padded second sequence gives what it gives on its own, unpadded.
    alone = as_numpy(masked_model(ids[1:, :3]))
    np.testing.assert_allclose(short[1, :3], alone[0], atol=ATOL)


def test_padding_invariance_with_explicit_mask(block):
    x = random_inputs(2, 5, D_MODEL)
    unpadded = as_numpy(block(x))
    mask = np.array([[True] * 5 + [False] * 3] * 2)
    for seed in (1, 2):  # two different junk values in the padding
        padded = np.concatenate([x, random_inputs(2, 3, D_MODEL, seed=seed) * 5], axis=1)
        output = as_numpy(block(padded, padding_mask=mask))
        np.testing.assert_allclose(output[:, :5], unpadded, atol=ATOL)


def test_padding_in_the_middle_does_not_leak(block):
    # A masked token anywhere (not just at the end) is invisible to real tokens.
    x = random_inputs(1, 6, D_MODEL)
    mask = np.array([[True, True, False, True, True, True]])
    changed = x.copy()
    changed[:, 2] += 3.0 * random_inputs(D_MODEL, seed=6)
    a = as_numpy(block(x, padding_mask=mask))
    b = as_numpy(block(changed, padding_mask=mask))
    np.testing.assert_allclose(a[:, mask[0]], b[:, mask[0]], atol=ATOL)


def test_change_matters_only_where_it_should(block):
    x = random_inputs(2, 6, D_MODEL)
    changed = x.copy()
    # not a constant shift: layer norm would erase it
    changed[:, 3] += random_inputs(2, D_MODEL, seed=5)
    # Bidirectional by default: a later token changes an earlier output...
    difference = np.abs(as_numpy(block(x)) - as_numpy(block(changed)))
    assert difference[:, 0].max() > 1e-3
    # ...but not under a causal attention mask: outputs before position 3 stay put.
    causal = np.tril(np.ones((6, 6), dtype=bool))[None]
    a = as_numpy(block(x, attention_mask=causal))
    b = as_numpy(block(changed, attention_mask=causal))
    np.testing.assert_allclose(a[:, :3], b[:, :3], atol=ATOL)
    assert np.abs(a[:, 3:] - b[:, 3:]).max() > 1e-3


def test_return_attention_scores(block, np_reference):
    x = random_inputs(2, 5, D_MODEL)
    mask = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], dtype=bool)
    output, scores = block(x, padding_mask=mask, return_attention_scores=True)
    output, scores = as_numpy(output), as_numpy(scores)
    assert scores.shape == (2, HEADS, 5, 5)
    np.testing.assert_allclose(output, as_numpy(block(x, padding_mask=mask)), atol=1e-6)
    for b in range(2):
        real = mask[b]
        # Padded keys get exactly zero weight; real query rows are distributions.
        np.testing.assert_array_equal(scores[b][:, real][:, :, ~real], 0.0)
        np.testing.assert_allclose(scores[b][:, real].sum(-1), 1.0, atol=1e-5)
        # A padded query attends nowhere.
        np.testing.assert_array_equal(scores[b][:, ~real], 0.0)
    _, expected = np_reference.encoder_block(block, x.astype(np.float64), padding_mask=mask)
    np.testing.assert_allclose(scores, expected, atol=ATOL)


def test_keras_mask_propagates_through_block(masked_model):
    ids = masked_model.inputs[0]
    pooled = keras.layers.GlobalAveragePooling1D()(masked_model(ids))
    pooling_model = keras.Model(ids, pooled)
    short = np.array([[4, 9, 2]], dtype="int32")
    outputs = as_numpy(masked_model(short))
    np.testing.assert_allclose(as_numpy(pooling_model(short)), outputs.mean(axis=1), atol=ATOL)
    # Padding does not enter the average, so it changes nothing.
    padded = np.pad(short, ((0, 0), (0, 4)))
    np.testing.assert_allclose(as_numpy(pooling_model(padded)), outputs.mean(axis=1), atol=ATOL)


def test_dropout_only_in_training():
    layer = TransformerEncoderBlock(HEADS, FF, dropout=0.5)
    x = random_inputs(2, 5, D_MODEL)
    inference = as_numpy(layer(x))
    np.testing.assert_allclose(as_numpy(layer(x, training=False)), inference, atol=1e-6)
    assert np.abs(as_numpy(layer(x, training=True)) - inference).max() > 1e-3


@pytest.mark.parametrize("num_heads", [3, 5])
def test_heads_must_divide_width(num_heads):
    with pytest.raises(ValueError, match="multiple of `num_heads`"):
        TransformerEncoderBlock(num_heads, FF)(random_inputs(1, 4, D_MODEL))


def test_training_step_reduces_loss():
    ids = keras.Input((None,), dtype="int32")
    x = TokenAndPositionEmbedding(VOCAB, 16, D_MODEL)(ids)
    x = TransformerEncoderBlock(HEADS, FF, normalize_first=False)(x)
    x = TransformerEncoderBlock(HEADS, FF, normalize_first=True)(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    model = keras.Model(ids, keras.layers.Dense(2)(x))
    model.compile(
        optimizer=keras.optimizers.SGD(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, VOCAB, size=(16, 6)).astype("int32")
    tokens[8:, 4:] = 0  # some padding
    labels = (tokens[:, 0] % 2).astype("int32")

    before = [as_numpy(w) for w in model.trainable_weights]
    loss_before = float(model.evaluate(tokens, labels, verbose=0))
    model.train_on_batch(tokens, labels)
    loss_after = float(model.evaluate(tokens, labels, verbose=0))
    assert np.isfinite(loss_after)
    assert loss_after < loss_before

    # Gradients reach every block weight. (Key biases shift every logit of a
    # query equally, so softmax makes their gradient zero: they are exempt.)
    for variable, old in zip(model.trainable_weights, before):
        if variable.path.endswith("key/bias"):
            continue
        assert np.abs(as_numpy(variable) - old).max() > 0, variable.path


def test_compute_output_shape_is_the_real_shape():
    block = TransformerEncoderBlock(num_heads=2, intermediate_dim=16)
    x = np.random.default_rng(0).normal(size=(3, 5, 8)).astype("float32")
    assert block.compute_output_shape(x.shape) == tuple(block(x).shape)
    # Symbolic calls, with the scores too.
    output, scores = block(keras.Input((None, 8)), return_attention_scores=True)
    assert tuple(output.shape) == (None, None, 8) and tuple(scores.shape) == (None, 2, None, None)
