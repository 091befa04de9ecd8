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


def latest_version_dir(path, required_file="saved_model.pb", what="SavedModel"):
    """`path` itself if it holds `required_file`, else its newest version folder.

    Args:
        path: a version folder or a model's base folder.
        required_file: the file an export of the format holds (a SavedModel's
            `saved_model.pb`, a LiteRT export's `litert.json`, an ONNX export's
            `model.onnx`).
        what: the format's name, for the error.

    Raises:
        FileNotFoundError: `path` holds neither `required_file` nor version
            folders, or its newest version is not a `what` (it holds no
            `required_file`: another format's export, say).
    """
    path = os.fspath(path)
    if os.path.isfile(os.path.join(path, required_file)):
        return path
    folders = version_folders(path)
    if not folders:
        raise FileNotFoundError(
            f"No exported model at {path}: expected a {what} folder or "
            f"version folders {path}/1, {path}/2, ... holding {required_file}."
        )
    newest = os.path.join(path, folders[max(folders)])
    if not os.path.isfile(os.path.join(newest, required_file)):
        raise FileNotFoundError(
            f"{newest}, the newest version of {path}, holds no {required_file}: it is not "
            f"a {what} export."
        )
    return newest


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
