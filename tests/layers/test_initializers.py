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
from keras_transformer.layers.initializers import ReceptiveFieldGlorotUniform, clone_initializer
from keras_transformer.models import Seq2SeqTransformer

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


def classic_glorot_limit(shape):
    """Glorot's uniform limit with every axis before the last two a receptive field."""
    field = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    return np.sqrt(6.0 / (shape[-2] * field + shape[-1] * field))


def assert_uniform_within(kernel, limit):
    kernel = np.asarray(ops.convert_to_numpy(kernel))
    assert np.abs(kernel).max() <= limit * (1 + 1e-6)
    # Uniform on [-limit, limit]: it reaches near the limit, with std limit / sqrt(3).
    assert np.abs(kernel).max() > 0.95 * limit
    np.testing.assert_allclose(kernel.std(), limit / np.sqrt(3), rtol=0.05)


@pytest.mark.parametrize("shape", [(256, 4, 64), (4, 64, 256), (48, 32)], ids=str)
def test_receptive_field_glorot_draws_within_the_classic_limit(shape):
    assert_uniform_within(ReceptiveFieldGlorotUniform(seed=3)(shape), classic_glorot_limit(shape))


def test_einsum_dense_keeps_the_receptive_field_fans():
    # EinsumDense recounts the fans of a VarianceScaling initializer per
    # matrix; the wrapped one keeps its own.
    def query_kernel(initializer):
        dense = keras.layers.EinsumDense(
            "abc,cde->abde", output_shape=(None, 4, 64), kernel_initializer=initializer
        )
        dense.build((None, None, 256))
        return dense.kernel

    assert_uniform_within(
        query_kernel(ReceptiveFieldGlorotUniform(seed=1)), classic_glorot_limit((256, 4, 64))
    )
    assert_uniform_within(
        query_kernel(keras.initializers.GlorotUniform(seed=1)), classic_glorot_limit((256, 256))
    )


def test_seq2seq_attention_starts_at_the_receptive_field_scale():
    model = Seq2SeqTransformer(50, 60, num_encoder_layers=1, num_decoder_layers=1)
    model.build()
    block = model.decoder_blocks[0]
    for attention in (block.self_attention, block.cross_attention):
        assert_uniform_within(attention.query_dense.kernel, classic_glorot_limit((256, 4, 64)))
        assert_uniform_within(attention.output_dense.kernel, classic_glorot_limit((4, 64, 256)))
    assert_uniform_within(
        block.feed_forward.intermediate_dense.kernel, classic_glorot_limit((256, 1024))
    )
    restored = Seq2SeqTransformer.from_config(model.get_config())
    assert type(restored.kernel_initializer) is ReceptiveFieldGlorotUniform
    # Keras' Glorot, asked for by name, gives EinsumDense's per-matrix scale.
    keras_glorot = Seq2SeqTransformer(
        50, 60, num_encoder_layers=1, num_decoder_layers=1, kernel_initializer="glorot_uniform"
    )
    keras_glorot.build()
    assert_uniform_within(
        keras_glorot.encoder_blocks[0].self_attention.query_dense.kernel,
        classic_glorot_limit((256, 256)),
    )
