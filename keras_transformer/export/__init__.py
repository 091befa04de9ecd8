"""SavedModel builders: raw strings in, answers out, in versioned folders.

The builders need TensorFlow; they are imported on first use, so that what
reads an export's side files (`parts`, `versions`) imports without it.
"""

import importlib

# What `keras_transformer.training.run_export.export_run` (and `keras-transformer export
# --format`) writes: a TensorFlow SavedModel (raw strings in, the default), `.tflite` files for
# LiteRT (`litert`), an ONNX graph (`onnx`).
EXPORT_FORMATS = ("saved_model", "litert", "onnx")
# `--quantize`: Keras' int8 weights for a SavedModel, the converter's dynamic-range int8 for the
# others.
QUANTIZATION_MODES = ("int8",)

# Name -> the module that defines it, imported when the name is first read.
_MODULES = {
    "export_classifier": "classifier",
    "export_translator": "translator",
    "export_classifier_litert": "litert",
    "export_translator_litert": "litert",
    "LiteRTClassifier": "litert_runtime",
    "LiteRTTranslator": "litert_runtime",
    "existing_versions": "versions",
    "latest_version_dir": "versions",
    "write_new_version": "versions",
}


def __getattr__(name):
    if name in _MODULES:
        return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EXPORT_FORMATS",
    "LiteRTClassifier",
    "LiteRTTranslator",
    "QUANTIZATION_MODES",
    "existing_versions",
    "export_classifier",
    "export_classifier_litert",
    "export_translator",
    "export_translator_litert",
    "latest_version_dir",
    "write_new_version",
]
