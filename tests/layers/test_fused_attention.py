"""Fused attention: `MultiHeadAttention.attend` computes through `keras.ops.dot_product_attention`
when no scores are asked for and dropout is off, with the explicit path's results, and only then.

By default the layer fuses only on JAX with a GPU or TPU. Here every test but
`test_default_fuses_only_on_jax_with_an_accelerator` forces the fused path
where its other conditions hold (the private switch `_fused_attention =
True`), so that it is tested on a CPU; `explicit_path` forces the explicit
one on the same layer, so both paths read the same weights.
"""

import contextlib

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import (
    MultiHeadAttention,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)

D_MODEL, HEADS, FF = 8, 2, 16
B, T, S = 2, 5, 4
# float32: the same arithmetic in another order. Mixed policies: the
# tolerances of tests/layers/test_mixed_precision.py, for attention weights
# (one layer) and for a decoder block's outputs. Under them the fused op may
# be the more precise path: on JAX its logits are float32 products, the
# explicit path's are rounded to the compute dtype first.
LAYER_ATOL = {"float32": 1e-5, "mixed_float16": 2e-2, "mixed_bfloat16": 2e-2}
BLOCK_ATOL = {"float32": 1e-5, "mixed_float16": 5e-2, "mixed_bfloat16": 5e-2}

QUERY_PADDING = np.array([[True] * T, [True, True, True, False, False]])
KEY_PADDING = np.array([[True] * S, [True, True, False, False]])


def random_inputs(*shape, seed):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def as_numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor), dtype=np.float64)


@pytest.fixture(autouse=True)
def fused_where_allowed(monkeypatch):
    monkeypatch.setattr(MultiHeadAttention, "_fused_attention", True)


@pytest.fixture
def fused_calls(monkeypatch):
    """A list that grows by one at every call of `keras.ops.dot_product_attention`."""
    calls = []
    original = ops.dot_product_attention

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(ops, "dot_product_attention", counting)
    return calls


@contextlib.contextmanager
def explicit_path(*layers):
    """Within the block, every given attention layer takes the explicit path."""
    for layer in layers:
        layer._fused_attention = False
    try:
        yield
    finally:
        for layer in layers:
            del layer._fused_attention


