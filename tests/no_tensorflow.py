"""Runs Python code in a subprocess where TensorFlow cannot be imported, on JAX
(or another backend that needs no TensorFlow).

As on the lent GPU machines: `KERAS_BACKEND=jax`, and `import tensorflow`
(or `tensorflow_text`, `tensorflow_datasets`) raises ImportError. The code
fails the run if TensorFlow got into `sys.modules` anyway.

    result = run_without_tensorflow("import keras_transformer.training.runs")

The subprocess uses a JAX compilation cache, kept for every compile however
short: a model built again with the same shapes (a resumed run, a second model
to compare with) loads its compiled steps instead of compiling them again,
which is most of what a tiny run costs. The cache is the caller's
(`JAX_COMPILATION_CACHE_DIR`, as `make test` sets for the whole run) or, without
one, a folder of its own.
"""

import os
import subprocess
import sys
import tempfile
import textwrap

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HIDDEN_MODULES = ("tensorflow", "tensorflow_text", "tensorflow_datasets")

# None in sys.modules makes `import NAME` raise ImportError (ModuleNotFoundError),
# and `importlib.util.find_spec(NAME)` answer None, as where it is not installed.
PRELUDE = f"""
import sys
for _name in {HIDDEN_MODULES!r}:
    sys.modules[_name] = None
"""

POSTLUDE = f"""
_imported = [name for name in {HIDDEN_MODULES!r} if sys.modules.get(name) is not None]
assert not _imported, f"TensorFlow was imported: {{_imported}}"
import keras, os
assert keras.backend.backend() == os.environ["KERAS_BACKEND"], keras.backend.backend()
"""


def run_without_tensorflow(code, timeout=300, env=None, cwd=REPOSITORY, backend="jax"):
    """Runs `code` (a string of Python) without TensorFlow, on Keras' `backend`; returns the
    `CompletedProcess`.

    Raises AssertionError with the subprocess's output when it fails or
    imported TensorFlow; `subprocess.TimeoutExpired` after `timeout` seconds.
    """
    program = PRELUDE + textwrap.dedent(code) + POSTLUDE
    with tempfile.TemporaryDirectory(prefix="jax_compilation_cache_") as own_cache:
        environment = {
            "JAX_COMPILATION_CACHE_DIR": own_cache,
            **os.environ,
            "JAX_PLATFORMS": "cpu",
            "PYTHONPATH": REPOSITORY,
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
            "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
            **(env or {}),
            "KERAS_BACKEND": backend,
        }
        result = subprocess.run(
            [sys.executable, "-c", program],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=environment,
            cwd=cwd,
        )
    assert result.returncode == 0, (
        f"exit status {result.returncode} without TensorFlow, on {backend}\n--- stdout\n{result.stdout[-6000:]}"
        f"\n--- stderr\n{result.stderr[-6000:]}"
    )
    return result
