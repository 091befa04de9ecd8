"""The translator's LiteRT export (`export_translator_litert`): the whole greedy decoding in
one `.tflite` file, giving the SavedModel's `greedy` translations, run by `LiteRTTranslator`
on the tiny translator of tests/export/test_translator_export.py."""

import os

import numpy as np
import pytest

from keras_transformer.export.litert_runtime import (
    TRANSLATOR_FILE,
    LiteRTClassifier,
    LiteRTTranslator,
)
from tests.classifier_fixtures import load_export
from tests.export.test_translator_export import PAIRS, build_translator


@pytest.fixture(scope="session")
def tiny_translator(tmp_path_factory):
    return build_translator(tmp_path_factory)


TRANSLATOR_TEXTS = [source for source, _ in PAIRS] + ["", "el perro", "EL GATO ROJO!"]


@pytest.fixture(scope="module")
def translator_export(tiny_translator, tmp_path_factory):
    import keras

    from keras_transformer.export.litert import export_translator_litert
    from keras_transformer.text import WordPieceTokenizer

    return export_translator_litert(
        keras.models.load_model(tiny_translator.model_path, compile=False),
        WordPieceTokenizer(tiny_translator.source_vocabulary),
        WordPieceTokenizer(tiny_translator.target_vocabulary),
        str(tmp_path_factory.mktemp("litert") / "translator"),
        max_output_length=16,
    )


def test_translator_gives_the_savedmodels_greedy_translations(tiny_translator, translator_export):
    import tensorflow as tf

    greedy = load_export(tiny_translator.version_dir).signatures["greedy"]
    expected = [
        text.decode() for text in greedy(text=tf.constant(TRANSLATOR_TEXTS))["translation"].numpy()
    ]
    translator = LiteRTTranslator(translator_export)
    assert translator.translate(TRANSLATOR_TEXTS) == expected
    ids = translator.greedy_ids(TRANSLATOR_TEXTS[:3])
    assert ids.shape == (3, 16) and ids.dtype == np.int32


def test_translator_decodes_inside_one_while_loop(translator_export):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=os.path.join(translator_export, TRANSLATOR_FILE))
    operations = {operation["op_name"] for operation in interpreter._get_ops_details()}
    # The main graph: the encoder, then the loop (its body, a subgraph of its own, decodes).
    assert "WHILE" in operations


def test_the_classifier_runtime_refuses_a_translator(translator_export):
    with pytest.raises(ValueError, match="translator's export, not a classifier's"):
        LiteRTClassifier(translator_export)
