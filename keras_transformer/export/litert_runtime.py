"""The LiteRT exports run with NumPy and `ai_edge_litert` alone: no TensorFlow, no Keras.

`export_classifier_litert` and `export_translator_litert`
(`keras_transformer.export.litert`) write a version folder whose token-id
`.tflite` file runs in `ai_edge_litert`'s interpreter; the tokenizer files
beside it give its ids in plain Python (`PythonWordPieceTokenizer`, the same ids
as the SavedModel's tokenizer). This module reads such a folder:

>>> classifier = LiteRTClassifier("exported_models/classifier_litert")
>>> probabilities, labels = classifier.predict(["The match ended in a draw."])
>>> translator = LiteRTTranslator("exported_models/translator_litert")
>>> translator.translate(["el perro azul"])
['the blue dog']

It imports neither TensorFlow nor Keras, and `ai_edge_litert` only when a
model is loaded; the file names and the manifest's keys are defined here, where
both the exporter and the readers find them.
"""

import json
import os

import numpy as np

from keras_transformer.export.versions import latest_version_dir
from keras_transformer.text.python_tokenizer import read_tokenizer_files

# What a LiteRT version folder holds.
MANIFEST_FILE = "litert.json"  # written last: a folder with it is complete
CLASSIFIER_FILE = "classifier.tflite"  # token ids in; ai_edge_litert alone
CLASSIFIER_TEXT_FILE = "classifier_text.tflite"  # raw strings in; tensorflow-text's ops
TRANSLATOR_FILE = "translator.tflite"  # source ids in, greedy target ids out
CLASS_NAMES_FILE = "class_names.txt"
TOKENIZER_DIR = "tokenizer"
SOURCE_TOKENIZER_DIR = "source_tokenizer"
TARGET_TOKENIZER_DIR = "target_tokenizer"
FORMAT = "keras_transformer.litert"
FORMAT_VERSION = 1
# Each `.tflite` file holds one signature: the token-id files this one, the raw-string
# file `TEXT_SIGNATURE` (the manifest names each file's).
SIGNATURE = "serving_default"
TEXT_SIGNATURE = "text"
# Texts per interpreter call: the interpreter's buffers grow with the batch.
DEFAULT_BATCH_SIZE = 64


class LiteRTClassifier:
    """A LiteRT classifier export: texts in, class probabilities and labels out.

    Runs the token-id file (`classifier.tflite`) in `ai_edge_litert`'s
    interpreter on the ids of the tokenizer files beside it.

    Args:
        path: a version folder written by `export_classifier_litert`, or its
            base folder (the newest version is read).
        num_threads: the interpreter's CPU threads; None lets it choose.
        batch_size: texts per interpreter call.

    Raises:
        FileNotFoundError: no LiteRT export at `path`.
        ValueError: the export is not a classifier's, or not one this version reads.
        ImportError: `ai_edge_litert` is not installed.
    """

    def __init__(self, path, num_threads=None, batch_size=DEFAULT_BATCH_SIZE):
        self.version_dir = litert_version_dir(path)
        self.manifest = read_manifest(self.version_dir, "classifier")
        self.tokenizer = read_tokenizer_files(os.path.join(self.version_dir, TOKENIZER_DIR))
        with open(os.path.join(self.version_dir, CLASS_NAMES_FILE), encoding="utf-8") as names_file:
            self.class_names = [line.rstrip("\n") for line in names_file]
        self.sequence_length = self.manifest["sequence_length"]
        self.batch_size = _positive_integer(batch_size, "batch_size")
        self._run = _signature_runner(
            os.path.join(self.version_dir, CLASSIFIER_FILE),
            self.manifest["files"][CLASSIFIER_FILE]["signature"],
            num_threads,
        )

    def encode(self, texts):
        """The model's int32 input ids `[len(texts), sequence_length]`, as the SavedModel's
        tokenizer gives them."""
        return self.tokenizer.encode(
            texts,
            self.sequence_length,
            add_cls=self.manifest["add_cls"],
            add_sep=self.manifest["add_sep"],
        )

    def predict(self, texts):
        """Class probabilities and the most probable class's name, per text.

        Args:
            texts: a list of `str` (or UTF-8 `bytes`).

        Returns:
            `(probabilities, labels)`: float32 `[len(texts), num_classes]` and a
            list of class names.

        Raises:
            ValueError: `texts` is not a list of texts (one string, say).
        """
        token_ids = self.encode(texts)
        probabilities = np.zeros((len(token_ids), len(self.class_names)), np.float32)
        for start in range(0, len(token_ids), self.batch_size):
            batch = token_ids[start : start + self.batch_size]
            probabilities[start : start + len(batch)] = self._run(token_ids=batch)["probabilities"]
        labels = [self.class_names[index] for index in np.argmax(probabilities, axis=-1)]
        return probabilities, labels


