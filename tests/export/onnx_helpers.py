"""Runs `keras_transformer.export.onnx_runtime` in a subprocess where TensorFlow and Keras
cannot be imported, as where only NumPy and ONNX Runtime are installed."""

import json
import subprocess
import sys
import textwrap

# None in sys.modules makes `import NAME` raise ImportError, as where it is not installed.
PRELUDE = """
import json, sys
for name in ("tensorflow", "tensorflow_text", "keras"):
    sys.modules[name] = None
from keras_transformer.export.onnx_runtime import OnnxClassifier, OnnxTranslator

arguments = json.loads(sys.argv[1])
"""


def run_without_tensorflow(body, arguments):
    """Runs `body` (code that sets `answer` from `arguments`) there; returns `answer`.

    Args:
        body: Python code; `arguments`, `OnnxClassifier` and `OnnxTranslator` are defined.
        arguments: JSON-able values for it.

    Returns:
        `answer`, through JSON.
    """
    script = PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(answer))\n"
    completed = subprocess.run(
        [sys.executable, "-c", script, json.dumps(arguments)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.splitlines()[-1])
