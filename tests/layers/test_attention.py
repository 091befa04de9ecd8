"""scaled_dot_product_attention and MultiHeadAttention on their own."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import MultiHeadAttention, scaled_dot_product_attention


def numpy_attention(query, key, value, mask=None):
    logits = query @ np.swapaxes(key, -1, -2) / np.sqrt(query.shape[-1])
    if mask is not None:
        logits = np.where(mask, logits, -np.inf)
    logits = logits - logits.max(axis=-1, keepdims=True)
    weights = np.exp(logits)
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return weights @ value, weights


@pytest.fixture
def rng():
    return np.random.default_rng(7)


@pytest.mark.parametrize("batch_shape", [(2,), (2, 3)])
@pytest.mark.parametrize("with_mask", [False, True])
def test_scaled_dot_product_attention_matches_numpy(rng, batch_shape, with_mask):
    query = rng.normal(size=(*batch_shape, 4, 5)).astype("float32")
    key = rng.normal(size=(*batch_shape, 6, 5)).astype("float32")
    value = rng.normal(size=(*batch_shape, 6, 3)).astype("float32")
    mask = None
    if with_mask:
        mask = rng.random((*batch_shape, 4, 6)) < 0.6
        mask[..., 0] = True  # every row may attend somewhere
    expected_output, expected_weights = numpy_attention(query, key, value, mask)
    output, weights = scaled_dot_product_attention(query, key, value, mask)
    np.testing.assert_allclose(ops.convert_to_numpy(output), expected_output, atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(weights), expected_weights, atol=1e-6)


def test_mask_broadcasts_over_batch_and_rows(rng):
    query = rng.normal(size=(2, 3, 4)).astype("float32")
    key = rng.normal(size=(2, 5, 4)).astype("float32")
    key_mask = np.array([True, True, False, True, False])
    output, weights = scaled_dot_product_attention(query, key, key, key_mask[None, None, :])
    expected_output, _ = numpy_attention(query, key, key, np.broadcast_to(key_mask, (2, 3, 5)))
    np.testing.assert_allclose(ops.convert_to_numpy(output), expected_output, atol=1e-5)
    assert np.all(ops.convert_to_numpy(weights)[..., ~key_mask] == 0)


def test_fully_masked_row_is_finite_and_attends_nowhere(rng):
    query = rng.normal(size=(1, 3, 4)).astype("float32")
    key = rng.normal(size=(1, 5, 4)).astype("float32")
    mask = np.ones((1, 3, 5), bool)
    mask[0, 1] = False
    output, weights = scaled_dot_product_attention(query, key, key, mask)
    output, weights = ops.convert_to_numpy(output), ops.convert_to_numpy(weights)
    assert np.all(np.isfinite(output)) and np.all(np.isfinite(weights))
    assert np.all(weights[0, 1] == 0) and np.all(output[0, 1] == 0)
    np.testing.assert_allclose(weights[0, [0, 2]].sum(-1), 1.0, atol=1e-6)


def test_fully_masked_row_has_finite_gradients(rng):
    layer = MultiHeadAttention(num_heads=2, key_dim=3)
    query = keras.Input((4, 6))
    mask = keras.Input((4, 4), dtype="bool")
    model = keras.Model([query, mask], layer(query, query, attention_mask=mask))
    model.compile(optimizer="sgd", loss="mse")
    attention_mask = np.ones((2, 4, 4), bool)
    attention_mask[:, 2] = False
    x = rng.normal(size=(2, 4, 6)).astype("float32")
    model.train_on_batch([x, attention_mask], np.zeros((2, 4, 6), "float32"))
    assert all(np.all(np.isfinite(ops.convert_to_numpy(w))) for w in model.weights)


def _numpy_multi_head(layer, query, value):
    weights = [ops.convert_to_numpy(w) for w in layer.weights]
    (
        query_kernel,
        query_bias,
        key_kernel,
        key_bias,
        value_kernel,
        value_bias,
        out_kernel,
        out_bias,
    ) = weights
    q = np.einsum("btd,dnh->bnth", query, query_kernel) + query_bias[:, None]
    k = np.einsum("bsd,dnh->bnsh", value, key_kernel) + key_bias[:, None]
    v = np.einsum("bsd,dnh->bnsh", value, value_kernel) + value_bias[:, None]
    attended, _ = numpy_attention(q, k, v)
    return np.einsum("bnth,nh...->bt...", attended, out_kernel) + out_bias


@pytest.mark.parametrize(
    "options",
    [
        # Bias [heads, 1] with heads == value length: Keras 3.15's TensorFlow
        # ops.add mistakes it for a channels-first bias_add, so
        # keras.layers.MultiHeadAttention adds it along the sequence axis.
        dict(num_heads=3, key_dim=4, value_dim=1, value_length=3),
        dict(num_heads=2, key_dim=1, value_length=2),
        # Output bias [2, 1] with query length 2.
        dict(num_heads=2, key_dim=4, output_shape=(2, 1), query_length=2),
    ],
)
def test_keras_bias_add_shortcut_is_avoided(rng, options):
    options = dict(options)
    query_length = options.pop("query_length", 4)
    value_length = options.pop("value_length", 5)
    layer = MultiHeadAttention(bias_initializer="random_normal", **options)
    query = rng.normal(size=(2, query_length, 6)).astype("float32")
    value = rng.normal(size=(2, value_length, 7)).astype("float32")
    output = ops.convert_to_numpy(layer(query, value))
    np.testing.assert_allclose(output, _numpy_multi_head(layer, query, value), atol=1e-5)


def test_weight_layout_matches_keras():
    ours = MultiHeadAttention(num_heads=3, key_dim=4, value_dim=5, output_shape=7)
    theirs = keras.layers.MultiHeadAttention(num_heads=3, key_dim=4, value_dim=5, output_shape=7)
    ours.build((1, 2, 6), (1, 3, 8))
    theirs.build((1, 2, 6), (1, 3, 8))
    assert [tuple(w.shape) for w in ours.weights] == [tuple(w.shape) for w in theirs.weights]
    assert [tuple(w.shape) for w in ours.weights][:2] == [(6, 3, 4), (3, 4)]


def test_keras_mask_propagates_to_output():
    token_ids = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(10, 8, mask_zero=True)(token_ids)
    attended = MultiHeadAttention(num_heads=2, key_dim=4)(embedded, embedded)
    # GlobalAveragePooling1D honours the mask: padded positions must not count.
    pooled = keras.layers.GlobalAveragePooling1D()(attended)
    model = keras.Model(token_ids, [attended, pooled])
    ids = np.array([[3, 4, 5, 0, 0]])
    sequence, pooled = (ops.convert_to_numpy(x) for x in model(ids))
    np.testing.assert_allclose(pooled[0], sequence[0, :3].mean(0), atol=1e-5)


def test_causal_mask_blocks_the_future(rng):
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    x = rng.normal(size=(1, 5, 8)).astype("float32")
    changed = x.copy()
    changed[0, 3:] += 1.0
    _, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    first = ops.convert_to_numpy(layer(x, x, use_causal_mask=True))
    second = ops.convert_to_numpy(layer(changed, changed, use_causal_mask=True))
    np.testing.assert_allclose(first[0, :3], second[0, :3], atol=1e-6)
    assert not np.allclose(first[0, 3:], second[0, 3:])
    assert np.all(np.triu(ops.convert_to_numpy(scores)[0], k=1) == 0)


class ScaledCosineAttention(MultiHeadAttention):
    """Another scoring (cosine similarity times a fixed temperature), by one override."""

    def compute_attention_logits(self, query_heads, key_heads):
        query_heads = query_heads / ops.norm(query_heads, axis=-1, keepdims=True)
        key_heads = key_heads / ops.norm(key_heads, axis=-1, keepdims=True)
        return 10.0 * ops.einsum("bnth,bnsh->bnts", query_heads, key_heads)


def test_subclass_changes_the_scoring_only(rng):
    layer = ScaledCosineAttention(num_heads=2, key_dim=4)
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    _, scores = layer(x, x, return_attention_scores=True)
    weights = [ops.convert_to_numpy(w) for w in layer.weights]
    q = np.einsum("btd,dnh->bnth", x, weights[0]) + weights[1][:, None]
    k = np.einsum("btd,dnh->bnth", x, weights[2]) + weights[3][:, None]
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    logits = 10 * q @ np.swapaxes(k, -1, -2)
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(ops.convert_to_numpy(scores), expected, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_heads=0, key_dim=4), "num_heads"),
        (dict(num_heads=2, key_dim=-1), "key_dim"),
        (dict(num_heads=2, key_dim=4, value_dim=0), "value_dim"),
        (dict(num_heads=2, key_dim=4, dropout=1.5), "dropout"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(**kwargs)


def test_bad_input_rank_is_named():
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    with pytest.raises(ValueError, match="query"):
        layer(np.zeros((2, 8), "float32"), np.zeros((2, 3, 8), "float32"))


def test_masked_softmax_computes_in_float32_for_half_precision_logits():
    # Logits 1e-3 apart are one float16 step apart near 8; a float16 softmax
    # would return float16 weights that cannot tell them apart.
    from keras_transformer.layers.attention import masked_softmax

    logits = np.array([[8.0, 8.004, 8.008]], "float32")
    for mask in (None, np.array([[True, True, False]])):
        weights = masked_softmax(ops.cast(logits, "float16"), mask)
        assert keras.backend.standardize_dtype(weights.dtype) == "float32"
    half = ops.convert_to_numpy(masked_softmax(ops.cast(logits, "bfloat16")))
    expected = np.exp(ops.convert_to_numpy(ops.cast(ops.cast(logits, "bfloat16"), "float32")))
    np.testing.assert_allclose(half[0], expected[0] / expected[0].sum(), atol=1e-6)


def test_attention_dropout_drops_and_rescales_weights_in_training_only(rng):
    rate = 0.5
    layer = MultiHeadAttention(num_heads=2, key_dim=4, dropout=rate, seed=3)
    layer.build((1, 6, 8), (1, 7, 8))
    query_heads = ops.convert_to_tensor(rng.normal(size=(1, 2, 6, 4)).astype("float32"))
    key_heads = ops.convert_to_tensor(rng.normal(size=(1, 2, 7, 4)).astype("float32"))
    # Identity values: the attended output is the (dropped) weights themselves.
    identity = ops.convert_to_tensor(np.broadcast_to(np.eye(7, dtype="float32"), (1, 2, 7, 7)))
    inference, weights = layer.compute_attention(query_heads, key_heads, identity, training=False)
    trained, _ = layer.compute_attention(query_heads, key_heads, identity, training=True)
    inference, weights, trained = (ops.convert_to_numpy(x) for x in (inference, weights, trained))
    np.testing.assert_allclose(inference, weights, atol=1e-6)
    dropped = trained == 0
    # 84 weights, about half dropped; kept ones rescaled by 1 / (1 - rate) as
    # keras.layers.Dropout does.
    assert 15 < dropped.sum() < 69
    np.testing.assert_allclose(trained[~dropped], weights[~dropped] / (1 - rate), rtol=1e-5)
    # And the layer's own call applies it when training, only then.
    x = rng.normal(size=(1, 6, 8)).astype("float32")
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(x, x)), ops.convert_to_numpy(layer(x, x, training=False))
    )
    assert not np.allclose(
        ops.convert_to_numpy(layer(x, x, training=True)), ops.convert_to_numpy(layer(x, x))
    )


@pytest.mark.parametrize(
    "options, query_shape, value_shape",
    [
        (dict(), (2, 5, 8), (2, 7, 6)),
        (dict(output_shape=3), (2, 5, 8), (2, 7, 6)),
        (dict(output_shape=(2, 3), value_dim=5), (3, 4, 8), (3, 4, 8)),
    ],
)
def test_compute_output_shape_is_the_real_shape(rng, options, query_shape, value_shape):
    layer = MultiHeadAttention(num_heads=2, key_dim=4, **options)
    query = rng.normal(size=query_shape).astype("float32")
    value = rng.normal(size=value_shape).astype("float32")
    output, scores = layer(query, value, return_attention_scores=True)
    assert layer.compute_output_shape(query_shape, value_shape) == tuple(output.shape)
    assert layer.compute_output_shape(query_shape, value_shape, return_attention_scores=True) == (
        tuple(output.shape),
        tuple(scores.shape),
    )
    # Symbolic calls agree, unknown batch and lengths included.
    symbolic_query, symbolic_value = (
        keras.Input(query_shape[1:]),
        keras.Input((None, value_shape[-1])),
    )
    symbolic, symbolic_scores = layer(symbolic_query, symbolic_value, return_attention_scores=True)
    assert tuple(symbolic.shape) == (None, *output.shape[1:])
    assert tuple(symbolic_scores.shape) == (None, 2, query_shape[1], None)


def test_compute_output_shape_checks_key_against_value():
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    with pytest.raises(ValueError, match="`value` and `key`.*must be equal"):
        layer.compute_output_shape((2, 5, 8), (2, 7, 8), key_shape=(2, 6, 8))
    with pytest.raises(ValueError, match="`value` and `key`.*must be equal"):
        layer(np.ones((2, 5, 8)), np.ones((2, 7, 8)), np.ones((2, 6, 8)))


def test_compute_attention_takes_one_form_of_mask(rng):
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    layer.build((1, 3, 8), (1, 3, 8))
    heads = ops.convert_to_tensor(rng.normal(size=(1, 2, 3, 4)).astype("float32"))
    mask = np.ones((1, 3, 3), bool)
    with pytest.raises(ValueError, match="either `prepared_mask`"):
        layer.compute_attention(
            heads,
            heads,
            heads,
            attention_mask=mask,
            prepared_mask=layer.prepare_attention_mask(mask),
        )


def test_query_that_attends_nowhere_gets_zero_weights_and_output(rng):
    layer = MultiHeadAttention(num_heads=2, key_dim=4, bias_initializer="random_normal")
    x = rng.normal(size=(2, 4, 8)).astype("float32")
    mask = np.ones((2, 4, 4), bool)
    mask[1, 2] = False  # query 2 of the second sequence may attend nothing
    output, scores = layer(x, x, attention_mask=mask, return_attention_scores=True)
    output, scores = ops.convert_to_numpy(output), ops.convert_to_numpy(scores)
    np.testing.assert_array_equal(scores[1, :, 2], 0.0)
    # Zero attended heads: the output is the output projection's bias alone.
    np.testing.assert_allclose(
        output[1, 2], ops.convert_to_numpy(layer.output_dense.bias), atol=1e-6
    )
    query_padding = np.array([[True] * 4, [True, True, False, True]])
    padded = ops.convert_to_numpy(layer(x, x, query_mask=query_padding))
    np.testing.assert_allclose(
        padded[1, 2], ops.convert_to_numpy(layer.output_dense.bias), atol=1e-6
    )
