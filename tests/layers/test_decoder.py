"""TransformerDecoderBlock: cached decoding == full causal pass, causality, padding, errors."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import TransformerDecoderBlock

D_MODEL, HEADS, FF = 8, 2, 16
B, T, S = 2, 6, 5
VOCAB = 30
ATOL = 1e-5

# Source: the second sequence has 3 real tokens; its padding holds junk, not zeros.
SOURCE_MASK = np.array([[True] * 5, [True, True, True, False, False]])


def as_numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor))


def random_inputs(*shape, seed=0, scale=1.0):
    return (scale * np.random.default_rng(seed).normal(size=shape)).astype("float32")


TARGET = random_inputs(B, T, D_MODEL, seed=1)
SOURCE = random_inputs(B, S, D_MODEL, seed=2)


@pytest.fixture(
    scope="module",
    params=[(True, False), (True, True), (False, False), (False, True)],
    ids=["cross-post_norm", "cross-pre_norm", "decoder_only-post_norm", "decoder_only-pre_norm"],
)
def block(request, randomize):
    cross, normalize_first = request.param
    keras.utils.set_random_seed(3)
    layer = TransformerDecoderBlock(HEADS, FF, normalize_first=normalize_first)
    if cross:
        layer(TARGET, SOURCE)
    else:
        layer(TARGET)
    randomize(layer, seed=4)
    return layer


def has_cross(block):
    return block.cross_attention is not None


def full_pass(block, target=TARGET, **kwargs):
    if has_cross(block):
        return as_numpy(block(target, SOURCE, encoder_padding_mask=SOURCE_MASK, **kwargs))
    return as_numpy(block(target, **kwargs))


def cached_pass(
    block,
    target=TARGET,
    step=1,
    index_as_tensor=False,
    source="cache",
    decoder_padding_mask=None,
    matrices=False,
):
    """Decodes `target` `step` tokens at a time, feeding the self-attention cache back;
    with `matrices`, as a decoding loop does, the block's projection matrices too."""
    cache = block.initialize_self_attention_cache(batch_size=B, max_length=target.shape[1])
    assert tuple(cache.shape) == (2, B, HEADS, target.shape[1], D_MODEL // HEADS)
    kwargs = {}
    if matrices:
        kwargs["projection_matrices"] = block.compute_projection_matrices()
    if has_cross(block):
        kwargs["encoder_padding_mask"] = SOURCE_MASK
        if source == "cache":
            kwargs["cross_attention_cache"] = block.compute_cross_attention_cache(SOURCE)
        else:
            kwargs["encoder_sequence"] = SOURCE
    outputs = []
    for start in range(0, target.shape[1], step):
        index = ops.convert_to_tensor(start, dtype="int32") if index_as_tensor else start
        output, cache = block(
            target[:, start : start + step],
            self_attention_cache=cache,
            self_attention_cache_update_index=index,
            decoder_padding_mask=decoder_padding_mask,
            **kwargs,
        )
        outputs.append(as_numpy(output))
    return np.concatenate(outputs, axis=1)


def test_full_pass_matches_numpy_reference(block, np_reference):
    expected = np_reference.decoder_block(
        block,
        TARGET.astype(np.float64),
        source=SOURCE.astype(np.float64) if has_cross(block) else None,
        source_mask=SOURCE_MASK if has_cross(block) else None,
    )
    np.testing.assert_allclose(full_pass(block), expected, atol=ATOL, rtol=1e-4)


@pytest.mark.parametrize("matrices", [False, True], ids=["layers", "matrices"])
@pytest.mark.parametrize("step", [1, 2, 4], ids=lambda s: f"{s}_per_step")
def test_cached_decoding_equals_full_pass(block, step, matrices):
    # step=4 over 6 tokens also checks a short final step (4 + 2).
    np.testing.assert_allclose(
        cached_pass(block, step=step, matrices=matrices), full_pass(block), atol=ATOL
    )


@pytest.mark.parametrize("matrices", [False, True], ids=["layers", "matrices"])
def test_cached_decoding_with_tensor_index(block, matrices):
    # What a compiled decoding loop passes: the index as a scalar tensor.
    np.testing.assert_allclose(
        cached_pass(block, index_as_tensor=True, matrices=matrices), full_pass(block), atol=ATOL
    )


def test_cached_decoding_with_encoder_sequence(block):
    if not has_cross(block):
        pytest.skip("decoder-only block: no source to pass")
    # Passing the source itself at every step instead of its precomputed projections.
    np.testing.assert_allclose(cached_pass(block, source="sequence"), full_pass(block), atol=ATOL)


@pytest.mark.parametrize("matrices", [False, True], ids=["layers", "matrices"])
def test_cached_decoding_with_decoder_padding(block, matrices):
    # Second target sequence: 4 real tokens, then 2 padded slots holding junk.
    mask = np.array([[True] * T, [True] * 4 + [False] * 2])
    full = full_pass(block, decoder_padding_mask=mask)
    cached = cached_pass(block, decoder_padding_mask=mask, matrices=matrices)
    np.testing.assert_allclose(cached[mask], full[mask], atol=ATOL)


def test_cached_steps_of_unknown_length_in_a_tf_function(block):
    # A traced step whose length and batch are unknown until run: the
    # matrices' reshapes must take them from the tensors.
    if keras.backend.backend() != "tensorflow":
        pytest.skip("graph tracing with unknown shapes is TensorFlow's")
    import tensorflow as tf

    kwargs = {"projection_matrices": block.compute_projection_matrices()}
    if has_cross(block):
        kwargs["cross_attention_cache"] = block.compute_cross_attention_cache(SOURCE)
        kwargs["encoder_padding_mask"] = SOURCE_MASK

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, None, D_MODEL]),
            tf.TensorSpec([2, None, HEADS, T, D_MODEL // HEADS]),
            tf.TensorSpec([], tf.int32),
        ]
    )
    def step(target, cache, index):
        return block(
            target, self_attention_cache=cache, self_attention_cache_update_index=index, **kwargs
        )

    cache = block.initialize_self_attention_cache(B, T)
    outputs = []
    for start in (0, 2, 3):
        stop = {0: 2, 2: 3, 3: T}[start]
        output, cache = step(TARGET[:, start:stop], cache, start)
        outputs.append(as_numpy(output))
    np.testing.assert_allclose(np.concatenate(outputs, axis=1), full_pass(block), atol=ATOL)


