"""`attention_class`: the README's CosineAttention inside blocks, on every attention path."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import (
    MultiHeadAttention,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)
from tests.layers.readme_snippet import readme_cosine_attention

D_MODEL, HEADS, FF = 16, 4, 32
B, T, S = 2, 5, 4
ATOL = 1e-5
SOURCE_MASK = np.array([[True] * S, [True, True, False, False]])


def random_inputs(*shape, seed):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


TARGET = random_inputs(B, T, D_MODEL, seed=1)
SOURCE = random_inputs(B, S, D_MODEL, seed=2)


@pytest.fixture(scope="module")
def cosine_attention():
    return readme_cosine_attention()["CosineAttention"]


def as_numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor))


@pytest.fixture(scope="module", params=[True, False], ids=["cross", "decoder_only"])
def blocks(request, cosine_attention):
    """(CosineAttention block, default block with the same weights)."""
    keras.utils.set_random_seed(11)
    cosine = TransformerDecoderBlock(HEADS, FF, attention_class=cosine_attention)
    default = TransformerDecoderBlock(HEADS, FF)
    for block in (cosine, default):
        block(TARGET, SOURCE) if request.param else block(TARGET)
    default.set_weights(cosine.get_weights())
    return cosine, default


def full_pass(block):
    if block.cross_attention is not None:
        return as_numpy(block(TARGET, SOURCE, encoder_padding_mask=SOURCE_MASK))
    return as_numpy(block(TARGET))


def cached_calls(block, matrices=False):
    """One token per call through the cache; with `matrices`, as a decoding loop
    calls the block, with its projection matrices."""
    cache = block.initialize_self_attention_cache(batch_size=B, max_length=T)
    kwargs = {}
    if matrices:
        kwargs["projection_matrices"] = block.compute_projection_matrices()
    if block.cross_attention is not None:
        kwargs.update(
            cross_attention_cache=block.compute_cross_attention_cache(SOURCE),
            encoder_padding_mask=SOURCE_MASK,
        )
    outputs = []
    for index in range(T):
        output, cache = block(
            TARGET[:, index : index + 1],
            self_attention_cache=cache,
            self_attention_cache_update_index=index,
            **kwargs,
        )
        outputs.append(as_numpy(output)[:, 0])
    return np.stack(outputs, axis=1)


def matrix_steps(block):
    return cached_calls(block, matrices=True)


def test_readme_block_uses_the_readme_class(cosine_attention):
    readme_block = readme_cosine_attention()["block"]
    assert readme_block.attention_class is cosine_attention
    assert issubclass(cosine_attention, MultiHeadAttention)


def test_every_attention_of_the_block_is_the_subclass(blocks, cosine_attention):
    cosine, default = blocks
    for attention in (cosine.self_attention, cosine.cross_attention):
        assert attention is None or type(attention) is cosine_attention
    assert type(default.self_attention) is MultiHeadAttention


def test_full_pass_and_cached_calls_agree(blocks):
    cosine, _ = blocks
    full = full_pass(cosine)
    np.testing.assert_allclose(cached_calls(cosine), full, atol=ATOL)
    np.testing.assert_allclose(matrix_steps(cosine), full, atol=ATOL)


def test_the_subclass_changes_every_path(blocks):
    # Same weights, default scoring: each path gives something else, so the
    # agreement above is the subclass's scoring on all three paths.
    cosine, default = blocks
    for path in (full_pass, cached_calls, matrix_steps):
        assert np.abs(path(cosine) - path(default)).max() > 1e-2, path.__name__


def test_cosine_scores_are_the_readme_formula(blocks):
    cosine, _ = blocks
    source = (SOURCE,) if cosine.cross_attention is not None else ()
    _, scores = cosine(TARGET, *source, return_attention_scores=True)
    attention = cosine.self_attention
    assert not cosine.normalize_first  # post-norm: the self-attention sees TARGET itself
    query = as_numpy(attention.project_query(TARGET))
    key = as_numpy(attention.project_key(TARGET))
    query /= np.linalg.norm(query, axis=-1, keepdims=True)
    key /= np.linalg.norm(key, axis=-1, keepdims=True)
    logits = 10.0 * query @ np.swapaxes(key, -1, -2)
    logits = np.where(np.tril(np.ones((T, T), bool)), logits, -np.inf)
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(as_numpy(scores["self_attention"]), expected, atol=1e-5)


def test_functional_model_with_the_subclass_saves_and_reloads(cosine_attention, tmp_path):
    keras.utils.set_random_seed(12)
    inputs = keras.Input((None, D_MODEL))
    outputs = TransformerEncoderBlock(HEADS, FF, attention_class=cosine_attention)(inputs)
    outputs = TransformerDecoderBlock(HEADS, FF, attention_class=cosine_attention)(outputs)
    model = keras.Model(inputs, outputs)
    path = tmp_path / "cosine.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert all(type(layer.self_attention) is cosine_attention for layer in loaded.layers[1:])
    np.testing.assert_allclose(as_numpy(loaded(TARGET)), as_numpy(model(TARGET)), atol=1e-6)


@pytest.mark.parametrize("block_class", [TransformerEncoderBlock, TransformerDecoderBlock])
def test_config_names_the_class_and_restores_it(block_class, cosine_attention):
    block = block_class(HEADS, FF, attention_class=cosine_attention)
    config = block.get_config()
    assert config["attention_class"] == "my_project>CosineAttention"
    assert block_class.from_config(config).attention_class is cosine_attention
    assert (
        block_class(HEADS, FF).get_config()["attention_class"]
        == "keras_transformer>MultiHeadAttention"
    )


@pytest.mark.parametrize(
    "attention_class, error, message",
    [
        (keras.layers.MultiHeadAttention, TypeError, "subclass"),
        (MultiHeadAttention(2, 4), TypeError, "subclass"),
        ("my_project>NoSuchAttention", ValueError, "Unknown `attention_class`"),
    ],
    ids=["keras_class", "an_instance", "unknown_name"],
)
@pytest.mark.parametrize("block_class", [TransformerEncoderBlock, TransformerDecoderBlock])
def test_bad_attention_class_is_named(block_class, attention_class, error, message):
    with pytest.raises(error, match=message):
        block_class(HEADS, FF, attention_class=attention_class)


def test_unregistered_subclass_fails_at_get_config():
    class Unregistered(MultiHeadAttention):
        pass

    block = TransformerEncoderBlock(HEADS, FF, attention_class=Unregistered)
    block(TARGET)  # usable...
    with pytest.raises(ValueError, match="Unregistered is not registered"):
        block.get_config()  # ...but not savable, and said so
