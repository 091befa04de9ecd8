"""Versioned export folders: numbering, all-or-nothing publishing, finding the latest."""

import os
import stat

import pytest

from keras_transformer.export import versions
from keras_transformer.export.versions import (
    existing_versions,
    latest_version_dir,
    write_new_version,
)
from tests.classifier_fixtures import snapshot


def write_saved_model(folder, content=b"model"):
    """A stand-in for an export: a saved_model.pb and a variables folder."""
    with open(os.path.join(folder, "saved_model.pb"), "wb") as model_file:
        model_file.write(content)
    os.makedirs(os.path.join(folder, "variables"))
    with open(os.path.join(folder, "variables", "variables.index"), "wb") as index_file:
        index_file.write(content)


def writer(content):
    return lambda folder: write_saved_model(folder, content)


def read(folder):
    with open(os.path.join(folder, "saved_model.pb"), "rb") as model_file:
        return model_file.read()


# --- existing_versions ---------------------------------------------------------


def test_existing_versions_counts_positive_integer_folders_only(tmp_path):
    for name in ["3", "1", "12", "0", "abc", "2a", "-4", ".staging-xyz", ".5", "1.5"]:
        (tmp_path / name).mkdir()
    (tmp_path / "7").write_text("a file, not a version")
    (tmp_path / "README").write_text("notes")
    assert existing_versions(str(tmp_path)) == [1, 3, 12]


def test_existing_versions_of_a_missing_folder_is_empty(tmp_path):
    assert existing_versions(str(tmp_path / "nowhere")) == []
    assert existing_versions(str(tmp_path)) == []


# --- write_new_version ---------------------------------------------------------


def test_versions_are_numbered_one_two_three(tmp_path):
    base = str(tmp_path / "classifier")  # created on first use
    published = [write_new_version(base, writer(f"v{n}".encode())) for n in (1, 2, 3)]
    assert published == [os.path.join(base, str(n)) for n in (1, 2, 3)]
    assert [read(folder) for folder in published] == [b"v1", b"v2", b"v3"]
    assert sorted(os.listdir(base)) == ["1", "2", "3"]  # no staging folder left behind


def test_numbering_continues_after_the_highest_version(tmp_path):
    (tmp_path / "9").mkdir()
    (tmp_path / "4").mkdir()
    assert write_new_version(str(tmp_path), writer(b"new")) == os.path.join(str(tmp_path), "10")


def test_write_fn_gets_an_empty_hidden_folder_beside_the_versions(tmp_path):
    seen = {}

    def write(folder):
        seen["folder"], seen["contents"] = folder, os.listdir(folder)
        write_saved_model(folder)

    write_new_version(str(tmp_path), write)
    assert os.path.dirname(seen["folder"]) == str(tmp_path)
    assert os.path.basename(seen["folder"]).startswith(".")
    assert seen["contents"] == []
    assert not os.path.exists(seen["folder"])


def test_failing_write_fn_leaves_versions_untouched(tmp_path):
    base = str(tmp_path)
    write_new_version(base, writer(b"good"))
    before = snapshot(base)

    class ExportFailed(Exception):
        pass

    def half_write(folder):
        write_saved_model(folder, b"half")
        raise ExportFailed("disk full")

    with pytest.raises(ExportFailed, match="disk full"):
        write_new_version(base, half_write)
    assert os.listdir(base) == ["1"]  # no "2", no staging folder
    assert snapshot(base) == before
    assert existing_versions(base) == [1]


def test_write_fn_that_writes_nothing_publishes_nothing(tmp_path):
    base = str(tmp_path)
    write_new_version(base, writer(b"good"))

    def write_variables_only(folder):
        os.makedirs(os.path.join(folder, "variables"))

    with pytest.raises(RuntimeError, match="wrote no saved_model.pb"):
        write_new_version(base, write_variables_only)
    assert os.listdir(base) == ["1"]
    assert latest_version_dir(base) == os.path.join(base, "1")


