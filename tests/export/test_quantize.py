"""`quantize_int8` on the session's trained classifier (tests/classifier_fixtures.py): its
int8 SavedModel, written by `export_run` with the loaded model quantized before the export
builder, answers close to the float32 export, holds int8 kernels, is smaller, and loads
with TensorFlow and tensorflow-text alone. The translator's side is in
tests/export/test_quantize_translator.py (another shared fixture, so another file)."""

import json
import os
import random
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from keras_transformer.export.quantize import is_quantized_layer_type, quantize_int8
from tests.classifier_fixtures import CLASS_NAMES, keyword_text, load_export, load_keras_model
from tests.export.fresh_loader import LOADER_HEADER

# Keyword texts of every class, and a few with no keyword at all (the hardest to agree on).
_RANDOM = random.Random(11)
TEXTS = [keyword_text(CLASS_NAMES[index % 3], _RANDOM) for index in range(30)] + [
    "the city news report today",
    "people of the new year",
    "",
]

# In a process that cannot import this project: the export's answers and its variables'
# dtypes.
LOADER = LOADER_HEADER + textwrap.dedent(
    """
    import tensorflow_text  # noqa: F401  registers the tokenizer ops
    model = tf.saved_model.load(path)
    outputs = model.signatures["serving_default"](text=tf.constant(texts, tf.string))
    result = {
        "probabilities": outputs["probabilities"].numpy().tolist(),
        "labels": [label.decode("utf-8") for label in outputs["label"].numpy()],
        "variables": [[variable.name, variable.dtype.name] for variable in model.variables],
    }
    print("RESULT " + json.dumps(result))
    """
)


@pytest.fixture(scope="module")
def quantized_export(trained_classifier, tmp_path_factory):
    """`export_run` of the trained run, its model quantized as it leaves `load_run_model`:
    where `--quantize int8` calls `quantize_int8`. Returns the version folder."""
    from keras_transformer.training import run_export

    load_run_model = run_export.load_run_model
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            run_export,
            "load_run_model",
            lambda *arguments: quantize_int8(load_run_model(*arguments)),
        )
        exported = run_export.export_run(
            trained_classifier.run_dir, str(tmp_path_factory.mktemp("int8") / "export")
        )
    return exported.version_dir


@pytest.fixture(scope="module")
def loaded_outside(quantized_export, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("elsewhere")
    texts_path = cwd / "texts.json"
    texts_path.write_text(json.dumps([text.encode().hex() for text in TEXTS]))
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    environment["TF_CPP_MIN_LOG_LEVEL"] = "3"
    process = subprocess.run(
        [sys.executable, "-c", LOADER, quantized_export, str(texts_path)],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    [line] = [line for line in process.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(line[len("RESULT ") :])


def float32_probabilities(trained_classifier):
    import tensorflow as tf

    exported = load_export(trained_classifier.version_dir)
    return exported.signatures["serving_default"](text=tf.constant(TEXTS))["probabilities"].numpy()


def test_the_int8_export_answers_close_to_the_float32_one(trained_classifier, loaded_outside):
    expected = float32_probabilities(trained_classifier)
    probabilities = np.asarray(loaded_outside["probabilities"])
    assert probabilities.shape == expected.shape == (len(TEXTS), len(CLASS_NAMES))
    assert not np.array_equal(probabilities, expected)  # the int8 kernels, not the float ones
    assert np.abs(probabilities - expected).max() < 0.05
    same = np.mean(probabilities.argmax(axis=-1) == expected.argmax(axis=-1))
    assert same >= 0.9, same
    assert loaded_outside["labels"] == [CLASS_NAMES[i] for i in probabilities.argmax(axis=-1)]


def test_the_int8_export_holds_int8_kernels_and_float_embeddings(
    trained_classifier, loaded_outside
):
    model = load_keras_model(os.path.join(trained_classifier.run_dir, "model.keras"))
    dense_paths = {
        layer.path for layer in model._flatten_layers() if is_quantized_layer_type(layer)
    }
    # One block: query, key, value, output, two feed-forward layers; and the head.
    assert len(dense_paths) == 7
    variables = loaded_outside["variables"]  # [name, dtype] pairs; names repeat across layers
    int8_names = [name for name, dtype in variables if dtype == "int8"]
    assert len(int8_names) == len(dense_paths), int8_names
    assert all(name.endswith("/kernel:0") for name in int8_names), int8_names
    scales = [dtype for name, dtype in variables if name.endswith("/kernel_scale:0")]
    assert scales == ["float32"] * len(dense_paths)
    # Embeddings, biases, norms and the bag of n-grams stay float32 (beside integer state
    # such as the n-gram tables' ids).
    floats = {dtype for _, dtype in variables if dtype.startswith(("float", "bfloat"))}
    assert floats == {"float32"}, floats


def test_the_int8_export_is_smaller(trained_classifier, quantized_export):
    def variables_bytes(version_dir):
        folder = os.path.join(version_dir, "variables")
        return sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder))

    model = load_keras_model(os.path.join(trained_classifier.run_dir, "model.keras"))
    kernel_bytes = sum(
        int(np.prod(layer.kernel.shape)) * 4
        for layer in model._flatten_layers()
        if is_quantized_layer_type(layer)
    )
    saved = variables_bytes(trained_classifier.version_dir) - variables_bytes(quantized_export)
    # Three of every four kernel bytes, less the float32 scales.
    assert saved > 0.6 * kernel_bytes, (saved, kernel_bytes)


def test_quantize_int8_rejects_what_it_cannot_quantize():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    with pytest.raises(ValueError, match="Unsupported quantization mode 'int4'.*'int8'"):
        quantize_int8(model, "int4")
    with pytest.raises(ValueError, match="must be a keras.Model"):
        quantize_int8(keras.layers.Dense(3))
    with pytest.raises(ValueError, match="is not built"):
        quantize_int8(keras.Sequential([keras.layers.Dense(3)]))
    with pytest.raises(ValueError, match="no Dense or EinsumDense layer"):
        quantize_int8(keras.Sequential([keras.Input((4,)), keras.layers.LayerNormalization()]))
    assert quantize_int8(model) is model
    with pytest.raises(ValueError, match=r"already quantized \(int8\)"):
        quantize_int8(model)


def test_embeddings_stay_float():
    model = keras.Sequential(
        [keras.Input((5,), dtype="int32"), keras.layers.Embedding(10, 4), keras.layers.Dense(2)]
    )
    quantize_int8(model)
    embedding, dense = model.layers
    assert embedding.quantization_mode is None
    assert keras.backend.standardize_dtype(embedding.embeddings.dtype) == "float32"
    assert dense.quantization_mode == "int8"
