"""The classifier's ONNX export (`keras_transformer.export.onnx`), run by ONNX Runtime,
answers as the SavedModel of the same model: the session's trained classifier
(tests/classifier_fixtures.py), exported to ONNX once per module. Also the errors of the
ONNX conversion. The translator's: tests/export/test_onnx_translator_export.py.
"""

import csv
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.export.onnx import (
    ONNX_CONFIG_FILE,
    ONNX_MODEL_FILE,
    ExportFormatError,
    convert_function,
    export_classifier_onnx,
    export_translator_onnx,
)
from keras_transformer.export.onnx_runtime import OnnxClassifier
from tests.classifier_fixtures import CLASS_NAMES, load_export
from tests.export.onnx_helpers import run_without_tensorflow

# Beside the training texts: empty, whitespace, unknown words, accents, punctuation, CJK,
# emoji, control characters, longer than the model reads.
EDGE_TEXTS = [
    "",
    "   ",
    "Goal! The TEAM's match, today.",
    "café stocks naïve ÉCOLE shares",
    "日本 film 😀 music\tactor\x07",
    " ".join(["market"] * 80),
]


@pytest.fixture(scope="module")
def texts(trained_classifier):
    with open(trained_classifier.csv_path, newline="", encoding="utf-8") as csv_file:
        training_texts = [row["text"] for row in csv.DictReader(csv_file)]
    return training_texts[:40] + EDGE_TEXTS


@pytest.fixture(scope="module")
def classifier_onnx(trained_classifier, tmp_path_factory):
    """The trained run's model exported to ONNX, with what `export_run` gives its SavedModel."""
    from keras_transformer.models import TransformerClassifier
    from keras_transformer.training.classifier.tokenizing import encoding_arguments, run_tokenizer
    from keras_transformer.training.run_export import _chosen_mix, load_run_model, read_run

    run = read_run(trained_classifier.run_dir)
    tokenizer = run_tokenizer(run.settings, run.file("vocabulary.txt"))
    model = load_run_model(run.file("model.keras"), TransformerClassifier, run)
    return export_classifier_onnx(
        model,
        tokenizer,
        run.saved["class_names"],
        str(tmp_path_factory.mktemp("classifier_onnx")),
        mix=_chosen_mix(run),
        **encoding_arguments(run.settings),
    )


@pytest.fixture(scope="module")
def expected(trained_classifier, texts):
    """The SavedModel's answers: the reference for every ONNX answer."""
    classify = load_export(trained_classifier.version_dir).signatures["serving_default"]
    answers = classify(text=tf.constant(texts))
    return answers["probabilities"].numpy(), [label.decode() for label in answers["label"].numpy()]


def test_probabilities_and_labels_are_the_saved_models(classifier_onnx, texts, expected):
    probabilities, labels = OnnxClassifier(classifier_onnx).predict(texts)
    np.testing.assert_allclose(probabilities, expected[0], atol=1e-4)
    assert labels == expected[1]
    # The model learned its task, so equal labels are not equal by chance.
    assert set(labels[:40]) == set(CLASS_NAMES)


def test_the_version_folder_holds_the_model_its_settings_and_tokenizer(classifier_onnx):
    assert os.path.basename(classifier_onnx) == "1"
    assert sorted(os.listdir(classifier_onnx)) == sorted(
        [ONNX_CONFIG_FILE, ONNX_MODEL_FILE, "tokenizer"]
    )
    with open(os.path.join(classifier_onnx, ONNX_CONFIG_FILE), encoding="utf-8") as file:
        config = json.load(file)
    assert config["class_names"] == CLASS_NAMES
    assert config["parts"]["encoder"] is True


def test_the_runtime_answers_where_tensorflow_cannot_be_imported(classifier_onnx, texts, expected):
    answers = run_without_tensorflow(
        """
        probabilities, labels = OnnxClassifier(arguments["path"]).predict(arguments["texts"])
        answer = {"probabilities": probabilities.tolist(), "labels": labels}
        """,
        # The base folder: the runtime finds the newest version itself.
        {"path": os.path.dirname(classifier_onnx), "texts": texts},
    )
    np.testing.assert_allclose(answers["probabilities"], expected[0], atol=1e-4)
    assert answers["labels"] == expected[1]


def test_int8_quantization_makes_the_kernels_int8_and_keeps_the_answers(
    classifier_onnx, texts, expected, tmp_path
):
    import onnx

    from keras_transformer.export.onnx import _quantize_int8

    # The float32 export's graph quantized, as `quantize="int8"` quantizes a new one.
    for name in os.listdir(classifier_onnx):
        if name != ONNX_MODEL_FILE:
            os.symlink(os.path.join(classifier_onnx, name), tmp_path / name)
    float_path = os.path.join(classifier_onnx, ONNX_MODEL_FILE)
    _quantize_int8(onnx.load(float_path), str(tmp_path / ONNX_MODEL_FILE))
    quantized = onnx.load(str(tmp_path / ONNX_MODEL_FILE))
    assert "DynamicQuantizeLinear" in {node.op_type for node in quantized.graph.node}
    int8_weights = [
        weight
        for weight in quantized.graph.initializer
        if weight.data_type == onnx.TensorProto.INT8
    ]
    # Every projection's kernel (a tiny model's file is no smaller: the bag of n-grams' table,
    # looked up rather than multiplied, stays float32 and dominates it).
    assert len(int8_weights) >= 6
    probabilities, labels = OnnxClassifier(str(tmp_path)).predict(texts)
    assert np.abs(probabilities - expected[0]).max() < 0.05
    assert np.mean(np.array(labels) == np.array(expected[1])) >= 0.9


def test_an_op_without_a_conversion_is_named_in_one_sentence():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def incomplete_gamma(x):
        return {"y": tf.math.igamma(x, x + 1.0)}

    with pytest.raises(ExportFormatError) as raised:
        convert_function(incomplete_gamma, "test model")
    message = str(raised.value)
    assert message.startswith("The test model cannot be exported to ONNX")
    assert message.endswith("no conversion for the TensorFlow op Igamma.")
    assert "\n" not in message


@pytest.mark.parametrize("quantize", ["int4", "float16"])
def test_an_unknown_quantization_is_refused_before_anything_is_written(quantize, tmp_path):
    with pytest.raises(ValueError, match="`quantize` must be one of None, 'int8'"):
        export_translator_onnx(None, None, None, str(tmp_path / "translator"), quantize=quantize)
    with pytest.raises(ValueError, match="`quantize` must be one of None, 'int8'"):
        export_classifier_onnx(None, None, [], str(tmp_path / "classifier"), quantize=quantize)
    assert os.listdir(tmp_path) == []
