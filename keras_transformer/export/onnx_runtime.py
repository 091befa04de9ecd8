"""The ONNX exports' answers with NumPy and ONNX Runtime alone, no TensorFlow.

`keras_transformer.export.onnx` writes the exports: a `model.onnx` that takes token
ids, with the tokenizer's files beside it. Here the texts become those ids with
`PythonWordPieceTokenizer` (the ids of the SavedModels' tensorflow-text tokenizer),
the model runs in ONNX Runtime, and its answer becomes labels or text again.

Example:

>>> classifier = OnnxClassifier("exported_models/classifier-onnx")
>>> probabilities, labels = classifier.predict(["Stocks fell as markets opened."])
>>> translator = OnnxTranslator("exported_models/translator-onnx")
>>> translator.translate(["el perro azul"])
['the blue dog']
"""

import json
import os

import numpy as np

from keras_transformer.export.versions import latest_version_dir
from keras_transformer.text.padding import trim_shared_padding_array
from keras_transformer.text.python_tokenizer import text_list

# The names `keras_transformer.export.onnx` writes (repeated: that module needs TensorFlow).
ONNX_MODEL_FILE = "model.onnx"
ONNX_CONFIG_FILE = "onnx.json"


def onnx_version_dir(path):
    """`path` itself if it holds an ONNX export, else its newest version folder.

    Raises:
        FileNotFoundError: neither.
    """
    return latest_version_dir(path, ONNX_MODEL_FILE, "ONNX")


class _OnnxExport:
    """An ONNX export's folder, configuration and ONNX Runtime session."""

    task = None

    def __init__(self, path, providers=None):
        import onnxruntime

        self.version_dir = onnx_version_dir(path)
        with open(os.path.join(self.version_dir, ONNX_CONFIG_FILE), encoding="utf-8") as file:
            self.config = json.load(file)
        if self.config.get("task") != self.task:
            raise ValueError(
                f"{self.version_dir} holds a {self.config.get('task')}'s ONNX export, "
                f"not a {self.task}'s."
            )
        self.session = onnxruntime.InferenceSession(
            os.path.join(self.version_dir, ONNX_MODEL_FILE),
            providers=providers or ["CPUExecutionProvider"],
        )

    def _tokenizer(self, folder_name):
        from keras_transformer.text.python_tokenizer import read_tokenizer_files

        return read_tokenizer_files(os.path.join(self.version_dir, folder_name))


class OnnxClassifier(_OnnxExport):
    """The classifier's ONNX export: texts in, probabilities and labels out.

    Args:
        path: a version folder written by `export_classifier_onnx`, or its base folder
            (the newest version is read).
        providers: ONNX Runtime execution providers; defaults to the CPU's.
    """

    task = "classifier"

    def __init__(self, path, providers=None):
        super().__init__(path, providers)
        self.class_names = list(self.config["class_names"])
        self.tokenizer = self._tokenizer(self.config["tokenizer"])

    def predict(self, texts):
        """Probabilities and the most probable class name of every text.

        Args:
            texts: a list of strings (a single string is a batch of one).

        Returns:
            A tuple `(probabilities, labels)`: float32 `[len(texts), num_classes]` and a
            list of `len(texts)` class names, as the SavedModel's `serving_default`.
        """
        texts = text_list(texts)
        if not texts:
            return np.zeros([0, len(self.class_names)], np.float32), []
        token_ids = self.tokenizer.encode(
            texts,
            self.config["input_length"],
            add_cls=self.config["add_cls"],
            add_sep=self.config["add_sep"],
        )
        (probabilities,) = self.session.run(
            ["probabilities"],
            {"token_ids": np.ascontiguousarray(trim_shared_padding_array(token_ids))},
        )
        labels = [self.class_names[index] for index in np.argmax(probabilities, axis=-1)]
        return probabilities, labels


class OnnxTranslator(_OnnxExport):
    """The translator's ONNX export: texts in, greedy translations out.

    Args:
        path: a version folder written by `export_translator_onnx`, or its base folder.
        providers: ONNX Runtime execution providers; defaults to the CPU's.
    """

    task = "translator"

    def __init__(self, path, providers=None):
        super().__init__(path, providers)
        self.source_tokenizer = self._tokenizer(self.config["source_tokenizer"])
        self.target_tokenizer = self._tokenizer(self.config["target_tokenizer"])

    def translate(self, texts):
        """The greedy translation of every text, as the SavedModel's `greedy` signature.

        Args:
            texts: a list of strings (a single string is a batch of one).

        Returns:
            A list of `len(texts)` strings.
        """
        return [self.target_tokenizer.decode(row) for row in self.translate_ids(texts)]

    def translate_ids(self, texts):
        """The greedy translations' token ids: int32 `[len(texts), max_output_length]`,
        `[END]` included, 0 after it."""
        texts = text_list(texts)
        if not texts:
            return np.zeros([0, self.config["max_output_length"]], np.int32)
        source_ids = self.source_tokenizer.encode(texts, self.config["sequence_length"])
        (token_ids,) = self.session.run(
            ["token_ids"],
            {"source_ids": np.ascontiguousarray(trim_shared_padding_array(source_ids))},
        )
        return token_ids
