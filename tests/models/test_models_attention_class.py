"""Models with `attention_class`: the README's CosineAttention through training, caching
and greedy decoding."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import greedy_decode
from keras_transformer.layers import MultiHeadAttention
from keras_transformer.models import Seq2SeqTransformer, TransformerClassifier
from tests.layers.readme_snippet import readme_cosine_attention
from tests.test_decoding import (
    END,
    START,
    uncached_greedy,  # re-runs the whole decoder on the prefix each step
)

SOURCE = np.array([[5, 6, 7, 8, 9, 10], [9, 3, 0, 0, 0, 0], [7, 7, 7, 7, 0, 0]], np.int32)
TARGET = np.array([[4, 10, 11, 7, 8], [4, 9, 3, 0, 0], [4, 6, 6, 6, 6]], np.int32)
MAX_LENGTH = 8


@pytest.fixture(scope="module")
def cosine_attention():
    return readme_cosine_attention()["CosineAttention"]


def seq2seq(attention_class=MultiHeadAttention):
    model = Seq2SeqTransformer(
        30,
        12,
        sequence_length=16,
        num_encoder_layers=2,
        num_decoder_layers=2,
        d_model=32,
        num_heads=4,
        intermediate_dim=64,
        dropout=0.0,
        attention_class=attention_class,
    )
    model.build()
    return model


@pytest.fixture(scope="module")
def models(cosine_attention):
    """(CosineAttention model, default model with the same weights)."""
    keras.utils.set_random_seed(3)
    cosine, default = seq2seq(cosine_attention), seq2seq()
    # Sharper logits than the initialization gives, so that greedy decoding
    # picks [END] somewhere and sequences differ in length.
    kernel, bias = cosine.output_projection.get_weights()
    cosine.output_projection.set_weights([kernel * 3.0, bias])
    default.set_weights(cosine.get_weights())
    return cosine, default


def teacher_forced(model):
    encoder_output, source_mask = model.encode(SOURCE)
    return keras.ops.convert_to_numpy(model.decode(TARGET, encoder_output, source_mask))


def stepped(model):
    encoder_output, source_mask = model.encode(SOURCE)
    self_cache, constants = model.initialize_cache(
        encoder_output, source_mask, max_length=TARGET.shape[1]
    )
    logits = []
    for index in range(TARGET.shape[1]):
        step, self_cache = model.decode_step(
            TARGET[:, index : index + 1], index, self_cache, constants
        )
        logits.append(keras.ops.convert_to_numpy(step))
    return np.stack(logits, axis=1)


def test_every_block_attends_with_the_subclass(models, cosine_attention):
    cosine, _ = models
    attentions = [block.self_attention for block in cosine.encoder_blocks + cosine.decoder_blocks]
    attentions += [block.cross_attention for block in cosine.decoder_blocks]
    assert len(attentions) == 6 and all(type(a) is cosine_attention for a in attentions)


def test_decode_steps_equal_the_teacher_forced_decoder(models):
    cosine, default = models
    real = TARGET != 0  # padded target positions are never decoded
    full = teacher_forced(cosine)
    np.testing.assert_allclose(stepped(cosine)[real], full[real], atol=1e-4)
    # The default scoring with the same weights gives other logits on both paths.
    assert np.abs(teacher_forced(default) - full)[real].max() > 1e-2
    assert np.abs(stepped(default) - stepped(cosine))[real].max() > 1e-2


def test_cached_greedy_equals_uncached_greedy(models):
    cosine, default = models
    cached = greedy_decode(cosine, SOURCE, MAX_LENGTH, START, END).numpy()
    np.testing.assert_array_equal(cached, uncached_greedy(cosine, SOURCE, MAX_LENGTH))
    assert (cached == END).any(), "the test needs a sequence that stops early"
    assert not np.array_equal(
        cached, greedy_decode(default, SOURCE, MAX_LENGTH, START, END).numpy()
    )


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("scoring", ["cosine", "default"])
def test_greedy_in_a_tf_function_equals_eager(models, batch, scoring):
    # As exports run it: one traced graph, where TensorFlow's graph rewrites
    # apply (one of them once made the traced loop return an empty tensor).
    model = models[0] if scoring == "cosine" else models[1]
    source = tf.constant(SOURCE[:batch])
    traced = tf.function(lambda ids: greedy_decode(model, ids, MAX_LENGTH, START, END))(source)
    np.testing.assert_array_equal(
        traced.numpy(), greedy_decode(model, source, MAX_LENGTH, START, END).numpy()
    )


def test_saved_and_loaded_model_keeps_the_subclass(models, cosine_attention, tmp_path):
    cosine, _ = models
    path = tmp_path / "cosine.keras"
    cosine.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.attention_class is cosine_attention
    assert type(loaded.decoder_blocks[0].cross_attention) is cosine_attention
    inputs = {"source_ids": SOURCE, "target_ids": TARGET}
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(inputs)),
        keras.ops.convert_to_numpy(cosine(inputs)),
        atol=1e-6,
    )


def test_classifier_with_the_subclass_saves_and_reloads(cosine_attention, tmp_path):
    keras.utils.set_random_seed(4)
    model = TransformerClassifier(
        vocabulary_size=30,
        num_classes=3,
        sequence_length=8,
        d_model=16,
        num_heads=2,
        intermediate_dim=32,
        attention_class=cosine_attention,
    )
    probabilities = keras.ops.convert_to_numpy(model(SOURCE))
    assert all(type(block.self_attention) is cosine_attention for block in model.encoder_blocks)
    path = tmp_path / "classifier.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(SOURCE)), probabilities, atol=1e-6)


@pytest.mark.parametrize("model_class", [Seq2SeqTransformer, TransformerClassifier])
def test_models_reject_a_class_that_is_not_our_attention(model_class):
    with pytest.raises(TypeError, match="attention_class"):
        model_class(30, 12, attention_class=keras.layers.MultiHeadAttention)
