"""Saves Keras model files again without their optimizer's variables.

A `.keras` file written during training holds the optimizer's slots beside
the weights (Adam: two more copies of every weight), which `apps.export` never
reads. `gpu_checklist.sh` strips them so the weights fit in what a device call
brings back.

    python benchmarks/strip_optimizer.py RUN/model.keras [RUN/checkpoints/best.keras ...]
    python benchmarks/strip_optimizer.py --float16 RUN/model.keras

With `--float16` the float32 weights are also stored as float16 (half the
size: a fine-tuned MiniLM-L6 is 87 MiB without its optimizer, too much for
one 16 MiB part of what comes back beside others). `keras.models.load_model`
assigns them to the model's float32 variables, so the file loads as before,
with every weight rounded to float16. A weight with values beyond float16's
range stays float32.

Paths that do not exist are skipped (a shell glob that matched nothing).
"""

import argparse
import io
import os
import shutil
import sys
import tempfile
import zipfile

import numpy as np

# Where a `.keras` archive keeps its weights (Keras' `saving_lib`).
WEIGHTS_MEMBER = "model.weights.h5"


def strip_optimizer(path, float16=False):
    """Loads `path` without compiling and saves it back in place.

    Args:
        path: a `.keras` file.
        float16: also store its float32 weights as float16 (`store_float16`).
    """
    import keras

    import keras_transformer.models  # noqa: F401  registers the model and layer classes

    before = os.path.getsize(path)
    model = keras.models.load_model(path, compile=False)
    model.save(path)
    if float16:
        store_float16(path)
    print(f"{path}: {before / 2**20:.1f} MiB -> {os.path.getsize(path) / 2**20:.1f} MiB")


def store_float16(path):
    """Rewrites the `.keras` file at `path` with its float32 weights as float16.

    The other weights (integers, and float32 ones with values float16 cannot
    hold) and every other member of the archive are kept as they are.

    Raises:
        ValueError: `path` is not a `.keras` archive with a weights file.
    """
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a Keras model file (.keras, a zip archive).")
    with zipfile.ZipFile(path) as archive:
        members = [(info, archive.read(info)) for info in archive.infolist()]
    if WEIGHTS_MEMBER not in [info.filename for info, _ in members]:
        raise ValueError(f"{path} has no {WEIGHTS_MEMBER}: not a Keras 3 model file.")
    # Written beside `path` and moved over it: a failure leaves the file as it was.
    handle, written = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".keras")
    os.close(handle)
    try:
        with zipfile.ZipFile(written, "w") as archive:
            for info, data in members:
                if info.filename == WEIGHTS_MEMBER:
                    data = _float16_weights(data)
                archive.writestr(info, data)
        shutil.copymode(path, written)  # not mkstemp's owner-only mode
        shutil.move(written, path)
    finally:
        if os.path.exists(written):
            os.remove(written)


def float16_or_none(value):
    """`value` (a float array) as float16, or None where float16 cannot hold its finite
    values (they would become infinities)."""
    value = np.asarray(value)
    with np.errstate(over="ignore"):  # the overflow is what the check below looks for
        half = value.astype(np.float16)
    return half if np.all(np.isfinite(half) | ~np.isfinite(value)) else None


def _float16_weights(data):
    """The bytes of an HDF5 weights file (`data`) with its float32 datasets as float16."""
    import h5py

    copied = io.BytesIO()
    with h5py.File(io.BytesIO(data), "r") as source, h5py.File(copied, "w") as target:
        _copy_group(source, target)
    return copied.getvalue()


def _copy_group(source, target):
    target.attrs.update(source.attrs)
    for name, item in source.items():
        if hasattr(item, "keys"):  # a group
            _copy_group(item, target.create_group(name))
            continue
        # Keras keeps a bfloat16 weight as a uint16 dataset: not float32, copied as it is.
        half = float16_or_none(item[()]) if item.dtype == np.float32 else None
        if half is None:
            source.copy(item, target, name=name)
            continue
        target.create_dataset(name, data=half)
        target[name].attrs.update(item.attrs)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help=".keras files")
    parser.add_argument(
        "--float16", action="store_true", help="also store the float32 weights as float16"
    )
    args = parser.parse_args(argv)
    for path in args.paths:
        if os.path.isfile(path):
            strip_optimizer(path, float16=args.float16)
    return 0


if __name__ == "__main__":
    sys.exit(main())
