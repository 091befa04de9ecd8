"""Saves Keras model files again without their optimizer's variables.

A `.keras` file written during training holds the optimizer's slots beside
the weights (Adam: two more copies of every weight), which `apps.export` never
reads. `gpu_checklist.sh` strips them so the weights fit in what a device call
brings back.

    python benchmarks/strip_optimizer.py RUN/model.keras [RUN/checkpoints/best.keras ...]

Paths that do not exist are skipped (a shell glob that matched nothing).
"""

import os
import sys


def strip_optimizer(path):
    """Loads `path` without compiling and saves it back in place."""
    import keras

    import keras_transformer.models  # noqa: F401  registers the model and layer classes

    before = os.path.getsize(path)
    model = keras.models.load_model(path, compile=False)
    model.save(path)
    print(f"{path}: {before / 2**20:.1f} MiB -> {os.path.getsize(path) / 2**20:.1f} MiB")


def main(paths):
    for path in paths:
        if os.path.isfile(path):
            strip_optimizer(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
