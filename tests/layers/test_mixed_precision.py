"""Mixed precision: training steps stay finite, softmax and layer norm stay float32.

Each test sets a global mixed policy through the `policy` fixture, which
restores float32 afterwards (tests/conftest.py also resets it around every test).
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import (
    TokenAndPositionEmbedding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)

D_MODEL, HEADS, FF, VOCAB, LENGTH = 8, 2, 16, 30, 16


def as_numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor), dtype=np.float64)


@pytest.fixture(params=["mixed_float16", "mixed_bfloat16"])
def policy(request):
    keras.config.set_dtype_policy(request.param)
    yield keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")


def token_batch(rows, length, seed):
    tokens = np.random.default_rng(seed).integers(1, VOCAB, size=(rows, length)).astype("int32")
    tokens[rows // 2 :, length - 2 :] = 0  # some padding
    return tokens


def check_trained(model, history, policy):
    losses = history.history["loss"]
    assert len(losses) > 0 and np.all(np.isfinite(losses)), losses
    for variable in model.weights:
        # Variables stay float32 under a mixed policy; they are finite after the steps.
        assert variable.dtype == "float32", variable.path
        assert np.all(np.isfinite(as_numpy(variable))), variable.path
    if policy.name == "mixed_float16":
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)


# On TensorFlow, jit_compile=True is XLA and False a plain tf.function: two
# different compilers of the same step. On JAX, True is jax.jit and False runs
# the same step op by op, each op still compiled by XLA: the dtypes and the
# arithmetic are those of the jitted step, at ~45 s more per policy on 2 CPU
# cores. That combination is skipped as redundant (it passes when run).
@pytest.mark.parametrize("jit_compile", [True, False], ids=["jit", "no_jit"])
def test_encoder_decoder_stack_trains(policy, jit_compile):
    """One fit of an encoder stack feeding a decoder stack through cross-attention.

    Dropout is left out of this compiled step (its random-number ops triple
    the XLA compile time on CPU); `test_dropout_under_mixed_precision` covers it.
    The optimizer is SGD for the same reason: fewer ops to compile than Adam.
    """
    if jit_compile is False and keras.backend.backend() == "jax":
        pytest.skip("JAX without jit repeats the jitted step op by op (redundant, ~45 s)")
    source_ids = keras.Input((None,), dtype="int32")
    target_ids = keras.Input((None,), dtype="int32")
    source = TokenAndPositionEmbedding(VOCAB, LENGTH, D_MODEL)(source_ids)
    encoded = TransformerEncoderBlock(HEADS, FF, normalize_first=True)(source)
    target = TokenAndPositionEmbedding(VOCAB, LENGTH, D_MODEL)(target_ids)
    decoded = TransformerDecoderBlock(HEADS, FF)(target, encoded)
    model = keras.Model(
        [source_ids, target_ids], keras.layers.Dense(VOCAB, dtype="float32")(decoded)
    )
    # The blocks compute in the policy's compute dtype; the float32 head outputs float32.
    assert encoded.dtype == policy.compute_dtype
    assert decoded.dtype == policy.compute_dtype
    assert model.outputs[0].dtype == "float32"

    sources, targets = token_batch(16, 5, seed=1), token_batch(16, 6, seed=2)
    labels = np.roll(targets, -1, axis=1)
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
    )
    before = [as_numpy(w) for w in model.trainable_weights]
    history = model.fit([sources, targets], labels, batch_size=8, epochs=1, verbose=0)
    assert model.jit_compile == jit_compile
    check_trained(model, history, policy)
    # The steps were applied, not skipped: under mixed_float16 the loss-scale
    # optimizer silently skips any step whose gradients are not finite.
    # Key biases get zero gradient (softmax is shift-invariant), so they are exempt.
    for variable, old in zip(model.trainable_weights, before):
        if not variable.path.endswith("key/bias"):
            assert np.abs(as_numpy(variable) - old).max() > 0, variable.path
    blocks = keras.Model([source_ids, target_ids], [encoded, decoded])
    for output in blocks([sources[:2], targets[:2]]):
        assert keras.backend.standardize_dtype(output.dtype) == policy.compute_dtype


def test_dropout_under_mixed_precision(policy):
    x = np.random.default_rng(0).normal(size=(2, 5, D_MODEL)).astype("float32")
    source = np.random.default_rng(1).normal(size=(2, 5, D_MODEL)).astype("float32")
    for block, args in (
        (TransformerEncoderBlock(HEADS, FF, dropout=0.3), (x,)),
        (TransformerDecoderBlock(HEADS, FF, dropout=0.3), (x, source)),
    ):
        inference = block(*args)
        trained = block(*args, training=True)
        for output in (inference, trained):
            assert keras.backend.standardize_dtype(output.dtype) == policy.compute_dtype
            assert np.all(np.isfinite(as_numpy(output)))
        assert np.abs(as_numpy(trained) - as_numpy(inference)).max() > 1e-2


def float32_twin(block, build):
    """The same block with the same weights under the float32 policy."""
    twin = type(block).from_config({**block.get_config(), "dtype": "float32"})
    build(twin)
    twin.set_weights(block.get_weights())
    return twin


def relative_error(actual, expected):
    return np.abs(actual - expected).max() / np.abs(expected).max()


def test_layer_norm_runs_in_float32(policy, randomize):
    """Inputs of magnitude ~300: their variance (~1e5) overflows float16 (max 65504).

    A pre-norm block normalizes its raw inputs, so its outputs are finite and
    match float32 only if layer normalization computes in float32.
    """
    x = (300.0 * np.random.default_rng(0).normal(size=(2, 5, D_MODEL))).astype("float32")
    block = TransformerEncoderBlock(HEADS, FF, normalize_first=True)
    block(x)
    randomize(block, seed=1)
    output = block(x)
    assert keras.backend.standardize_dtype(output.dtype) == policy.compute_dtype
    output = as_numpy(output)
    assert np.all(np.isfinite(output))
    expected = as_numpy(float32_twin(block, lambda twin: twin(x))(x))
    assert relative_error(output, expected) < 3e-2


def test_attention_softmax_runs_in_float32(policy, randomize):
    """Masked logits are -1e9 before the softmax: finite only in float32.

    Under the mixed policy the weights still have exact zeros at masked keys,
    rows of real queries sum to 1, fully padded query rows are zero (not NaN),
    and the weights agree with float32.
    """
    x = np.random.default_rng(2).normal(size=(2, 5, D_MODEL)).astype("float32")
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], dtype=bool)
    block = TransformerEncoderBlock(HEADS, FF)
    block(x)
    randomize(block, seed=3)
    output, scores = block(x, padding_mask=mask, return_attention_scores=True)
    assert keras.backend.standardize_dtype(output.dtype) == policy.compute_dtype
    scores = as_numpy(scores)
    assert np.all(np.isfinite(scores)) and np.all(np.isfinite(as_numpy(output)))
    np.testing.assert_array_equal(scores[1][:, :, 2:], 0.0)
    np.testing.assert_array_equal(scores[1][:, 2:], 0.0)
    np.testing.assert_allclose(scores[0].sum(-1), 1.0, atol=1e-2)
    np.testing.assert_allclose(scores[1][:, :2].sum(-1), 1.0, atol=1e-2)
    twin = float32_twin(block, lambda twin: twin(x))
    _, expected = twin(x, padding_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(scores, as_numpy(expected), atol=2e-2)


def test_cached_decoding_under_mixed_precision(policy, randomize):
    target = np.random.default_rng(4).normal(size=(2, 6, D_MODEL)).astype("float32")
    source = np.random.default_rng(5).normal(size=(2, 5, D_MODEL)).astype("float32")
    source_mask = np.array([[True] * 5, [True] * 3 + [False] * 2])
    block = TransformerDecoderBlock(HEADS, FF)
    block(target, source)
    randomize(block, seed=6)
    full = block(target, source, encoder_padding_mask=source_mask)
    assert keras.backend.standardize_dtype(full.dtype) == policy.compute_dtype

    cache = block.initialize_self_attention_cache(batch_size=2, max_length=6)
    assert keras.backend.standardize_dtype(cache.dtype) == policy.compute_dtype
    cross = block.compute_cross_attention_cache(source)
    steps = []
    for index in range(6):
        step, cache = block(
            target[:, index : index + 1],
            cross_attention_cache=cross,
            encoder_padding_mask=source_mask,
            self_attention_cache=cache,
            self_attention_cache_update_index=index,
        )
        steps.append(as_numpy(step))
    cached = np.concatenate(steps, axis=1)
    assert np.all(np.isfinite(cached))
    # Same arithmetic in a different order: equal to half-precision rounding.
    np.testing.assert_allclose(cached, as_numpy(full), atol=5e-2)
