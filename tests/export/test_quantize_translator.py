"""`quantize_int8` on the session's tiny translator (tests/export/test_translator_export.py):
the quantized model's cached decoding agrees with its own full pass, and it translates
mostly as the float32 SavedModel does. (Its own SavedModel is written by
benchmarks/quantization.py, which serves it: an export of the translator costs more
than this file's budget; tests/export/test_quantize.py checks the classifier's.)"""

import keras
import numpy as np
import pytest

from keras_transformer.export.quantize import is_quantized_layer_type, quantize_int8
from tests.export.test_translator_export import PAIRS, SEQUENCE_LENGTH, build_translator

SOURCES = [source for source, _ in PAIRS]


@pytest.fixture(scope="module")
def tiny_translator(tmp_path_factory):
    return build_translator(tmp_path_factory)


@pytest.fixture(scope="module")
def quantized(tiny_translator):
    """`(model, source tokenizer, target tokenizer)`: the tiny translator, quantized."""
    from keras_transformer.text import WordPieceTokenizer

    model = quantize_int8(keras.models.load_model(tiny_translator.model_path))
    return (
        model,
        WordPieceTokenizer(tiny_translator.source_vocabulary),
        WordPieceTokenizer(tiny_translator.target_vocabulary),
    )


@pytest.fixture(scope="module")
def greedy_ids(quantized):
    import tensorflow as tf

    from keras_transformer.decoding import greedy_decode

    model, source, target = quantized
    source_ids = source.encode(tf.constant(SOURCES), SEQUENCE_LENGTH)
    ids = greedy_decode(
        model, source_ids, SEQUENCE_LENGTH, target.token_id("[START]"), target.token_id("[END]")
    )
    return source_ids.numpy(), keras.ops.convert_to_numpy(ids)


def test_every_projection_of_the_translator_is_int8(quantized):
    model = quantized[0]
    dense = [layer for layer in model._flatten_layers() if is_quantized_layer_type(layer)]
    # Per encoder block 4 + 2, per decoder block 8 + 2, and the output projection.
    assert len(dense) == 6 + 10 + 1
    for layer in dense:
        assert keras.backend.standardize_dtype(layer._kernel.dtype) == "int8", layer.path
    for block in model.decoder_blocks:
        assert block.compute_projection_matrices() is None  # no float matrices to read
    assert model._output_matrix() is None


def test_cached_decoding_of_the_quantized_model_follows_its_full_pass(
    tiny_translator, quantized, greedy_ids
):
    """The greedy tokens, fed back teacher-forced through one full pass, give logits close
    to the float32 model's (scaled back from int8, not raw integers), the logits that
    `decode_step` gives from the cache at every position (the output projection's
    included), and the pass's argmax is the greedy token up to [END]."""
    model, _, target = quantized
    source_ids, ids = greedy_ids
    start, end = target.token_id("[START]"), target.token_id("[END]")
    target_in = np.concatenate([np.full((len(ids), 1), start), ids[:, :-1]], axis=1)
    encoded, source_mask = model.encode(source_ids)
    logits = keras.ops.convert_to_numpy(model.decode(target_in, encoded, source_mask))
    float_model = keras.models.load_model(tiny_translator.model_path)
    float_logits = keras.ops.convert_to_numpy(
        float_model.decode(target_in, *float_model.encode(source_ids))
    )
    assert not np.array_equal(logits, float_logits)
    np.testing.assert_allclose(logits, float_logits, atol=0.05 * np.abs(float_logits).max())
    # "the <color> <noun> [END]": the first four positions hold real tokens in every row.
    cache, constants = model.initialize_cache(encoded, source_mask, SEQUENCE_LENGTH)
    for index in range(4):
        step_logits, cache = model.decode_step(
            target_in[:, index : index + 1], index, cache, constants
        )
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(step_logits),
            logits[:, index],
            atol=1e-4 * np.abs(logits[:, index]).max(),
            err_msg=f"position {index}",
        )
    for row, (tokens, row_logits) in enumerate(zip(ids, logits)):
        length = list(tokens).index(end) + 1 if end in tokens else len(tokens)
        np.testing.assert_array_equal(
            row_logits[:length].argmax(axis=-1), tokens[:length], err_msg=SOURCES[row]
        )


def test_the_quantized_translator_translates_mostly_as_the_float32_export(
    tiny_translator, quantized, greedy_ids
):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the tokenizer ops

    int8 = quantized[2].detokenize(greedy_ids[1]).numpy()
    float32 = tf.saved_model.load(tiny_translator.version_dir)
    expected = float32.signatures["greedy"](text=tf.constant(SOURCES))["translation"].numpy()
    same = np.mean(np.asarray(int8) == np.asarray(expected))
    assert same >= 0.8, same