def test_a_concurrent_export_is_never_overwritten(tmp_path):
    # Another exporter publishes while ours is still writing: ours must take the
    # next number, not replace theirs.
    base = str(tmp_path)
    write_new_version(base, writer(b"v1"))

    def slow_write(folder):
        write_new_version(base, writer(b"other"))  # publishes 2 meanwhile
        write_saved_model(folder, b"ours")

    published = write_new_version(base, slow_write)
    assert published == os.path.join(base, "3")
    assert [read(os.path.join(base, n)) for n in ("1", "2", "3")] == [b"v1", b"other", b"ours"]
    assert sorted(os.listdir(base)) == ["1", "2", "3"]


def test_published_folder_is_readable_by_others(tmp_path):
    folder = write_new_version(str(tmp_path), writer(b"model"))
    mode = stat.S_IMODE(os.stat(folder).st_mode)
    assert mode & 0o055 == 0o055, oct(mode)


def test_a_file_named_like_the_next_version_does_not_hang(tmp_path, monkeypatch):
    base = str(tmp_path)
    (tmp_path / "1").write_text("stray shell redirect")
    rename, calls = os.rename, []

    class RetriesForever(Exception):
        pass

    def counting_rename(source, target):
        calls.append(target)
        if len(calls) > 20:
            raise RetriesForever(f"{len(calls)} renames onto {target}")
        return rename(source, target)

    monkeypatch.setattr(versions.os, "rename", counting_rename)
    try:
        published = write_new_version(base, writer(b"model"))
    except RetriesForever:
        pytest.fail("write_new_version retried the same taken number forever")
    except OSError:
        published = None  # a clear error is acceptable
    assert (tmp_path / "1").read_text() == "stray shell redirect"
    if published is not None:
        assert read(published) == b"model"
    assert not [name for name in os.listdir(base) if name.startswith(".")]


# --- latest_version_dir --------------------------------------------------------


def test_latest_version_is_numeric_not_lexicographic(tmp_path):
    for name in ("2", "9", "10"):
        (tmp_path / name).mkdir()
        write_saved_model(str(tmp_path / name))
    assert latest_version_dir(str(tmp_path)) == os.path.join(str(tmp_path), "10")


def test_latest_version_of_a_version_folder_is_itself(tmp_path):
    folder = write_new_version(str(tmp_path), writer(b"model"))
    assert latest_version_dir(folder) == folder


@pytest.mark.parametrize("setup", ["empty", "missing", "only_junk"])
def test_latest_version_of_nothing_raises_with_the_path(tmp_path, setup):
    base = tmp_path / "classifier"
    if setup != "missing":
        base.mkdir()
    if setup == "only_junk":
        (base / "0").mkdir()
        (base / ".staging-abc").mkdir()
        (base / "notes.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match=str(base)):
        latest_version_dir(str(base))


def test_latest_version_with_leading_zeros_is_a_real_folder(tmp_path):
    (tmp_path / "007").mkdir()
    write_saved_model(str(tmp_path / "007"))
    latest = latest_version_dir(str(tmp_path))
    assert os.path.isfile(os.path.join(latest, "saved_model.pb")), latest


def test_latest_version_of_another_format_is_named(tmp_path):
    """A base folder whose newest version is a SavedModel is not a LiteRT export, and the
    error says which folder lacks which file, rather than reading an older version."""
    for name in ("1", "2"):
        (tmp_path / name).mkdir()
    (tmp_path / "1" / "litert.json").write_text("{}")
    write_saved_model(str(tmp_path / "2"))
    assert latest_version_dir(str(tmp_path)) == os.path.join(str(tmp_path), "2")
    with pytest.raises(FileNotFoundError, match=r"2, the newest version .* holds no litert\.json"):
        latest_version_dir(str(tmp_path), "litert.json", "LiteRT")
