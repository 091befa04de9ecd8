"""Seq2SeqTransformer: shapes, serialization, and the cached step against the full decoder."""

import keras
import numpy as np
import pytest

from keras_transformer.models.seq2seq import Seq2SeqTransformer
from keras_transformer.training.compiling import build_optimizer

SOURCE = np.array([[5, 6, 7, 8, 0, 0], [9, 3, 4, 0, 0, 0]], np.int32)
TARGET = np.array([[4, 10, 11, 12, 13], [4, 14, 15, 0, 0]], np.int32)


def tiny(**overrides):
    arguments = dict(
        source_vocabulary_size=30,
        target_vocabulary_size=25,
        sequence_length=16,
        num_encoder_layers=2,
        num_decoder_layers=2,
        d_model=32,
        num_heads=4,
        intermediate_dim=64,
        dropout=0.0,
    )
    arguments.update(overrides)
    model = Seq2SeqTransformer(**arguments)
    model.build()
    return model


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(1)
    return tiny()


def test_logits_have_one_row_per_target_position(model):
    logits = model({"source_ids": SOURCE, "target_ids": TARGET})
    assert tuple(logits.shape) == (2, 5, 25)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"


def test_cached_steps_equal_the_teacher_forced_decoder(model):
    encoder_output, source_mask = model.encode(SOURCE)
    full = keras.ops.convert_to_numpy(model.decode(TARGET, encoder_output, source_mask))
    self_cache, step_constants = model.initialize_cache(
        encoder_output, source_mask, max_length=TARGET.shape[1]
    )
    for index in range(TARGET.shape[1]):
        logits, self_cache = model.decode_step(
            TARGET[:, index : index + 1], index, self_cache, step_constants
        )
        real = TARGET[:, index] != 0  # padded target positions are never decoded
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(logits)[real], full[real, index], atol=1e-4
        )


def test_source_padding_does_not_change_the_logits(model):
    padded = np.pad(SOURCE, [[0, 0], [0, 4]])
    inputs = {"source_ids": SOURCE, "target_ids": TARGET}
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model({"source_ids": padded, "target_ids": TARGET})),
        keras.ops.convert_to_numpy(model(inputs)),
        atol=1e-5,
    )


def test_saved_and_loaded_model_gives_the_same_logits(model, tmp_path):
    path = tmp_path / "seq2seq.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    inputs = {"source_ids": SOURCE, "target_ids": TARGET}
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(inputs)),
        keras.ops.convert_to_numpy(model(inputs)),
        atol=1e-6,
    )
    assert loaded.get_config() == model.get_config()


def test_source_word_dropout_drops_whole_source_tokens_in_training_only():
    keras.utils.set_random_seed(3)
    model = tiny(source_word_dropout=0.5)
    ids = np.tile(np.arange(1, 17, dtype=np.int32), (64, 1))
    embedded = keras.ops.convert_to_numpy(model.source_embedding(ids))
    dropped = keras.ops.convert_to_numpy(model.embed_source(ids, training=True))
    gone = np.all(dropped == 0, axis=-1)
    assert 0.4 < gone.mean() < 0.6
    np.testing.assert_allclose(dropped[~gone], 2 * embedded[~gone], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model.embed_source(ids)), embedded)
    assert Seq2SeqTransformer.from_config(model.get_config()).source_word_dropout == 0.5


def test_shared_embeddings_tie_the_output_projection():
    model = tiny(source_vocabulary_size=25, share_embeddings=True)
    assert model.output_projection is None
    assert model.source_embedding is model.target_embedding
    unshared = tiny(source_vocabulary_size=25)
    assert len(model.weights) < len(unshared.weights)


def test_shared_embeddings_need_one_vocabulary():
    with pytest.raises(ValueError, match="one vocabulary"):
        Seq2SeqTransformer(30, 25, share_embeddings=True)


def test_fit_learns_to_copy_the_source():
    keras.utils.set_random_seed(2)
    rng = np.random.default_rng(0)
    source = rng.integers(6, 20, size=(64, 5)).astype(np.int32)
    target_in = np.concatenate([np.full((64, 1), 4, np.int32), source], axis=1)
    target_out = np.concatenate([source, np.full((64, 1), 5, np.int32)], axis=1)
    model = tiny(source_vocabulary_size=25, d_model=32, num_encoder_layers=1, num_decoder_layers=1)
    model.compile(
        keras.optimizers.Adam(3e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    build_optimizer(model)
    history = model.fit(
        {"source_ids": source, "target_ids": target_in},
        target_out,
        epochs=30,
        batch_size=16,
        verbose=0,
    )
    assert history.history["loss"][-1] < 0.3 * history.history["loss"][0]
