"""Token folders (`keras_transformer.data.tokens`): round trip, every bad folder
refused with a `DataError` naming the file and the fault, writes that never
leave half a folder, and reading with no TensorFlow importable."""

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from keras_transformer.data import DataError
from keras_transformer.data import tokens as token_module
from keras_transformer.data.tokens import (
    ClassificationTokens,
    TokenizedClassificationData,
    TokenizedTranslationData,
    TokenSettingConflict,
    TranslationTokens,
    read_token_folder,
    save_tokenized,
    settings_from_tokens,
    token_folder_writer,
)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VOCABULARY_SIZE = 10
LENGTH = 4


def write_vocabulary(path, size=VOCABULARY_SIZE):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as vocabulary_file:
        vocabulary_file.writelines(f"token{index}\n" for index in range(size))
    return str(path)


def classification_tokens(tmp_path, seed=0):
    rng = np.random.default_rng(seed)

    def split(count):
        return ClassificationTokens(
            rng.integers(0, VOCABULARY_SIZE, (count, LENGTH)).astype(np.int32),
            rng.integers(0, 3, count).astype(np.int32),
        )

    return TokenizedClassificationData(
        name="csv:texts.csv",
        source_name="csv:texts.csv",
        settings={
            "vocabulary_size": VOCABULARY_SIZE,
            "sequence_length": LENGTH,
            "max_length": 512,
            "pooling": "cls",
            "ngram_length": None,
        },
        chosen_from_data={"sequence_length": {"value": LENGTH, "reason": "a percentile"}},
        vocabulary_files={
            "vocabulary.txt": write_vocabulary(tmp_path / "built" / "vocabulary.txt")
        },
        class_names=["business", "culture", "sport"],
        train=split(12),
        validation=split(3),
        test=split(3),
    )


def translation_tokens(tmp_path, seed=0):
    rng = np.random.default_rng(seed)

    def split(count, texts):
        pair_texts = (
            {
                "sources": [f"uno {index} ñ" for index in range(count)],
                "targets": [f"One {index}." for index in range(count)],
            }
            if texts
            else {}
        )
        return TranslationTokens(
            rng.integers(0, VOCABULARY_SIZE, (count, LENGTH)).astype(np.int32),
            rng.integers(0, VOCABULARY_SIZE - 2, (count, LENGTH + 1)).astype(np.int32),
            **pair_texts,
        )

    built = tmp_path / "built"
    return TokenizedTranslationData(
        name="tsv:pairs.tsv",
        source_name="tsv:pairs.tsv",
        settings={
            "vocabulary_size": VOCABULARY_SIZE,
            "target_vocabulary_size": VOCABULARY_SIZE - 2,
            "sequence_length": LENGTH,
            "max_length": 64,
            "shared_vocabulary": False,
        },
        chosen_from_data={},
        vocabulary_files={
            "source_vocabulary.txt": write_vocabulary(built / "source_vocabulary.txt"),
            "target_vocabulary.txt": write_vocabulary(
                built / "target_vocabulary.txt", VOCABULARY_SIZE - 2
            ),
        },
        source_language="es",
        target_language="en",
        train_target_words=36,
        train=split(12, texts=False),
        validation=split(3, texts=True),
        test=split(3, texts=True),
    )


def write_folder(tokenized, out):
    with token_folder_writer(out) as folder:
        save_tokenized(tokenized, folder)
    return str(out)


@pytest.fixture
def classifier_folder(tmp_path):
    return write_folder(classification_tokens(tmp_path), tmp_path / "tokens")


# --- round trip ----------------------------------------------------------------------


