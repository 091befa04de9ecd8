"""Our `MultiHeadAttention` in place of Keras': weights files both ways,
quantization, LoRA, dtype policy maps, Keras configs and hooks, and masked
positions that no scoring can leak through.

Keras' own test file for its layer runs against ours in
tests/keras_suite/; these tests cover what it does not: files written by one
class and read by the other, and our blocks and models.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import (
    MultiHeadAttention,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)
from keras_transformer.models import TransformerClassifier

B, T, S, D = 2, 5, 4, 8


def as_numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor))


def inputs(*shape, seed):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


QUERY, VALUE = inputs(B, T, D, seed=1), inputs(B, S, D, seed=2)


def attention_model(attention_class, **kwargs):
    """A functional model: an attention layer named "mha" between two Dense layers."""
    query = keras.Input((T, D))
    value = keras.Input((S, D))
    attended = attention_class(num_heads=2, key_dim=4, name="mha", **kwargs)(
        keras.layers.Dense(D, name="embed")(query), value
    )
    return keras.Model([query, value], keras.layers.Dense(3, name="head")(attended))


@pytest.mark.parametrize("use_gate", [False, True], ids=["plain", "gated"])
@pytest.mark.parametrize("suffix", [".weights.h5", ".keras"])
def test_keras_files_load_into_ours_and_back(tmp_path, suffix, use_gate):
    keras.utils.set_random_seed(3)
    theirs = attention_model(keras.layers.MultiHeadAttention, use_gate=use_gate)
    ours = attention_model(MultiHeadAttention, use_gate=use_gate)
    expected = as_numpy(theirs([QUERY, VALUE]))
    path = str(tmp_path / f"theirs{suffix}")
    theirs.save_weights(path) if suffix == ".weights.h5" else theirs.save(path)
    ours.load_weights(path)
    np.testing.assert_allclose(as_numpy(ours([QUERY, VALUE])), expected, atol=1e-5)
    assert [v.path for v in ours.weights] == [v.path for v in theirs.weights]

    # And back: ours, changed, into theirs.
    ours.get_layer("mha").query_dense.kernel.assign(
        2.0 * ops.convert_to_numpy(ours.get_layer("mha").query_dense.kernel)
    )
    changed = as_numpy(ours([QUERY, VALUE]))
    assert not np.allclose(changed, expected, atol=1e-3)
    path = str(tmp_path / "ours.weights.h5")
    ours.save_weights(path)
    theirs.load_weights(path)
    np.testing.assert_allclose(as_numpy(theirs([QUERY, VALUE])), changed, atol=1e-5)


def test_a_keras_config_builds_ours_with_the_same_answers():
    keras.utils.set_random_seed(4)
    theirs = keras.layers.MultiHeadAttention(
        num_heads=2, key_dim=4, value_dim=3, output_shape=6, use_gate=True, sliding_window=3
    )
    # With the scores, as Keras' fused path on JAX refuses value_dim != key_dim.
    expected, expected_scores = theirs(
        QUERY, QUERY, use_causal_mask=True, return_attention_scores=True
    )
    ours = MultiHeadAttention.from_config(theirs.get_config())
    ours(QUERY, QUERY)
    ours.set_weights(theirs.get_weights())
    output, scores = ours(QUERY, QUERY, use_causal_mask=True, return_attention_scores=True)
    np.testing.assert_allclose(as_numpy(output), as_numpy(expected), atol=1e-5)
    np.testing.assert_allclose(as_numpy(scores), as_numpy(expected_scores), atol=1e-6)


def test_quantize_int8_quantizes_our_layer_and_our_models():
    keras.utils.set_random_seed(5)
    model = attention_model(MultiHeadAttention)
    before = as_numpy(model([QUERY, VALUE]))
    model.quantize("int8")
    layer = model.get_layer("mha")
    for dense in (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense):
        assert keras.backend.standardize_dtype(dense._kernel.dtype) == "int8"
    after = as_numpy(model([QUERY, VALUE]))
    assert not np.array_equal(after, before)  # int8 arithmetic, not the float kernels
    np.testing.assert_allclose(after, before, atol=0.05 * np.abs(before).max())

    classifier = TransformerClassifier(
        vocabulary_size=50,
        sequence_length=6,
        num_classes=3,
        num_layers=1,
        d_model=8,
        num_heads=2,
        intermediate_dim=16,
    )
    token_ids = np.array([[3, 4, 5, 6, 0, 0], [7, 8, 9, 0, 0, 0]])
    probabilities = as_numpy(classifier(token_ids))
    classifier.quantize("int8")
    attention = classifier.encoder_blocks[0].self_attention
    assert attention.query_dense.quantization_mode == "int8"
    np.testing.assert_allclose(as_numpy(classifier(token_ids)), probabilities, atol=0.05)


def test_lora_trains_only_the_adapters_and_starts_where_the_layer_was():
    keras.utils.set_random_seed(6)
    model = attention_model(MultiHeadAttention)
    before = as_numpy(model([QUERY, VALUE]))
    layer = model.get_layer("mha")
    frozen = as_numpy(layer.query_dense._kernel)
    for dense in (layer.query_dense, layer.key_dense, layer.value_dense):
        dense.enable_lora(2)
    np.testing.assert_allclose(as_numpy(model([QUERY, VALUE])), before, atol=1e-6)
    # Per LoRA projection its two adapters and its bias; the output projection's kernel and bias.
    assert len(layer.trainable_weights) == 3 * 3 + 2
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    model.fit([QUERY, VALUE], np.ones((B, T, 3)), epochs=3, verbose=0)
    np.testing.assert_array_equal(as_numpy(layer.query_dense._kernel), frozen)
    assert not np.allclose(as_numpy(model([QUERY, VALUE])), before, atol=1e-4)


def test_a_dtype_policy_map_reaches_the_projections():
    policies = keras.dtype_policies.DTypePolicyMap()
    policies["mha/query"] = keras.dtype_policies.DTypePolicy("bfloat16")
    layer = MultiHeadAttention(num_heads=2, key_dim=4, dtype=policies, name="mha")
    layer.build(QUERY.shape, VALUE.shape)
    assert layer.query_dense.compute_dtype == "bfloat16"
    assert layer.key_dense.compute_dtype == "float32"
    assert layer(QUERY, VALUE).shape == (B, T, D)


def test_a_per_head_mask_equals_the_same_mask_for_every_head():
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    mask = np.random.default_rng(7).random((B, T, S)) > 0.3
    mask[:, :, 0] = True
    per_head = np.repeat(mask[:, None], 2, axis=1)
    np.testing.assert_allclose(
        as_numpy(layer(QUERY, VALUE, attention_mask=per_head)),
        as_numpy(layer(QUERY, VALUE, attention_mask=mask)),
        atol=1e-6,
    )
    per_head[:, 1] = True  # the second head now attends everywhere
    _, scores = layer(QUERY, VALUE, attention_mask=per_head, return_attention_scores=True)
    scores = as_numpy(scores)
    assert np.all(scores[:, 0][~mask] == 0) and np.all(scores[:, 1] > 0)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(output_shape=8.0), "Invalid `output_shape`"),
        (dict(num_heads=0), "argument `num_heads`"),
        (dict(key_dim=1.5), "argument `key_dim`"),
        (dict(sliding_window=0), "argument `sliding_window`"),
        (dict(attention_axes="time"), "`attention_axes`"),
        (dict(flash_attention=True, dropout=0.1), "Dropout is not supported"),
    ],
)
def test_bad_arguments_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(**{"num_heads": 2, "key_dim": 4, **arguments})


def test_a_keras_style_compute_attention_override_is_called_with_every_mask():
    seen = []

    class HalvedOutput(MultiHeadAttention):
        def _compute_attention(
            self,
            query,
            key,
            value,
            attention_mask=None,
            training=None,
            return_attention_scores=False,
        ):
            seen.append(None if attention_mask is None else as_numpy(attention_mask))
            output, scores = super()._compute_attention(
                query, key, value, attention_mask, training, return_attention_scores
            )
            return 0.5 * output, scores

    layer = HalvedOutput(num_heads=2, key_dim=4, use_bias=False)
    output = as_numpy(layer(QUERY, QUERY, use_causal_mask=True))
    plain = MultiHeadAttention(num_heads=2, key_dim=4, use_bias=False)
    plain(QUERY, QUERY)
    plain.set_weights(layer.get_weights())
    np.testing.assert_allclose(
        output, 0.5 * as_numpy(plain(QUERY, QUERY, use_causal_mask=True)), atol=1e-6
    )
    assert seen and np.array_equal(seen[-1][0], np.tril(np.ones((T, T), bool)))


@keras.saving.register_keras_serializable(package="tests_dropin")
class NaNWhereMasked(MultiHeadAttention):
    """A scoring that returns NaN wherever the key is all zeros (a cache's
    unused slots), as a cosine score without an epsilon does."""

    def compute_attention_logits(self, query_heads, key_heads):
        logits = super().compute_attention_logits(query_heads, key_heads)
        norm = ops.sqrt(ops.sum(ops.square(key_heads), axis=-1))
        return logits * ops.expand_dims(norm, -2) / ops.expand_dims(norm, -2)


@pytest.mark.parametrize("cross", [True, False], ids=["cross", "decoder_only"])
def test_nan_scores_at_masked_positions_reach_no_path(cross, monkeypatch):
    import tests.layers.test_attention_class as paths

    keras.utils.set_random_seed(8)
    nan_block = TransformerDecoderBlock(2, 16, attention_class=NaNWhereMasked)
    plain = TransformerDecoderBlock(2, 16)
    target, source = inputs(paths.B, paths.T, 16, seed=10), inputs(paths.B, paths.S, 16, seed=9)
    for block in (nan_block, plain):
        block(target, source) if cross else block(target)
    plain.set_weights(nan_block.get_weights())
    # The three decoding paths of test_attention_class, on these blocks' width.
    monkeypatch.setattr(paths, "TARGET", target)
    monkeypatch.setattr(paths, "SOURCE", source)
    for path in (paths.full_pass, paths.cached_calls, paths.matrix_steps):
        got = path(nan_block)
        assert np.all(np.isfinite(got)), path.__name__
        np.testing.assert_allclose(got, path(plain), atol=1e-5, err_msg=path.__name__)


def test_an_encoder_block_of_ours_quantizes():
    keras.utils.set_random_seed(12)
    block = TransformerEncoderBlock(2, 16)
    x = inputs(B, T, 8, seed=13)
    before = as_numpy(block(x))
    for layer in block._flatten_layers():
        if isinstance(layer, (keras.layers.EinsumDense, keras.layers.Dense)):
            layer.quantize("int8")
    after = as_numpy(block(x))
    assert not np.array_equal(after, before)
    np.testing.assert_allclose(after, before, atol=0.1)


def test_a_quantized_decoder_block_decodes_through_its_cache(monkeypatch):
    import tests.layers.test_attention_class as paths

    keras.utils.set_random_seed(14)
    block = TransformerDecoderBlock(2, 16)
    target, source = inputs(paths.B, paths.T, 16, seed=15), inputs(paths.B, paths.S, 16, seed=16)
    block(target, source)
    monkeypatch.setattr(paths, "TARGET", target)
    monkeypatch.setattr(paths, "SOURCE", source)
    before = paths.full_pass(block)
    for layer in block._flatten_layers():
        if isinstance(layer, (keras.layers.EinsumDense, keras.layers.Dense)):
            layer.quantize("int8")
    after = paths.full_pass(block)
    assert not np.array_equal(after, before)
    np.testing.assert_allclose(after, before, atol=0.1)
    np.testing.assert_allclose(paths.cached_calls(block), after, atol=1e-5)
    # Its kernels are no float matrices: a decoding loop gets None and the
    # block projects through its quantized layers.
    assert block.compute_projection_matrices() is None
    np.testing.assert_allclose(paths.matrix_steps(block), after, atol=1e-5)
