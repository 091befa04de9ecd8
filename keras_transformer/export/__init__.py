"""SavedModel builders: raw strings in, answers out, in versioned folders."""

from keras_transformer.export.classifier import export_classifier
from keras_transformer.export.translator import export_translator
from keras_transformer.export.versions import (
    existing_versions,
    latest_version_dir,
    write_new_version,
)

__all__ = [
    "existing_versions",
    "export_classifier",
    "export_translator",
    "latest_version_dir",
    "write_new_version",
]