def test_a_classifier_folder_for_a_bag_that_reads_further_holds_its_longer_ids(tmp_path):
    written = classification_tokens(tmp_path)
    written.settings["ngram_length"] = 2 * LENGTH
    out = write_folder(written, tmp_path / "tokens")
    with pytest.raises(
        DataError,
        match=f"token_ids has {LENGTH} columns, but tokens.json's settings make {2 * LENGTH}",
    ):
        read_token_folder(out, "classifier")
    longer = dataclasses.replace(
        written,
        **{
            split: dataclasses.replace(
                getattr(written, split),
                token_ids=np.pad(getattr(written, split).token_ids, ((0, 0), (0, LENGTH))),
            )
            for split in ("train", "validation", "test")
        },
    )
    out = write_folder(longer, tmp_path / "longer")
    assert read_token_folder(out, "classifier").settings["ngram_length"] == 2 * LENGTH


def test_a_classifier_folder_needs_a_valid_ngram_length(tmp_path):
    out = write_folder(classification_tokens(tmp_path), tmp_path / "tokens")
    path = os.path.join(out, "tokens.json")
    with open(path, encoding="utf-8") as tokens_file:
        description = json.load(tokens_file)
    for ngram_length, message in [
        (..., "its settings must name exactly vocabulary_size, .*ngram_length"),
        ("long", "ngram_length must be a positive integer or null, got 'long'"),
    ]:
        if ngram_length is ...:
            del description["settings"]["ngram_length"]
        else:
            description["settings"]["ngram_length"] = ngram_length
        with open(path, "w", encoding="utf-8") as tokens_file:
            json.dump(description, tokens_file)
        with pytest.raises(DataError, match=message):
            read_token_folder(out, "classifier")


def test_classifier_round_trip(tmp_path):
    written = classification_tokens(tmp_path)
    out = write_folder(written, tmp_path / "tokens")
    read = read_token_folder(out, "classifier")
    assert read.name == f"tokens:{out}" and read.source_name == "csv:texts.csv"
    assert read.settings == written.settings and read.chosen_from_data == written.chosen_from_data
    assert read.class_names == written.class_names
    for split in ("train", "validation", "test"):
        np.testing.assert_array_equal(
            getattr(read, split).token_ids, getattr(written, split).token_ids
        )
        np.testing.assert_array_equal(getattr(read, split).labels, getattr(written, split).labels)
        assert getattr(read, split).token_ids.dtype == np.int32
    with (
        open(read.vocabulary_files["vocabulary.txt"]) as copied,
        open(written.vocabulary_files["vocabulary.txt"]) as original,
    ):
        assert copied.read() == original.read()


def test_translator_round_trip_keeps_the_reference_texts(tmp_path):
    written = translation_tokens(tmp_path)
    read = read_token_folder(
        write_folder(written, tmp_path / "tokens"), "translator", name="tokens:here"
    )
    assert read.name == "tokens:here"
    assert (read.source_language, read.target_language, read.train_target_words) == ("es", "en", 36)
    assert sorted(read.vocabulary_files) == ["source_vocabulary.txt", "target_vocabulary.txt"]
    for split in ("train", "validation", "test"):
        np.testing.assert_array_equal(
            getattr(read, split).source_ids, getattr(written, split).source_ids
        )
        np.testing.assert_array_equal(
            getattr(read, split).target_ids, getattr(written, split).target_ids
        )
    assert read.validation.sources == written.validation.sources  # non-ASCII text included
    assert read.test.targets == written.test.targets
    assert read.train.sources is None


def test_reading_needs_no_tensorflow(classifier_folder):
    # The folder is for machines without TensorFlow: reading must not import it.
    script = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('tensorflow', 'tensorflow_text'):\n"
        "            raise ImportError('no ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from keras_transformer.data.tokens import read_token_folder\n"
        f"data = read_token_folder({classifier_folder!r}, 'classifier')\n"
        "print(len(data.train), data.train.token_ids.shape)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["12", "(12,", f"{LENGTH})"]


# --- bad folders -------------------------------------------------------------------


def rewrite_json(folder, change):
    path = os.path.join(folder, "tokens.json")
    with open(path) as tokens_file:
        description = json.load(tokens_file)
    change(description)
    with open(path, "w") as tokens_file:
        json.dump(description, tokens_file)


