"""The classifier's LiteRT export (`export_classifier_litert`) against the SavedModel of the
same model: the session's trained classifier (tests/classifier_fixtures.py) on its test split.

The token-id file runs in `ai_edge_litert`'s interpreter through `LiteRTClassifier` (also in
a process where TensorFlow cannot be imported); the raw-string file runs in TensorFlow's
interpreter with tensorflow-text's TFLite ops registered. The translator's:
tests/export/test_litert_translator.py.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from keras_transformer.export.litert_runtime import (
    CLASSIFIER_FILE,
    CLASSIFIER_TEXT_FILE,
    MANIFEST_FILE,
    LiteRTClassifier,
)
from tests.classifier_fixtures import load_export

# Beside the test split: case, accents, punctuation, characters outside the
# vocabulary, whitespace only, and a text longer than the model reads.
EDGE_TEXTS = [
    "The TEAM's Goal... Café naïve résumé -- «Stocks» 1,000.5%",
    "東京 ＦＩＬＭ ﬁlm 😀 tab\tnew\nline",
    "",
    "   ",
    " ".join(["market shares stocks film music actor"] * 12),
]
PROBABILITY_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def classifier_run(trained_classifier):
    """The trained run's model, tokenizer, export arguments and test split."""
    from keras_transformer.data.classification import load_classification_data
    from keras_transformer.models import TransformerClassifier
    from keras_transformer.training.classifier.tokenizing import encoding_arguments, run_tokenizer
    from keras_transformer.training.run_export import (
        CLASSIFIER_VOCABULARY_FILE,
        MODEL_FILE,
        _chosen_mix,
        load_run_model,
        read_run,
    )

    run = read_run(trained_classifier.run_dir)
    test_texts = load_classification_data(run.saved["data"], seed=run.settings.seed).test.texts
    return {
        "model": load_run_model(run.file(MODEL_FILE), TransformerClassifier, run),
        "tokenizer": run_tokenizer(run.settings, run.file(CLASSIFIER_VOCABULARY_FILE)),
        "class_names": run.saved["class_names"],
        "arguments": {"mix": _chosen_mix(run), **encoding_arguments(run.settings)},
        "texts": list(test_texts) + EDGE_TEXTS,
    }


@pytest.fixture(scope="module")
def savedmodel_answers(trained_classifier, classifier_run):
    """The SavedModel's `serving_default` on the texts: (probabilities, labels)."""
    import tensorflow as tf

    answer = load_export(trained_classifier.version_dir).signatures["serving_default"](
        text=tf.constant(classifier_run["texts"])
    )
    labels = [label.decode() for label in answer["label"].numpy()]
    return answer["probabilities"].numpy(), labels


@pytest.fixture(scope="module")
def classifier_exports(classifier_run, tmp_path_factory):
    """`{None: float32 version folder, "int8": quantized version folder}`, one base folder."""
    from keras_transformer.export.litert import export_classifier_litert

    base_dir = str(tmp_path_factory.mktemp("litert") / "classifier")
    return {
        quantize: export_classifier_litert(
            classifier_run["model"],
            classifier_run["tokenizer"],
            classifier_run["class_names"],
            base_dir,
            quantize=quantize,
            **classifier_run["arguments"],
        )
        for quantize in (None, "int8")
    }


def assert_same_answers(texts, probabilities, labels, savedmodel_answers):
    """The labels equal and the probabilities within `PROBABILITY_TOLERANCE` of the
    SavedModel's; the texts that differ are named."""
    expected_probabilities, expected_labels = savedmodel_answers
    differences = np.abs(probabilities - expected_probabilities).max(axis=-1)
    wrong = [
        (text, float(difference), label, expected)
        for text, difference, label, expected in zip(texts, differences, labels, expected_labels)
        if difference > PROBABILITY_TOLERANCE or label != expected
    ]
    assert not wrong, wrong


def run_raw_string_file(version_dir, texts):
    """`classifier_text.tflite` in TensorFlow's interpreter with tensorflow-text's ops."""
    import tensorflow_text as tf_text
    from tensorflow.lite.python.interpreter import InterpreterWithCustomOps

    with open(os.path.join(version_dir, MANIFEST_FILE), encoding="utf-8") as manifest_file:
        signature = json.load(manifest_file)["files"][CLASSIFIER_TEXT_FILE]["signature"]
    interpreter = InterpreterWithCustomOps(
        model_path=os.path.join(version_dir, CLASSIFIER_TEXT_FILE),
        custom_op_registerers=tf_text.tflite_registrar.SELECT_TFTEXT_OPS,
    )
    answer = interpreter.get_signature_runner(signature)(text=np.array(texts, dtype=object))
    return answer["probabilities"], [label.decode() for label in answer["label"]]


def test_token_id_file_gives_the_savedmodels_answers(
    classifier_exports, classifier_run, savedmodel_answers
):
    probabilities, labels = LiteRTClassifier(classifier_exports[None]).predict(
        classifier_run["texts"]
    )
    assert_same_answers(classifier_run["texts"], probabilities, labels, savedmodel_answers)


