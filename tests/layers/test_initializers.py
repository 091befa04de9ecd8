"""Every weight starts from its own initializer draw, seeded or not (clone_initializer)."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import (
    FeedForward,
    MultiHeadAttention,
    TokenAndPositionEmbedding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)
from keras_transformer.layers.initializers import clone_initializer

D_MODEL = 8


def leading(variable, count=8):
    return np.asarray(ops.convert_to_numpy(variable)).reshape(-1)[:count]


def assert_all_differ(kernels):
    """No two kernels start with the same values (flattened)."""
    for name_a, a in kernels.items():
        for name_b, b in kernels.items():
            if name_a < name_b:
                assert not np.allclose(leading(a), leading(b)), f"{name_a} and {name_b} start equal"


SEEDED = [
    pytest.param(lambda: "glorot_uniform", id="by_name"),
    pytest.param(lambda: keras.initializers.GlorotUniform(), id="one_unseeded_object"),
    pytest.param(lambda: keras.initializers.GlorotUniform(seed=7), id="one_seeded_object"),
]


@pytest.mark.parametrize("initializer", SEEDED)
def test_feed_forward_kernels_differ(initializer):
    # [d, ff] and [ff, d] Glorot kernels share their limit: one initializer
    # object gives both the same values.
    layer = FeedForward(16, kernel_initializer=initializer())
    layer.build((2, 3, 16))
    assert_all_differ(
        {"intermediate": layer.intermediate_dense.kernel, "output": layer.output_dense.kernel}
    )


@pytest.mark.parametrize("initializer", SEEDED)
def test_attention_projections_differ(initializer):
    layer = MultiHeadAttention(
        2, 4, kernel_initializer=initializer(), bias_initializer=initializer()
    )
    layer.build((2, 3, D_MODEL), (2, 3, D_MODEL))
    assert_all_differ({w.path: w for w in layer.weights if "attention_output" not in w.path})


@pytest.mark.parametrize("initializer", SEEDED)
def test_decoder_block_sublayers_differ(initializer):
    block = TransformerDecoderBlock(2, D_MODEL, kernel_initializer=initializer())
    block.build((2, 3, D_MODEL), (2, 4, D_MODEL))
    assert_all_differ(
        {
            "self_query": block.self_attention.query_dense.kernel,
            "self_key": block.self_attention.key_dense.kernel,
            "cross_query": block.cross_attention.query_dense.kernel,
            "cross_key": block.cross_attention.key_dense.kernel,
            "feed_forward_in": block.feed_forward.intermediate_dense.kernel,
            "feed_forward_out": block.feed_forward.output_dense.kernel,
        }
    )


def test_encoder_block_sublayers_differ_with_a_seed():
    block = TransformerEncoderBlock(
        2, D_MODEL, kernel_initializer=keras.initializers.GlorotUniform(seed=7)
    )
    block.build((2, 3, D_MODEL))
    assert_all_differ(
        {
            "query": block.self_attention.query_dense.kernel,
            "value": block.self_attention.value_dense.kernel,
            "feed_forward_in": block.feed_forward.intermediate_dense.kernel,
            "feed_forward_out": block.feed_forward.output_dense.kernel,
        }
    )


def test_a_seeded_block_is_reproducible():
    def build():
        block = TransformerEncoderBlock(
            2, D_MODEL, kernel_initializer=keras.initializers.GlorotUniform(seed=7)
        )
        block.build((2, 3, D_MODEL))
        return [np.asarray(ops.convert_to_numpy(w)) for w in block.weights]

    for first, second in zip(build(), build()):
        np.testing.assert_array_equal(first, second)


def test_embedding_gets_its_own_initializer():
    initializer = keras.initializers.RandomUniform(seed=3)
    layer = TokenAndPositionEmbedding(20, 5, D_MODEL, embeddings_initializer=initializer)
    layer.build((2, 5))
    assert layer.token_embedding.embeddings_initializer is not initializer
    # The layer's own config still holds what the user gave.
    assert layer.get_config()["embeddings_initializer"]["config"]["seed"] == 3


def test_clone_keeps_the_class_and_leaves_strings_alone():
    initializer = keras.initializers.TruncatedNormal(stddev=0.02, seed=5)
    clone = clone_initializer(initializer, "query_kernel")
    assert type(clone) is keras.initializers.TruncatedNormal and clone is not initializer
    assert clone.get_config()["stddev"] == 0.02
    assert clone.get_config()["seed"] != 5
    assert clone_initializer("zeros", "bias") == "zeros"