def rewrite_split(folder, split, change):
    path = os.path.join(folder, f"{split}.npz")
    with np.load(path) as archive:
        arrays = {key: archive[key] for key in archive.files}
    change(arrays)
    np.savez(path, **arrays)


def write_garbage(path):
    with open(path, "wb") as garbage:
        garbage.write(b"not a zip archive")


CLASSIFIER_FAULTS = {
    "no tokens.json": (
        lambda f: os.remove(os.path.join(f, "tokens.json")),
        "tokens",
        "is not a token folder",
    ),
    "not JSON": (
        lambda f: write_garbage(os.path.join(f, "tokens.json")),
        "tokens.json",
        "cannot be read as JSON",
    ),
    "other format": (
        lambda f: rewrite_json(f, lambda d: d.update(format="something")),
        "tokens.json",
        "not a token folder description",
    ),
    "newer version": (
        lambda f: rewrite_json(f, lambda d: d.update(version=2)),
        "tokens.json",
        "format version 2",
    ),
    "settings missing one": (
        lambda f: rewrite_json(f, lambda d: d["settings"].pop("pooling")),
        "tokens.json",
        "settings must name exactly",
    ),
    "one class": (
        lambda f: rewrite_json(f, lambda d: d.update(class_names=["a"])),
        "tokens.json",
        "at least two classes",
    ),
    "split missing": (
        lambda f: os.remove(os.path.join(f, "validation.npz")),
        "validation.npz",
        "is missing",
    ),
    "split not npz": (
        lambda f: write_garbage(os.path.join(f, "test.npz")),
        "test.npz",
        "cannot be read as NumPy arrays",
    ),
    "array missing": (
        lambda f: rewrite_split(f, "train", lambda a: a.pop("labels")),
        "train.npz",
        "'labels' is missing",
    ),
    "wrong dtype": (
        lambda f: rewrite_split(
            f, "train", lambda a: a.update(token_ids=a["token_ids"].astype(np.int64))
        ),
        "train.npz",
        "token_ids must be int32, got int64",
    ),
    "wrong rank": (
        lambda f: rewrite_split(f, "test", lambda a: a.update(labels=a["labels"][:, None])),
        "test.npz",
        "labels must have 1 dimension",
    ),
    "wrong width": (
        lambda f: rewrite_split(f, "train", lambda a: a.update(token_ids=a["token_ids"][:, :-1])),
        "train.npz",
        f"token_ids has {LENGTH - 1} columns",
    ),
    "lengths disagree": (
        lambda f: rewrite_split(f, "validation", lambda a: a.update(labels=a["labels"][:-1])),
        "validation.npz",
        "disagree on the number of examples",
    ),
    "id past the vocabulary": (
        lambda f: rewrite_split(
            f, "test", lambda a: a["token_ids"].__setitem__((0, 0), VOCABULARY_SIZE)
        ),
        "test.npz",
        f"ids outside [0, {VOCABULARY_SIZE})",
    ),
    "negative id": (
        lambda f: rewrite_split(f, "train", lambda a: a["token_ids"].__setitem__((1, 1), -1)),
        "train.npz",
        "ids outside",
    ),
    "label past the classes": (
        lambda f: rewrite_split(f, "train", lambda a: a["labels"].__setitem__(0, 3)),
        "train.npz",
        "labels must index the 3 class_names",
    ),
    "pickled objects": (
        lambda f: np.savez(
            os.path.join(f, "train.npz"),
            token_ids=np.array([{}], dtype=object),
            labels=np.zeros(1, np.int32),
        ),
        "train.npz",
        "cannot be read as NumPy arrays",
    ),
    "vocabulary missing": (
        lambda f: os.remove(os.path.join(f, "vocabulary.txt")),
        "vocabulary.txt",
        "is missing",
    ),
}