class LiteRTTranslator:
    """A LiteRT translator export: texts in, greedy translations out.

    Runs `translator.tflite` (the encoder and the whole greedy decoding loop,
    one `WHILE` op) in `ai_edge_litert`'s interpreter on the source
    tokenizer's ids, and reads the target ids back as text in plain Python.

    Args, Raises: as `LiteRTClassifier`, for an `export_translator_litert` folder.
    """

    def __init__(self, path, num_threads=None, batch_size=DEFAULT_BATCH_SIZE):
        self.version_dir = litert_version_dir(path)
        self.manifest = read_manifest(self.version_dir, "translator")
        self.source_tokenizer = read_tokenizer_files(
            os.path.join(self.version_dir, SOURCE_TOKENIZER_DIR)
        )
        self.target_tokenizer = read_tokenizer_files(
            os.path.join(self.version_dir, TARGET_TOKENIZER_DIR)
        )
        self.sequence_length = self.manifest["sequence_length"]
        self.max_output_length = self.manifest["max_output_length"]
        self.batch_size = _positive_integer(batch_size, "batch_size")
        self._run = _signature_runner(
            os.path.join(self.version_dir, TRANSLATOR_FILE),
            self.manifest["files"][TRANSLATOR_FILE]["signature"],
            num_threads,
        )

    def greedy_ids(self, texts):
        """Greedy decoding's target ids, int32 `[len(texts), max_output_length]`:
        `[END]` included, 0 after it (as `keras_transformer.decoding.greedy_decode`)."""
        source_ids = self.source_tokenizer.encode(texts, self.sequence_length)
        target_ids = np.zeros((len(source_ids), self.max_output_length), np.int32)
        for start in range(0, len(source_ids), self.batch_size):
            batch = source_ids[start : start + self.batch_size]
            target_ids[start : start + len(batch)] = self._run(source_ids=batch)["token_ids"]
        return target_ids

    def translate(self, texts):
        """The greedy translation of each text (what the SavedModel's `greedy` signature
        answers), a list of `str`."""
        return [self.target_tokenizer.decode(row) for row in self.greedy_ids(texts)]


def litert_version_dir(path):
    """`path` itself if it holds a LiteRT manifest, else its newest version folder.

    Raises:
        FileNotFoundError: neither.
    """
    return latest_version_dir(path, MANIFEST_FILE, "LiteRT")


def read_manifest(version_dir, task):
    """The `litert.json` of `version_dir`, checked to be a `task` export of this format.

    Raises:
        ValueError: not JSON, another format or version, or another task's export.
    """
    path = os.path.join(version_dir, MANIFEST_FILE)
    with open(path, encoding="utf-8") as manifest_file:
        try:
            manifest = json.load(manifest_file)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not JSON: {error}.") from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{path} is not a LiteRT export's manifest (format {FORMAT!r}).")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path} has format_version {manifest.get('format_version')!r}; this version "
            f"reads {FORMAT_VERSION}."
        )
    if manifest.get("task") != task:
        raise ValueError(f"{version_dir} holds a {manifest.get('task')}'s export, not a {task}'s.")
    return manifest


def _signature_runner(model_path, signature, num_threads):
    """The `signature` of a `.tflite` file, as a callable taking and returning NumPy
    arrays by name."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as error:
        raise ImportError(
            "Running a LiteRT export needs the ai-edge-litert package (pip install ai-edge-litert)."
        ) from error
    interpreter = Interpreter(model_path=model_path, num_threads=num_threads)
    return interpreter.get_signature_runner(signature)


def _positive_integer(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    return int(value)