def test_raw_string_file_gives_the_savedmodels_answers(
    classifier_exports, classifier_run, savedmodel_answers
):
    probabilities, labels = run_raw_string_file(classifier_exports[None], classifier_run["texts"])
    assert_same_answers(classifier_run["texts"], probabilities, labels, savedmodel_answers)


def test_manifest_names_the_files_and_the_base_folder_reads_the_newest(classifier_exports):
    version_dir = classifier_exports["int8"]
    with open(os.path.join(version_dir, MANIFEST_FILE), encoding="utf-8") as manifest_file:
        manifest = json.load(manifest_file)
    assert manifest["quantization"] == "int8"
    assert set(manifest["files"]) == {CLASSIFIER_FILE, CLASSIFIER_TEXT_FILE}
    assert manifest["files"][CLASSIFIER_FILE]["inputs"]["token_ids"]["shape"] == [
        None,
        manifest["sequence_length"],
    ]
    # Versions are published as SavedModels are: 1 then 2, read newest first.
    assert [os.path.basename(folder) for folder in classifier_exports.values()] == ["1", "2"]
    assert LiteRTClassifier(os.path.dirname(version_dir)).version_dir == version_dir


# Runs LiteRTClassifier where `import tensorflow` (or keras) fails; prints its answers, and
# the modules of those packages that did get imported, as JSON.
NO_TENSORFLOW = textwrap.dedent(
    """
    import json, sys
    BLOCKED = ("tensorflow", "tensorflow_text", "keras")
    for name in BLOCKED:
        sys.modules[name] = None
    from keras_transformer.export.litert_runtime import LiteRTClassifier
    texts = json.loads(sys.argv[2])
    probabilities, labels = LiteRTClassifier(sys.argv[1]).predict(texts)
    imported = [
        name for name, module in sys.modules.items()
        if module is not None and name.split(".")[0] in BLOCKED
    ]
    print(json.dumps({"probabilities": probabilities.tolist(), "labels": labels,
                      "imported": imported}))
    """
)


def test_runtime_answers_without_tensorflow(classifier_exports, classifier_run, savedmodel_answers):
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            NO_TENSORFLOW,
            classifier_exports[None],
            json.dumps(classifier_run["texts"]),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["imported"] == []
    assert_same_answers(
        classifier_run["texts"],
        np.array(answer["probabilities"]),
        answer["labels"],
        savedmodel_answers,
    )


def test_int8_files_are_smaller_and_mostly_agree(classifier_exports, classifier_run):
    def size(quantize, name):
        return os.path.getsize(os.path.join(classifier_exports[quantize], name))

    assert size("int8", CLASSIFIER_FILE) < 0.9 * size(None, CLASSIFIER_FILE)
    # The raw-string file is mostly the tokenizer's tables, which stay as they are: it
    # shrinks by what the weights do.
    assert size("int8", CLASSIFIER_TEXT_FILE) < size(None, CLASSIFIER_TEXT_FILE)
    texts = classifier_run["texts"]
    float_probabilities, float_labels = LiteRTClassifier(classifier_exports[None]).predict(texts)
    int8_probabilities, int8_labels = LiteRTClassifier(classifier_exports["int8"]).predict(texts)
    agreement = np.mean([a == b for a, b in zip(float_labels, int8_labels)])
    assert agreement >= 0.9
    # Quantized, not another model: the probabilities move, but little.
    assert np.abs(int8_probabilities - float_probabilities).max() < 0.05
    text_probabilities, text_labels = run_raw_string_file(classifier_exports["int8"], texts)
    assert text_labels == int8_labels
    np.testing.assert_allclose(text_probabilities, int8_probabilities, atol=PROBABILITY_TOLERANCE)


# --- errors ------------------------------------------------------------------------


def test_a_bad_quantize_value_is_refused(classifier_run, tmp_path):
    from keras_transformer.export.litert import export_classifier_litert

    with pytest.raises(ValueError, match=r"`quantize` must be None .* got 'int4'"):
        export_classifier_litert(
            classifier_run["model"],
            classifier_run["tokenizer"],
            classifier_run["class_names"],
            str(tmp_path),
            quantize="int4",
        )
    assert os.listdir(tmp_path) == []


def test_a_refused_op_is_named_in_one_sentence():
    import tensorflow as tf

    from keras_transformer.export.litert import LiteRTConversionError, _convert, _Endpoint

    def strided_update(values):
        # TensorStridedSliceUpdate has no LiteRT kernel (the decoder's own cache write).
        return {
            "values": tf.raw_ops.TensorStridedSliceUpdate(
                input=values, begin=[0], end=[1], strides=[1], value=tf.zeros([1])
            )
        }

    endpoint = _Endpoint("serving_default", strided_update, tf.TensorSpec([4], tf.float32))
    with pytest.raises(LiteRTConversionError) as raised:
        _convert({"model.tflite": endpoint}, [], None, "the test model")
    message = str(raised.value)
    assert "TensorStridedSliceUpdate" in message
    assert "\n" not in message and message.startswith("The LiteRT converter cannot convert")


def test_the_runtime_refuses_a_savedmodel_folder(trained_classifier):
    with pytest.raises(FileNotFoundError, match=MANIFEST_FILE):
        LiteRTClassifier(trained_classifier.export_dir)
