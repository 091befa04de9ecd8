"""Every layer round-trips get_config/from_config and a `.keras` save/load."""

import json

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import (
    FeedForward,
    MultiHeadAttention,
    PositionEmbedding,
    SinusoidalPositionEncoding,
    TokenAndPositionEmbedding,
    TransformerDecoderBlock,
    TransformerEncoderBlock,
)

D_MODEL, VOCAB, LENGTH = 8, 30, 12


def as_numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor))


def floats(*shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


IDS = np.array([[4, 9, 2, 7, 5, 1], [3, 8, 6, 0, 0, 0]], dtype="int32")
X = floats(2, 6, D_MODEL, seed=1)
SOURCE = floats(2, 5, D_MODEL, seed=2)
SOURCE_MASK = np.array([[True] * 5, [True] * 3 + [False] * 2])

# (name, factory with non-default arguments, call on the fixed inputs)
CASES = [
    (
        "multi_head_attention",
        lambda: MultiHeadAttention(
            num_heads=2,
            key_dim=3,
            value_dim=5,
            output_shape=6,
            dropout=0.1,
            use_bias=False,
            kernel_initializer="he_normal",
            seed=3,
            name="mha",
        ),
        lambda layer: layer(X, SOURCE, use_causal_mask=False),
    ),
    (
        "sinusoidal_position_encoding",
        lambda: SinusoidalPositionEncoding(max_wavelength=500, name="sinusoids"),
        lambda layer: layer(X, start_index=2),
    ),
    (
        "position_embedding",
        lambda: PositionEmbedding(
            sequence_length=LENGTH, initializer="he_uniform", name="positions"
        ),
        lambda layer: layer(X, start_index=1),
    ),
    (
        "token_and_sinusoidal_position",
        lambda: TokenAndPositionEmbedding(
            VOCAB,
            LENGTH,
            D_MODEL,
            mask_zero=True,
            positional="sinusoidal",
            max_wavelength=1000,
            embeddings_initializer="glorot_uniform",
        ),
        lambda layer: layer(IDS),
    ),
    (
        "token_and_learned_position",
        lambda: TokenAndPositionEmbedding(
            VOCAB,
            LENGTH,
            D_MODEL,
            mask_zero=False,
            positional="learned",
            scale_embeddings=False,
        ),
        lambda layer: layer(IDS),
    ),
    (
        "feed_forward",
        lambda: FeedForward(
            16, activation="gelu", dropout=0.2, output_dim=6, bias_initializer="ones"
        ),
        lambda layer: layer(X),
    ),
    (
        "encoder_block",
        lambda: TransformerEncoderBlock(
            2,
            16,
            dropout=0.1,
            activation="gelu",
            layer_norm_epsilon=1e-6,
            normalize_first=True,
        ),
        lambda layer: layer(X, padding_mask=IDS != 0),
    ),
    (
        "decoder_block_cross",
        lambda: TransformerDecoderBlock(
            4, 16, dropout=0.1, activation="tanh", layer_norm_epsilon=1e-3
        ),
        lambda layer: layer(X, SOURCE, encoder_padding_mask=SOURCE_MASK),
    ),
    (
        "decoder_block_decoder_only",
        lambda: TransformerDecoderBlock(2, 12, normalize_first=True),
        lambda layer: layer(X, decoder_padding_mask=IDS != 0),
    ),
]


@pytest.mark.parametrize("make, call", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_config_round_trip(make, call):
    layer = make()
    expected = as_numpy(call(layer))  # built, weights initialized
    config = layer.get_config()

    # Through JSON, as in a saved model: tuples become lists and must come back.
    clone = type(layer).from_config(json.loads(json.dumps(config)))
    assert clone.get_config() == config
    call(clone)  # build the clone, then give it the original's weights
    assert len(clone.weights) == len(layer.weights)
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(as_numpy(call(clone)), expected, atol=1e-6)
    # Through Keras' generic (de)serialization, which uses the registered name.
    name = keras.saving.get_registered_name(type(layer))
    assert name == f"keras_transformer>{type(layer).__name__}"
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(revived) is type(layer)
    assert revived.get_config() == config


def build_model_with_every_layer():
    source_ids = keras.Input((None,), dtype="int32", name="source_ids")
    target_ids = keras.Input((None,), dtype="int32", name="target_ids")

    source = TokenAndPositionEmbedding(VOCAB, LENGTH, D_MODEL, positional="sinusoidal")(source_ids)
    source = TransformerEncoderBlock(2, 16)(source)
    attended = MultiHeadAttention(num_heads=2, key_dim=4)(source, source)
    source = keras.layers.Add()([source, attended])
    source = keras.layers.Add()([source, FeedForward(16, activation="gelu")(source)])

    target = TokenAndPositionEmbedding(VOCAB, LENGTH, D_MODEL, positional="learned")(target_ids)
    target = keras.layers.Add()([target, PositionEmbedding(LENGTH)(target)])
    target = keras.layers.Add()([target, SinusoidalPositionEncoding()(target)])
    target = TransformerDecoderBlock(2, 16)(target, source)
    target = TransformerDecoderBlock(2, 16, normalize_first=True)(target)
    logits = keras.layers.Dense(VOCAB)(target)
    return keras.Model([source_ids, target_ids], logits)


def test_model_with_every_layer_saves_and_loads(tmp_path):
    model = build_model_with_every_layer()
    source_ids = np.array([[4, 9, 2, 7, 5], [3, 8, 6, 0, 0]], dtype="int32")
    target_ids = np.array([[1, 5, 9, 2, 0, 0], [1, 7, 3, 3, 8, 6]], dtype="int32")
    expected = as_numpy(model([source_ids, target_ids]))

    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.models.load_model(path)

    used = {type(layer).__name__ for layer in loaded.layers}
    assert {
        "MultiHeadAttention",
        "SinusoidalPositionEncoding",
        "PositionEmbedding",
        "TokenAndPositionEmbedding",
        "FeedForward",
        "TransformerEncoderBlock",
        "TransformerDecoderBlock",
    } <= used
    assert all(
        type(layer).__module__.startswith(("keras_transformer", "keras")) for layer in loaded.layers
    )
    assert len(loaded.weights) == len(model.weights)
    for original, revived in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(as_numpy(revived), as_numpy(original))
    np.testing.assert_allclose(as_numpy(loaded([source_ids, target_ids])), expected, atol=1e-6)
    # The decoder blocks come back with (and without) cross-attention as saved.
    decoders = [layer for layer in loaded.layers if isinstance(layer, TransformerDecoderBlock)]
    assert [d.cross_attention is not None for d in decoders] == [True, False]
