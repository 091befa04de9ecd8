"""The command-line apps: `keras-transformer COMMAND` (keras_transformer.cli.main),
one module a command, each with `build_parser()` and `main(argv)`. A clone's
`python -m apps.X` runs the same modules.

Importing this package quiets TensorFlow's C++ start-up
chatter, before any app imports TensorFlow, unless the user set
`TF_CPP_MIN_LOG_LEVEL` (then TensorFlow logs as they asked).

Level 3 rather than 2: on a machine without a GPU, TensorFlow's CUDA build
logs a "failed call to cuInit" *error* at its first op, which is chatter there.
Real failures still reach the user as Python exceptions.

The level alone is not enough: the oneDNN and CUDA-stub lines are written
while TensorFlow's shared libraries load, before it reads the level
("All log messages before absl::InitializeLog() is called are written to
STDERR"). So the first `import tensorflow` runs with the process's stderr
caught; afterwards the lines in absl's log format below ERROR are dropped and
everything else is written back, in order.
"""

import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile

QUIET_LOG_LEVEL = "3"

# absl's prefix: severity letter, MMDD, time, thread id, file:line].
_ABSL_INFO_OR_WARNING = re.compile(rb"^[IW]\d{4} [\d:.]+ +\d+ [^ \]]+:\d+\] ")
_ABSL_BEFORE_INIT = (
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
)
# Printed as a second line of cpu_feature_guard's INFO message.
_CPU_FEATURES_CONTINUATION = b"To enable the following instructions:"


def is_chatter(line):
    """Whether a line of stderr is TensorFlow's start-up logging below ERROR."""
    return (
        bool(_ABSL_INFO_OR_WARNING.match(line))
        or line.startswith(_ABSL_BEFORE_INIT)
        or line.startswith(_CPU_FEATURES_CONTINUATION)
    )


class _QuietLoader(importlib.abc.Loader):
    """Runs a module's import with file descriptor 2 caught in a temporary file."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):
        # Everything else (resource readers, is_package, ...) is the real loader's.
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        sys.stderr.flush()
        saved = os.dup(2)
        with tempfile.TemporaryFile() as caught:
            os.dup2(caught.fileno(), 2)
            try:
                self._loader.exec_module(module)
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                caught.seek(0)
                kept = memoryview(b"".join(line for line in caught if not is_chatter(line)))
                while kept:
                    kept = kept[os.write(2, kept) :]


class _QuietTensorFlowImport(importlib.abc.MetaPathFinder):
    """Wraps the loader of the first `import tensorflow`, then steps aside."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


if "TF_CPP_MIN_LOG_LEVEL" not in os.environ and "tensorflow" not in sys.modules:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = QUIET_LOG_LEVEL
    sys.meta_path.insert(0, _QuietTensorFlowImport())
