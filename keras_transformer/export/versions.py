"""Versioned, all-or-nothing SavedModel folders: `BASE/1/`, `BASE/2/`, ...

TensorFlow Serving watches a base path and serves the highest integer folder,
so a half-written folder with a high number would be served. Every export is
written to a hidden temporary folder beside the versions and renamed into place
only once complete; a failure removes the temporary folder and leaves every
earlier version as it was.
"""

import os
import shutil
import tempfile


def existing_versions(base_dir):
    """Sorted integer versions present under `base_dir` (empty if none)."""
    return sorted(version_folders(base_dir))


def version_folders(base_dir):
    """`{version: folder name}`; `007` is version 7, as TensorFlow Serving reads it.

    Only ASCII digits name a version: `str.isdigit` alone accepts `²`, which
    `int` refuses, and `١`, which `int` reads as 1.
    """
    if not os.path.isdir(base_dir):
        return {}
    return {
        int(entry): entry
        for entry in sorted(os.listdir(base_dir), reverse=True)
        if entry.isascii()
        and entry.isdigit()
        and int(entry) > 0
        and os.path.isdir(os.path.join(base_dir, entry))
    }


def latest_version_dir(path):
    """`path` itself if it is a SavedModel folder, else its newest version folder."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    folders = version_folders(path)
    if not folders:
        raise FileNotFoundError(
            f"No exported model at {path}: expected a SavedModel folder or "
            f"version folders {path}/1, {path}/2, ... holding saved_model.pb."
        )
    return os.path.join(path, folders[max(folders)])


def write_new_version(base_dir, write_fn, required_file="saved_model.pb"):
    """Calls `write_fn(folder)` into a temporary folder, then publishes it.

    Args:
        base_dir: the model's base path, e.g. `exported_models/classifier`.
        write_fn: writes a complete export into the folder it is given.
        required_file: the file a complete export holds (a SavedModel's
            `saved_model.pb`, an ONNX export's `model.onnx`); without it nothing
            is published.

    Returns:
        The published version folder, `base_dir/N` with N one above the highest.
    """
    os.makedirs(base_dir, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".staging-", dir=base_dir)
    try:
        write_fn(staging)
        if not os.path.isfile(os.path.join(staging, required_file)):
            raise RuntimeError(f"The export wrote no {required_file} into {staging}.")
        # mkdtemp makes the folder private; a model server may run as another user.
        os.chmod(staging, 0o755)
        versions = existing_versions(base_dir)
        number = (versions[-1] if versions else 0) + 1
        while True:
            target = os.path.join(base_dir, str(number))
            try:
                # os.rename onto a non-empty folder fails, so two exporters
                # racing for one number cannot overwrite each other; a stray
                # file of that name is skipped the same way.
                os.rename(staging, target)
                return target
            except OSError:
                if not os.path.exists(target):
                    raise
                number += 1
    finally:
        if os.path.exists(staging):
            shutil.rmtree(staging, ignore_errors=True)