def test_projection_matrices_leave_the_cache_the_layers_leave(block):
    cache = block.initialize_self_attention_cache(B, T)
    kwargs = (
        {
            "cross_attention_cache": block.compute_cross_attention_cache(SOURCE),
            "encoder_padding_mask": SOURCE_MASK,
        }
        if has_cross(block)
        else {}
    )
    caches = {}
    for matrices in (None, block.compute_projection_matrices()):
        step_cache = cache
        for index in range(T):
            _, step_cache = block(
                TARGET[:, index : index + 1],
                self_attention_cache=step_cache,
                self_attention_cache_update_index=index,
                projection_matrices=matrices,
                **kwargs,
            )
        caches[matrices is None] = as_numpy(step_cache)
    assert np.abs(caches[True]).min() > 0
    np.testing.assert_allclose(caches[False], caches[True], atol=ATOL)


def test_projection_matrices_are_the_layers_kernels(block):
    # Against the kernels in Keras' layout: [d, heads, head_dim] for query,
    # key and value, [heads, head_dim, d] for the output.
    matrices = block.compute_projection_matrices()
    x = random_inputs(3, D_MODEL, seed=50)
    attended = random_inputs(3, HEADS, D_MODEL // HEADS, seed=51)

    def projected(dense):
        heads = np.einsum("bd,dnh->bnh", x, as_numpy(dense.kernel)) + as_numpy(dense.bias)
        return heads.reshape(3, -1)

    def output(dense):
        return np.einsum("bnh,nhd->bd", attended, as_numpy(dense.kernel)) + as_numpy(dense.bias)

    attentions = {"self": block.self_attention}
    if has_cross(block):
        attentions["cross"] = block.cross_attention
    expected = {f"{kind}_output": output(a.output_dense) for kind, a in attentions.items()}
    attention = block.self_attention
    expected["self_query_key_value"] = np.concatenate(
        [
            projected(dense)
            for dense in (attention.query_dense, attention.key_dense, attention.value_dense)
        ],
        axis=1,
    )
    if has_cross(block):
        expected["cross_query"] = projected(block.cross_attention.query_dense)
    assert sorted(matrices) == sorted(expected)
    for name, value in expected.items():
        kernel, bias = (as_numpy(part) for part in matrices[name])
        inputs = attended.reshape(3, -1) if name.endswith("output") else x
        np.testing.assert_allclose(inputs @ kernel + bias, value, atol=1e-5, err_msg=name)


def test_cached_step_of_a_source_with_no_real_token(block):
    if not has_cross(block):
        pytest.skip("decoder-only block: no source")
    # The second source is all padding: its cross-attention output is zero.
    mask = np.array([[True] * S, [False] * S])
    output, _ = block(
        TARGET[:, :1],
        cross_attention_cache=block.compute_cross_attention_cache(SOURCE),
        encoder_padding_mask=mask,
        self_attention_cache=block.initialize_self_attention_cache(batch_size=B, max_length=1),
        self_attention_cache_update_index=0,
        projection_matrices=block.compute_projection_matrices(),
    )
    expected = block(TARGET[:, :1], SOURCE, encoder_padding_mask=mask)
    np.testing.assert_allclose(as_numpy(output), as_numpy(expected), atol=ATOL)


def test_cache_holds_projected_keys_and_values(block):
    cache = block.initialize_self_attention_cache(batch_size=B, max_length=T)
    np.testing.assert_array_equal(as_numpy(cache), 0.0)
    kwargs = (
        {
            "cross_attention_cache": block.compute_cross_attention_cache(SOURCE),
            "encoder_padding_mask": SOURCE_MASK,
        }
        if has_cross(block)
        else {}
    )
    _, cache = block(
        TARGET[:, :2], self_attention_cache=cache, self_attention_cache_update_index=0, **kwargs
    )
    cache = as_numpy(cache)
    assert cache.shape == (2, B, HEADS, T, D_MODEL // HEADS)
    # Slots 0..1 are written, slots 2.. are still empty.
    assert np.abs(cache[:, :, :, :2]).max() > 0
    np.testing.assert_array_equal(cache[:, :, :, 2:], 0.0)


def test_future_tokens_never_change_earlier_outputs(block):
    reference = full_pass(block)
    for position in range(T):
        changed = TARGET.copy()
        changed[:, position] = random_inputs(B, D_MODEL, seed=10 + position, scale=3.0)
        output = full_pass(block, target=changed)
        np.testing.assert_allclose(output[:, :position], reference[:, :position], atol=ATOL)
        # The changed position itself does change: the test can tell.
        assert np.abs(output[:, position] - reference[:, position]).max() > 1e-3


def test_padding_invariance_explicit_masks(block):
    reference = full_pass(block)
    target = np.concatenate([TARGET, random_inputs(B, 2, D_MODEL, seed=20, scale=4.0)], axis=1)
    target_mask = np.array([[True] * T + [False] * 2] * B)
    kwargs = {"decoder_padding_mask": target_mask}
    if has_cross(block):
        source = np.concatenate([SOURCE, random_inputs(B, 3, D_MODEL, seed=21, scale=4.0)], axis=1)
        source_mask = np.concatenate([SOURCE_MASK, np.zeros((B, 3), bool)], axis=1)
        output = as_numpy(block(target, source, encoder_padding_mask=source_mask, **kwargs))
    else:
        output = as_numpy(block(target, **kwargs))
    np.testing.assert_allclose(output[:, :T], reference, atol=ATOL)


def test_decoder_padding_before_real_tokens_is_invisible(block):
    # Slots 1 and 2 of the target are padding holding junk: later real tokens
    # must not see them (causality alone would let them).
    mask = np.array([[True, False, False, True, True, True]] * B)
    target = TARGET.copy()
    outputs = []
    for seed in (40, 41):
        target[:, 1:3] = random_inputs(B, 2, D_MODEL, seed=seed, scale=4.0)
        outputs.append(full_pass(block, target=target, decoder_padding_mask=mask))
    np.testing.assert_allclose(outputs[0][mask], outputs[1][mask], atol=ATOL)


def test_source_padding_matters_only_through_the_mask(block):
    if not has_cross(block):
        pytest.skip("decoder-only block: no source")
    junk = SOURCE.copy()
    junk[1, 3:] = random_inputs(2, D_MODEL, seed=30, scale=5.0)
    masked = as_numpy(block(TARGET, junk, encoder_padding_mask=SOURCE_MASK))
    np.testing.assert_allclose(masked, full_pass(block), atol=ATOL)
    # Unmasked, the same junk does reach the output.
    unmasked_a = as_numpy(block(TARGET, SOURCE))
    unmasked_b = as_numpy(block(TARGET, junk))
    assert np.abs(unmasked_a[1] - unmasked_b[1]).max() > 1e-3


@pytest.fixture(scope="module")
def masked_model(block):
    """Token ids -> Embedding(mask_zero=True) -> block: masks arrive as Keras masks."""
    keras.utils.set_random_seed(5)
    target_ids = keras.Input((None,), dtype="int32")
    target = keras.layers.Embedding(VOCAB, D_MODEL, mask_zero=True)(target_ids)
    if not has_cross(block):
        return keras.Model(target_ids, block(target))
    source_ids = keras.Input((None,), dtype="int32")
    source = keras.layers.Embedding(VOCAB, D_MODEL, mask_zero=True)(source_ids)
    return keras.Model([target_ids, source_ids], block(target, source))


def test_padding_invariance_keras_masks(block, masked_model):
    target_ids = np.array([[5, 3, 8, 2, 9, 4], [7, 1, 6, 0, 0, 0]], dtype="int32")
    source_ids = np.array([[2, 4, 6, 8, 1], [3, 5, 7, 0, 0]], dtype="int32")
    real = target_ids != 0

    def run(target, source):
        return as_numpy(masked_model([target, source] if has_cross(block) else target))

    short = run(target_ids, source_ids)
    longer = run(np.pad(target_ids, ((0, 0), (0, 2))), np.pad(source_ids, ((0, 0), (0, 3))))
    np.testing.assert_allclose(longer[:, :T][real], short[real], atol=ATOL)
    # The padded second pair gives what it gives unpadded, on its own.
    alone = run(target_ids[1:, :3], source_ids[1:, :3])
    np.testing.assert_allclose(short[1, :3], alone[0], atol=ATOL)
    # Padding before real tokens (left or middle padding) is invisible to them
    # too: causality alone would not hide it, only the Keras mask does.
    middle = run(np.array([[7, 0, 0, 1, 6]], "int32"), source_ids[1:, :3])
    np.testing.assert_allclose(middle[0, [0, 3, 4]], alone[0], atol=ATOL)


def test_return_attention_scores(block):
    kwargs = {"return_attention_scores": True}
    if has_cross(block):
        output, scores = block(TARGET, SOURCE, encoder_padding_mask=SOURCE_MASK, **kwargs)
    else:
        output, scores = block(TARGET, **kwargs)
    np.testing.assert_allclose(as_numpy(output), full_pass(block), atol=1e-6)
    self_scores = as_numpy(scores["self_attention"])
    assert self_scores.shape == (B, HEADS, T, T)
    future = ~np.tril(np.ones((T, T), dtype=bool))
    np.testing.assert_array_equal(self_scores[..., future], 0.0)
    np.testing.assert_allclose(self_scores.sum(-1), 1.0, atol=1e-5)
    if has_cross(block):
        cross_scores = as_numpy(scores["cross_attention"])
        assert cross_scores.shape == (B, HEADS, T, S)
        np.testing.assert_array_equal(cross_scores[1, :, :, 3:], 0.0)
        np.testing.assert_allclose(cross_scores.sum(-1), 1.0, atol=1e-5)
    else:
        assert "cross_attention" not in scores


def test_cross_attention_block_needs_a_source():
    layer = TransformerDecoderBlock(HEADS, FF)
    layer(TARGET, SOURCE)
    with pytest.raises(ValueError, match="encoder_sequence"):
        layer(TARGET)


def test_decoder_only_block_rejects_a_source():
    layer = TransformerDecoderBlock(HEADS, FF)
    layer(TARGET)
    with pytest.raises(ValueError, match="without cross-attention"):
        layer(TARGET, SOURCE)
    with pytest.raises(ValueError, match="no cross-attention"):
        layer.compute_cross_attention_cache(SOURCE)


def test_cache_needs_an_index():
    layer = TransformerDecoderBlock(HEADS, FF)
    layer(TARGET)
    cache = layer.initialize_self_attention_cache(batch_size=B, max_length=T)
    with pytest.raises(ValueError, match="self_attention_cache_update_index"):
        layer(TARGET[:, :1], self_attention_cache=cache)


@pytest.mark.parametrize("num_heads", [3, 5])
def test_heads_must_divide_width(num_heads):
    with pytest.raises(ValueError, match="multiple of `num_heads`"):
        TransformerDecoderBlock(num_heads, FF)(TARGET, SOURCE)


def test_compute_output_shape_is_the_real_shape(block):
    source_shape = (SOURCE.shape,) if has_cross(block) else ()
    assert block.compute_output_shape(TARGET.shape, *source_shape) == full_pass(block).shape
    # Symbolic calls, with the cache returned too.
    target = keras.Input((1, D_MODEL), batch_size=B)
    cache = keras.Input((B, HEADS, T, D_MODEL // HEADS), batch_size=2)
    source = (
        {
            "cross_attention_cache": keras.Input((B, HEADS, S, D_MODEL // HEADS), batch_size=2),
            "encoder_padding_mask": keras.Input((S,), batch_size=B, dtype="bool"),
        }
        if has_cross(block)
        else {}
    )
    output, new_cache = block(
        target, self_attention_cache=cache, self_attention_cache_update_index=0, **source
    )
    assert tuple(output.shape) == (B, 1, D_MODEL) and tuple(new_cache.shape) == tuple(cache.shape)
