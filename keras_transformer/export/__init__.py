"""SavedModel builders: raw strings in, answers out, in versioned folders.

The builders need TensorFlow; they are imported on first use, so that what
reads an export's side files (`parts`, `versions`) imports without it.
"""

import importlib

# Name -> the module that defines it, imported when the name is first read.
_MODULES = {
    "export_classifier": "classifier",
    "export_translator": "translator",
    "existing_versions": "versions",
    "latest_version_dir": "versions",
    "write_new_version": "versions",
}


def __getattr__(name):
    if name in _MODULES:
        return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "existing_versions",
    "export_classifier",
    "export_translator",
    "latest_version_dir",
    "write_new_version",
]