def random_attention(randomize, query, value, seed, attention_class=MultiHeadAttention, **kwargs):
    """An attention layer built on `query`, `value`, with random weights (biases included)."""
    layer = attention_class(HEADS, D_MODEL // HEADS, **kwargs)
    layer(query, value)
    randomize(layer, seed=seed)
    return layer


def attention_layers(block):
    return [
        layer for layer in (block.self_attention, getattr(block, "cross_attention", None)) if layer
    ]


@pytest.fixture(params=["float32", "mixed_float16", "mixed_bfloat16"])
def policy(request):
    keras.config.set_dtype_policy(request.param)
    yield request.param
    keras.config.set_dtype_policy("float32")


# Every mask the layer merges: a query row of the second sequence attends
# nowhere in "padding" (padded query) and in "empty_row" (the explicit mask).
EMPTY_ROW_MASK = np.ones((B, T, T), bool)
EMPTY_ROW_MASK[1, 1, :] = False
EMPTY_ROW_MASK[0, :, 3] = False
MASK_CASES = {
    "no_mask": (T, {}),
    "padding": (T, dict(query_mask=QUERY_PADDING, value_mask=QUERY_PADDING)),
    "causal": (T, dict(use_causal_mask=True)),
    "padding_causal": (
        T,
        dict(query_mask=QUERY_PADDING, value_mask=QUERY_PADDING, use_causal_mask=True),
    ),
    "empty_row": (T, dict(attention_mask=EMPTY_ROW_MASK)),
    "cross": (S, dict(query_mask=QUERY_PADDING, value_mask=KEY_PADDING)),
}


@pytest.mark.parametrize("case", list(MASK_CASES))
def test_layer_fused_equals_explicit(case, policy, randomize, fused_calls):
    length, kwargs = MASK_CASES[case]
    query = random_inputs(B, T, D_MODEL, seed=1)
    value = query if length == T else random_inputs(B, length, D_MODEL, seed=2)
    layer = random_attention(randomize, query, value, seed=3)
    fused_calls.clear()
    fused = layer(query, value, **kwargs)
    assert len(fused_calls) == 1
    with explicit_path(layer):
        explicit = layer(query, value, **kwargs)
    assert len(fused_calls) == 1
    assert keras.backend.standardize_dtype(fused.dtype) == keras.config.dtype_policy().compute_dtype
    fused, explicit = as_numpy(fused), as_numpy(explicit)
    assert np.all(np.isfinite(fused))
    np.testing.assert_allclose(fused, explicit, atol=LAYER_ATOL[policy])


def test_row_that_attends_nowhere_outputs_the_output_bias_only(fused_calls, randomize):
    # Zero attention, as on the explicit path; the fused op alone would give
    # the mean of the values.
    x = random_inputs(B, T, D_MODEL, seed=4)
    layer = random_attention(randomize, x, x, seed=5)
    fused_calls.clear()
    output = as_numpy(layer(x, x, attention_mask=EMPTY_ROW_MASK))
    assert len(fused_calls) == 1
    np.testing.assert_allclose(output[1, 1], as_numpy(layer.output_dense.bias), atol=1e-6)


def decoder_block(randomize, cross):
    keras.utils.set_random_seed(6)
    block = TransformerDecoderBlock(HEADS, FF)
    target = random_inputs(B, T, D_MODEL, seed=7)
    source = random_inputs(B, S, D_MODEL, seed=8)
    block(target, source) if cross else block(target)
    randomize(block, seed=9)
    return block, target, (source if cross else None)


def cached_calls(block, target, source, matrices=False):
    cache = block.initialize_self_attention_cache(batch_size=B, max_length=T)
    extra = {}
    if matrices:
        extra["projection_matrices"] = block.compute_projection_matrices()
    if source is not None:
        extra.update(
            cross_attention_cache=block.compute_cross_attention_cache(source),
            encoder_padding_mask=KEY_PADDING,
        )
    outputs = []
    for index in range(T):
        output, cache = block(
            target[:, index : index + 1],
            self_attention_cache=cache,
            self_attention_cache_update_index=index,
            **extra,
        )
        outputs.append(as_numpy(output)[:, 0])
    return np.stack(outputs, axis=1)


def matrix_steps(block, target, source):
    """Cached calls as a decoding loop makes them, with the projection matrices."""
    return cached_calls(block, target, source, matrices=True)


def full_pass(block, target, source):
    if source is None:
        return as_numpy(block(target, decoder_padding_mask=QUERY_PADDING))
    return as_numpy(
        block(target, source, decoder_padding_mask=QUERY_PADDING, encoder_padding_mask=KEY_PADDING)
    )


@pytest.mark.parametrize("cross", [True, False], ids=["cross", "decoder_only"])
@pytest.mark.parametrize(
    "path", [matrix_steps, cached_calls, full_pass], ids=lambda path: path.__name__
)
def test_decoder_paths_fused_equal_explicit(path, cross, policy, randomize, fused_calls):
    block, target, source = decoder_block(randomize, cross)
    fused_calls.clear()
    fused = path(block, target, source)
    steps = 1 if path is full_pass else T
    # Every attention of every step went through the fused op: one query a
    # step (`[B, 1, heads, dim]`) on the decoding paths.
    calls = steps * len(attention_layers(block))
    assert len(fused_calls) == calls
    if path is not full_pass:
        assert all(shape[1] == 1 for shape in fused_calls)
    with explicit_path(*attention_layers(block)):
        explicit = path(block, target, source)
    assert len(fused_calls) == calls
    assert np.all(np.isfinite(fused))
    np.testing.assert_allclose(fused, explicit, atol=BLOCK_ATOL[policy])


def test_decoding_fused_equals_the_full_explicit_pass(randomize):
    # Decoding (fused) against the training-style pass (explicit): the
    # property the cache exists for, across the two paths. The last target
    # positions are real here, as decoding treats every position as real.
    block, target, source = decoder_block(randomize, cross=True)
    with explicit_path(*attention_layers(block)):
        full = as_numpy(block(target, source, encoder_padding_mask=KEY_PADDING))
    np.testing.assert_allclose(matrix_steps(block, target, source), full, atol=1e-5)


# --- routing ---------------------------------------------------------------------


@pytest.fixture
def layer_and_input(randomize):
    x = random_inputs(B, T, D_MODEL, seed=10)
    return random_attention(randomize, x, x, seed=11, dropout=0.5), x


@pytest.fixture
def fused_calls_after_build(layer_and_input, fused_calls):
    fused_calls.clear()
    return fused_calls


def test_fused_when_no_scores_and_dropout_is_inactive(layer_and_input, fused_calls_after_build):
    fused_calls = fused_calls_after_build
    layer, x = layer_and_input
    layer(x, x)
    layer(x, x, training=False)
    assert len(fused_calls) == 2


def test_explicit_when_scores_are_asked_for(layer_and_input, fused_calls_after_build):
    fused_calls = fused_calls_after_build
    layer, x = layer_and_input
    _, scores = layer(x, x, return_attention_scores=True)
    assert fused_calls == []
    assert tuple(scores.shape) == (B, HEADS, T, T)


def test_explicit_when_dropout_is_active(layer_and_input, fused_calls_after_build):
    fused_calls = fused_calls_after_build
    layer, x = layer_and_input
    trained = as_numpy(layer(x, x, training=True))
    assert fused_calls == []
    # The dropout did act: the training output is not the inference one.
    assert np.abs(trained - as_numpy(layer(x, x, training=False))).max() > 1e-3


def test_explicit_when_value_heads_differ_in_size(fused_calls):
    x = random_inputs(B, T, D_MODEL, seed=12)
    layer = MultiHeadAttention(HEADS, key_dim=4, value_dim=3)
    output = layer(x, x, query_mask=QUERY_PADDING)
    assert fused_calls == []
    assert tuple(output.shape) == (B, T, D_MODEL)


class HalvedLogits(MultiHeadAttention):
    def compute_attention_logits(self, query_heads, key_heads):
        return 0.5 * super().compute_attention_logits(query_heads, key_heads)


class SharpenedWeights(MultiHeadAttention):
    def compute_attention_weights(self, logits, attention_bias=None):
        return super().compute_attention_weights(3.0 * logits, attention_bias)


class DoubledAttention(MultiHeadAttention):
    """The old `compute_attention` signature: `attend` must call it without new arguments."""

    def compute_attention(
        self,
        query_heads,
        key_heads,
        value_heads,
        attention_mask=None,
        training=None,
        query_mask=None,
        prepared_mask=None,
    ):
        attended, weights = super().compute_attention(
            query_heads, key_heads, value_heads, attention_mask, training, query_mask, prepared_mask
        )
        return 2.0 * attended, weights


class ScaledQuery(MultiHeadAttention):
    """Overrides a projection only: the fused path stays, with the override."""

    def project_query(self, query):
        return 3.0 * super().project_query(query)


@pytest.mark.parametrize("subclass", [HalvedLogits, SharpenedWeights, DoubledAttention])
def test_a_subclass_overriding_the_scoring_runs_explicit_with_its_override(
    subclass, fused_calls, randomize
):
    x = random_inputs(B, T, D_MODEL, seed=13)
    default = random_attention(randomize, x, x, seed=14)
    changed = random_attention(randomize, x, x, seed=14, attention_class=subclass)
    fused_calls.clear()
    output = as_numpy(changed(x, x, query_mask=QUERY_PADDING, value_mask=QUERY_PADDING))
    assert fused_calls == []
    # The override took effect (same weights, another result).
    assert (
        np.abs(
            output - as_numpy(default(x, x, query_mask=QUERY_PADDING, value_mask=QUERY_PADDING))
        ).max()
        > 1e-2
    )


def test_a_subclass_overriding_a_projection_stays_fused_with_its_override(fused_calls, randomize):
    x = random_inputs(B, T, D_MODEL, seed=15)
    layer = random_attention(randomize, x, x, seed=16, attention_class=ScaledQuery)
    fused_calls.clear()
    fused = as_numpy(layer(x, x, use_causal_mask=True))
    assert len(fused_calls) == 1
    with explicit_path(layer):
        explicit = as_numpy(layer(x, x, use_causal_mask=True))
    np.testing.assert_allclose(fused, explicit, atol=1e-5)
    plain = MultiHeadAttention.from_config(layer.get_config())
    plain(x, x)
    plain.set_weights(layer.get_weights())
    assert np.abs(fused - as_numpy(plain(x, x, use_causal_mask=True))).max() > 1e-2


def test_decoding_with_an_overridden_scoring_stays_explicit(fused_calls, randomize):
    keras.utils.set_random_seed(17)
    block = TransformerDecoderBlock(HEADS, FF, attention_class=HalvedLogits)
    target = random_inputs(B, T, D_MODEL, seed=18)
    block(target)
    randomize(block, seed=19)
    fused_calls.clear()
    matrix_steps(block, target, None)
    cached_calls(block, target, None)
    assert fused_calls == []


def test_encoder_block_fuses_unless_scores_are_asked_for(fused_calls, randomize):
    x = random_inputs(B, T, D_MODEL, seed=20)
    block = TransformerEncoderBlock(HEADS, FF)
    block(x)
    randomize(block, seed=21)
    fused_calls.clear()
    fused = as_numpy(block(x, padding_mask=QUERY_PADDING))
    assert len(fused_calls) == 1
    output, _ = block(x, padding_mask=QUERY_PADDING, return_attention_scores=True)
    assert len(fused_calls) == 1
    np.testing.assert_allclose(fused, as_numpy(output), atol=1e-5)


def test_default_fuses_only_on_jax_with_an_accelerator(monkeypatch, fused_calls):
    monkeypatch.setattr(MultiHeadAttention, "_fused_attention", None)
    x = random_inputs(B, T, D_MODEL, seed=22)
    layer = MultiHeadAttention(HEADS, D_MODEL // HEADS)
    layer(x, x)
    on_accelerator = False
    if keras.backend.backend() == "jax":
        import jax

        on_accelerator = jax.default_backend() != "cpu"
    assert len(fused_calls) == int(on_accelerator)