TRANSLATOR_FAULTS = {
    "target one short": (
        lambda f: rewrite_split(f, "train", lambda a: a.update(target_ids=a["target_ids"][:, :-1])),
        "train.npz",
        f"target_ids has {LENGTH} columns",
    ),
    "references missing": (
        lambda f: rewrite_split(f, "validation", lambda a: a.pop("targets")),
        "validation.npz",
        "'targets' is missing",
    ),
    "references not text": (
        lambda f: rewrite_split(f, "test", lambda a: a.update(sources=np.arange(3))),
        "test.npz",
        "sources must be unicode text",
    ),
    "target id past its vocabulary": (
        lambda f: rewrite_split(
            f, "validation", lambda a: a["target_ids"].__setitem__((0, 0), VOCABULARY_SIZE - 2)
        ),
        "validation.npz",
        f"outside [0, {VOCABULARY_SIZE - 2}), the size of target_vocabulary.txt",
    ),
    "languages missing": (
        lambda f: rewrite_json(f, lambda d: d.pop("source_language")),
        "tokens.json",
        "'source_language' is missing",
    ),
    "target vocabulary missing": (
        lambda f: os.remove(os.path.join(f, "target_vocabulary.txt")),
        "target_vocabulary.txt",
        "is missing",
    ),
}


FAULTS = {
    **{("classifier", name): fault for name, fault in CLASSIFIER_FAULTS.items()},
    **{("translator", name): fault for name, fault in TRANSLATOR_FAULTS.items()},
}


@pytest.mark.parametrize("task, fault", FAULTS, ids=[f"{task}: {fault}" for task, fault in FAULTS])
def test_a_bad_folder_names_the_file_and_the_fault(tmp_path, task, fault):
    make_tokens = classification_tokens if task == "classifier" else translation_tokens
    folder = write_folder(make_tokens(tmp_path), tmp_path / "tokens")
    break_folder, file_name, what = FAULTS[task, fault]
    break_folder(folder)
    with pytest.raises(DataError) as raised:
        read_token_folder(folder, task)
    message = str(raised.value)
    # The file at fault, or the folder when the fault is that it is no token folder.
    assert os.path.join(folder, file_name) in message or (
        file_name == "tokens" and folder in message
    ), message
    assert what in message


def test_a_folder_of_the_other_task_is_refused(tmp_path):
    classifier_folder = write_folder(classification_tokens(tmp_path), tmp_path / "classifier")
    translator_folder = write_folder(translation_tokens(tmp_path), tmp_path / "translator")
    with pytest.raises(DataError, match="holds tokens for the classifier, not the translator"):
        read_token_folder(classifier_folder, "translator")
    with pytest.raises(DataError, match="holds tokens for the translator, not the classifier"):
        read_token_folder(translator_folder, "classifier")


def test_a_missing_folder_or_a_file_is_refused(tmp_path):
    with pytest.raises(DataError, match="No such token folder"):
        read_token_folder(tmp_path / "absent", "classifier")
    (tmp_path / "file").write_text("x")
    with pytest.raises(DataError, match="is not a folder"):
        read_token_folder(tmp_path / "file", "classifier")


# --- writing never half-writes --------------------------------------------------------


def break_the_second_split(monkeypatch):
    real_savez = np.savez
    calls = []

    def savez(path, **arrays):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("disk full")
        real_savez(path, **arrays)

    monkeypatch.setattr(token_module.np, "savez", savez)
    return calls


def test_a_write_broken_midway_leaves_no_folder(tmp_path, monkeypatch):
    tokenized = classification_tokens(tmp_path)
    calls = break_the_second_split(monkeypatch)
    with pytest.raises(OSError, match="disk full"):
        write_folder(tokenized, tmp_path / "tokens")
    assert len(calls) == 2  # the train split was written, then the write broke
    assert sorted(os.listdir(tmp_path)) == ["built"]  # no folder, no temporary left behind


