"""keras_transformer: Transformer layers for Keras 3, and applications built from them.

`import keras_transformer` imports neither Keras nor TensorFlow: `layers` and
`models` are imported on first use (`keras_transformer.layers.X`). The
TensorFlow-only subpackages (`text`, `data`, `training`, `export`,
`serving`) are imported by name, `import keras_transformer.text`.
"""

import importlib
import importlib.util

# The one version string: pyproject.toml reads it from here.
__version__ = "0.1.0"

# Subpackages that need only the core dependencies (keras, numpy).
_LAZY_SUBPACKAGES = ("layers", "models")


def __getattr__(name):
    if name in _LAZY_SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    message = f"module {__name__!r} has no attribute {name!r}"
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        message += f"; it is a subpackage imported by name: `import {__name__}.{name}`"
    raise AttributeError(message)


def __dir__():
    return sorted(set(globals()) | set(_LAZY_SUBPACKAGES))
