"""The translator's ONNX export (`keras_transformer.export.onnx`), run by ONNX Runtime, gives
the greedy tokens of the SavedModel of the same model: the session's tiny translator
(tests/export/test_translator_export.py), exported to ONNX once per module.
"""

import os

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.export.onnx import ONNX_CONFIG_FILE, ONNX_MODEL_FILE, export_translator_onnx
from keras_transformer.export.onnx_runtime import OnnxTranslator
from keras_transformer.text.vocabulary import END, START
from tests.classifier_fixtures import load_export, load_keras_model
from tests.export.onnx_helpers import run_without_tensorflow
from tests.export.test_translator_export import PAIRS, build_translator

# Beside training sources: empty, punctuation, upper case, unknown words, longer than the
# model reads.
SOURCES = [source for source, _ in PAIRS[::3]] + [
    "",
    "el perro rojo.",
    "EL GATO AZUL",
    "sombrero verde 日本 😀",
    "el " * 40,
]


@pytest.fixture(scope="session")
def tiny_translator(tmp_path_factory):
    return build_translator(tmp_path_factory)


@pytest.fixture(scope="module")
def tokenizers(tiny_translator):
    from keras_transformer.text import WordPieceTokenizer

    return (
        WordPieceTokenizer(tiny_translator.source_vocabulary),
        WordPieceTokenizer(tiny_translator.target_vocabulary),
    )


@pytest.fixture(scope="module")
def translator_onnx(tiny_translator, tokenizers, tmp_path_factory):
    """The tiny translator exported to ONNX with the SavedModel's `max_output_length`."""
    return export_translator_onnx(
        load_keras_model(tiny_translator.model_path),
        *tokenizers,
        str(tmp_path_factory.mktemp("translator_onnx")),
    )


@pytest.fixture(scope="module")
def expected(tiny_translator):
    """The SavedModel's greedy translations: the reference for the ONNX export's."""
    greedy = load_export(tiny_translator.version_dir).signatures["greedy"]
    return [text.decode() for text in greedy(text=tf.constant(SOURCES))["translation"].numpy()]


def test_greedy_translations_are_the_saved_models(translator_onnx, expected):
    translator = OnnxTranslator(translator_onnx)
    assert translator.translate(SOURCES) == expected
    # The model learned its pairs, so equal translations are not equal by chance.
    assert translator.translate(["el perro azul"]) == ["the blue dog"]


def test_greedy_tokens_are_the_library_decoders(translator_onnx, tiny_translator, tokenizers):
    from keras_transformer.decoding import greedy_decode

    translator = OnnxTranslator(translator_onnx)
    model = load_keras_model(tiny_translator.model_path)
    source_tokenizer, target_tokenizer = tokenizers
    source_ids = source_tokenizer.encode(tf.constant(SOURCES), model.sequence_length)
    # Token for token, [END] and the padding after it included.
    library_ids = greedy_decode(
        model,
        source_ids,
        translator.config["max_output_length"],
        target_tokenizer.token_id(START),
        target_tokenizer.token_id(END),
    ).numpy()
    np.testing.assert_array_equal(translator.translate_ids(SOURCES), library_ids)


def test_the_version_folder_holds_the_model_its_settings_and_tokenizers(translator_onnx):
    assert sorted(os.listdir(translator_onnx)) == sorted(
        [ONNX_CONFIG_FILE, ONNX_MODEL_FILE, "source", "target"]
    )
    assert os.listdir(os.path.dirname(translator_onnx)) == ["1"]


def test_the_runtime_translates_where_tensorflow_cannot_be_imported(translator_onnx, expected):
    translations = run_without_tensorflow(
        'answer = OnnxTranslator(arguments["path"]).translate(arguments["sources"])',
        {"path": translator_onnx, "sources": SOURCES},
    )
    assert translations == expected