def test_a_write_broken_midway_keeps_the_earlier_token_folder(tmp_path, monkeypatch):
    out = write_folder(classification_tokens(tmp_path, seed=0), tmp_path / "tokens")
    before = read_token_folder(out, "classifier").train.token_ids
    break_the_second_split(monkeypatch)
    with pytest.raises(OSError):
        write_folder(classification_tokens(tmp_path, seed=1), tmp_path / "tokens")
    np.testing.assert_array_equal(read_token_folder(out, "classifier").train.token_ids, before)
    assert sorted(os.listdir(tmp_path)) == ["built", "tokens"]


def test_a_new_write_replaces_an_earlier_token_folder(tmp_path):
    write_folder(classification_tokens(tmp_path, seed=0), tmp_path / "tokens")
    newer = classification_tokens(tmp_path, seed=1)
    out = write_folder(newer, tmp_path / "tokens")
    np.testing.assert_array_equal(
        read_token_folder(out, "classifier").train.token_ids, newer.train.token_ids
    )
    assert sorted(os.listdir(tmp_path)) == ["built", "tokens"]


def test_a_non_empty_folder_that_is_not_a_token_folder_is_never_overwritten(tmp_path):
    keep = tmp_path / "results"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    entered = []
    with pytest.raises(DataError, match="not a token folder .*refusing to overwrite"):
        with token_folder_writer(keep):
            entered.append(True)
    assert not entered  # refused before any work
    assert os.listdir(keep) == ["notes.txt"] and (keep / "notes.txt").read_text() == "mine"


def test_an_empty_folder_is_written_into(tmp_path):
    (tmp_path / "tokens").mkdir()
    out = write_folder(classification_tokens(tmp_path), tmp_path / "tokens")
    assert len(read_token_folder(out, "classifier").train) == 12


# --- settings fixed by the tokens ----------------------------------------------------


def test_settings_come_from_the_folder_and_contradictions_name_the_setting(tmp_path):
    from keras_transformer.training.classifier.settings import ClassifierSettings

    tokenized = classification_tokens(tmp_path)
    filled = settings_from_tokens(ClassifierSettings(), tokenized)
    assert (filled.vocabulary_size, filled.sequence_length, filled.max_length, filled.pooling) == (
        VOCABULARY_SIZE,
        LENGTH,
        512,
        "cls",
    )
    assert (
        settings_from_tokens(ClassifierSettings(sequence_length=LENGTH), tokenized).sequence_length
        == LENGTH
    )
    with pytest.raises(
        TokenSettingConflict,
        match=r"^sequence_length 16 contradicts csv:texts.csv: .*sequence_length 4. "
        r"Leave sequence_length out",
    ):
        settings_from_tokens(ClassifierSettings(sequence_length=16), tokenized)
    with pytest.raises(ValueError, match=r"^pooling mean contradicts .*adds a \[CLS\] token"):
        settings_from_tokens(ClassifierSettings(pooling="mean"), tokenized)
    # Given explicitly, even a default value that disagrees is a contradiction.
    with pytest.raises(ValueError, match="^max_length 256"):
        settings_from_tokens(ClassifierSettings(max_length=256), tokenized, given={"max_length"})
    with pytest.raises(ValueError, match="^pooling max"):
        settings_from_tokens(ClassifierSettings(), tokenized, given={"pooling"})


def test_pooling_without_cls_is_the_folders_unless_given(tmp_path):
    from keras_transformer.training.classifier.settings import ClassifierSettings

    tokenized = classification_tokens(tmp_path)
    tokenized.settings["pooling"] = "mean"
    # The app passes the flags given: --pooling left out takes the folder's.
    assert settings_from_tokens(ClassifierSettings(), tokenized, given=set()).pooling == "mean"
    assert settings_from_tokens(ClassifierSettings(), tokenized, given={"pooling"}).pooling == "max"
    with pytest.raises(ValueError, match="^pooling cls contradicts"):
        settings_from_tokens(ClassifierSettings(pooling="cls"), tokenized, given={"pooling"})
    # A library caller's pooling stands when the tokens allow it (no [CLS] either way).
    assert settings_from_tokens(ClassifierSettings(), tokenized).pooling == "max"
