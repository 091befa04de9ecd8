"""`keras-transformer tokenize` and `--data tokens:DIR`: a run from a token folder
is the run from the raw data (same settings, same batches, same history),
flags that contradict the folder are usage errors, and a tokens run resumes.

The classifier's tokens run is the one interrupted and resumed, so that it
also resumes into the raw run; the translator's runs are those of
tests/apps/translator_runs.py, shared with tests/apps/test_train_translator.py."""

import contextlib
import csv
import io
import json
import os
import re

import keras
import numpy as np
import pytest

from keras_transformer.cli import tokenize, train_classifier, train_translator
from keras_transformer.data.tokens import read_token_folder
from keras_transformer.training.runs import RunFolder
from tests.apps.test_train_translator import write_pairs
from tests.apps.translator_runs import (
    TRANSLATOR_TOKEN_FLAGS,
    TRANSLATOR_TRAIN_FLAGS,
    run_main,
    translator_app_runs,
)
from tests.classifier_fixtures import TINY_ENCODER_FLAGS, expect_usage_error, write_keyword_csv

CLASSIFIER_TOKEN_FLAGS = ["--vocab-size", "200", "--pooling", "cls", "--max-examples", "90"]
CLASSIFIER_TRAIN_FLAGS = [
    *TINY_ENCODER_FLAGS,
    "--dropout",
    "0.1",
    "--learning-rate",
    "0.005",
    # Two epochs: the tokens run is interrupted after the first and resumed.
    "--epochs",
    "2",
    "--verbose",
    "2",
    "--no-export",
]
# "name value: reason", as data_rules' `Choice.line` prints a chosen setting.
CHOICE_LINE = re.compile(r"^[a-z_]+ [^ :]+: ")


def choice_lines(output):
    return [line for line in output.splitlines() if CHOICE_LINE.match(line)]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpora")
    return {
        "csv": write_keyword_csv(folder / "texts.csv", num_examples=150),
        "tsv": write_pairs(folder / "pairs.tsv", count=120),
    }


@pytest.fixture(scope="module")
def classifier_runs(corpora, tmp_path_factory):
    folder = tmp_path_factory.mktemp("classifier")
    tokens_dir = str(folder / "tokens")
    outputs = {
        "tokenize": run_main(
            tokenize.main,
            [
                "classifier",
                "--data",
                f"csv:{corpora['csv']}",
                *CLASSIFIER_TOKEN_FLAGS,
                "--out",
                tokens_dir,
            ],
        )
    }
    outputs["raw"] = run_main(
        train_classifier.main,
        [
            "--data",
            f"csv:{corpora['csv']}",
            *CLASSIFIER_TOKEN_FLAGS,
            *CLASSIFIER_TRAIN_FLAGS,
            "--run-dir",
            str(folder / "raw"),
        ],
    )
    # The tokens run is interrupted after its first epoch (backed up), then resumed: the
    # first epoch is the raw run's. (The resumed one is not compared: on TensorFlow the
    # dropout after a resume does not replay the uninterrupted run's.) --vocab-size agrees
    # with the folder, so it is no contradiction.
    tokens_argv = [
        "--data",
        f"tokens:{tokens_dir}",
        "--vocab-size",
        "200",
        *CLASSIFIER_TRAIN_FLAGS,
        "--run-dir",
        str(folder / "tokens_run"),
    ]
    printed = io.StringIO()
    real_callbacks = RunFolder.callbacks
    with pytest.MonkeyPatch.context() as patch:
        # After the folder's own callbacks, so the first epoch is backed up before the "crash".
        patch.setattr(
            RunFolder,
            "callbacks",
            lambda self, *args, **kwargs: [
                *real_callbacks(self, *args, **kwargs),
                InterruptAfterFirstEpoch(),
            ],
        )
        with pytest.raises(Interrupted), contextlib.redirect_stdout(printed):
            train_classifier.main(tokens_argv)
    outputs["tokens"] = printed.getvalue()
    epochs_before_resume = len(read_history(str(folder / "tokens_run")))
    outputs["resumed"] = run_main(train_classifier.main, [*tokens_argv, "--resume"])
    return {
        "tokens_dir": tokens_dir,
        "raw": str(folder / "raw"),
        "tokens_run": str(folder / "tokens_run"),
        "outputs": outputs,
        "epochs_before_resume": epochs_before_resume,
    }


class Interrupted(Exception):
    pass


class InterruptAfterFirstEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        raise Interrupted()


@pytest.fixture(scope="module")
def translator_runs(tmp_path_factory):
    return translator_app_runs(tmp_path_factory)


def read_json(path):
    with open(path, encoding="utf-8") as json_file:
        return json.load(json_file)


def read_history(run_dir):
    with open(os.path.join(run_dir, "history.csv"), newline="") as history_file:
        return list(csv.DictReader(history_file))


def assert_same_run(raw_dir, tokens_dir, tokens_name, epochs_compared=None):
    """The same settings, folder and history; the history's first `epochs_compared`
    epochs (None: all) to the last digits."""
    raw_settings = read_json(os.path.join(raw_dir, "settings.json"))
    tokens_settings = read_json(os.path.join(tokens_dir, "settings.json"))
    assert tokens_settings.pop("data") == tokens_name
    raw_settings.pop("data")
    assert tokens_settings == raw_settings
    raw_history, tokens_history = read_history(raw_dir), read_history(tokens_dir)
    assert [row.keys() for row in raw_history] == [row.keys() for row in tokens_history]
    for raw_row, tokens_row in zip(
        raw_history[:epochs_compared], tokens_history[:epochs_compared], strict=True
    ):
        np.testing.assert_allclose(
            [float(v) for v in tokens_row.values()], [float(v) for v in raw_row.values()], rtol=1e-5
        )
    # A tokens run folder is a raw run's: apps.export and --resume read either.
    assert sorted(os.listdir(tokens_dir)) == sorted(os.listdir(raw_dir))


# --- apps.tokenize -------------------------------------------------------------------


def test_tokenize_classifier_writes_a_folder_and_says_what_it_chose(classifier_runs):
    status, output = classifier_runs["outputs"]["tokenize"]
    assert status == 0
    tokens = read_token_folder(classifier_runs["tokens_dir"], "classifier")
    assert (len(tokens.train), len(tokens.validation), len(tokens.test)) == (90, 15, 15)
    assert tokens.settings["pooling"] == "cls" and tokens.settings["vocabulary_size"] == 200
    assert (
        tokens.train.token_ids[:, 0] == tokens.train.token_ids[0, 0]
    ).all()  # every text starts with [CLS]
    assert re.search(
        rf"Token folder: {re.escape(classifier_runs['tokens_dir'])} \(90 train, 15 validation, "
        r"15 test; \d+ KiB\)",
        output,
    ), output
    # What tokenizing chose is what the raw run chose and printed.
    raw_lines = choice_lines(classifier_runs["outputs"]["raw"][1])
    assert choice_lines(output) == [
        line for line in raw_lines if line.startswith(("sequence_length ", "ngram_length "))
    ]
    assert len(choice_lines(output)) == 2  # --vocab-size was given; only the lengths are chosen


def test_tokenize_translator_with_a_shared_vocabulary(corpora, tmp_path):
    out = str(tmp_path / "shared")
    status, output = run_main(
        tokenize.main,
        [
            "translator",
            "--data",
            f"tsv:{corpora['tsv']}",
            "--shared-vocabulary",
            *TRANSLATOR_TOKEN_FLAGS,
            "--out",
            out,
        ],
    )
    assert status == 0 and "Token folder" in output
    assert sorted(name for name in os.listdir(out) if name.endswith(".txt")) == ["vocabulary.txt"]
    tokens = read_token_folder(out, "translator")
    assert tokens.settings["shared_vocabulary"] is True
    assert tokens.test.targets and tokens.test.targets[0].endswith(".")  # cased references kept


def test_tokenize_refuses_a_folder_that_is_not_a_token_folder(corpora, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    line = expect_usage_error(
        tokenize.main,
        ["classifier", "--data", f"csv:{corpora['csv']}", "--out", str(tmp_path)],
        capsys,
    )
    assert "refusing to overwrite" in line and str(tmp_path) in line
    assert os.listdir(tmp_path) == ["notes.txt"]


def test_tokenize_refuses_a_token_folder_as_its_data(tmp_path, capsys):
    line = expect_usage_error(
        tokenize.main,
        ["classifier", "--data", "tokens:elsewhere", "--out", str(tmp_path / "out")],
        capsys,
    )
    assert "tokens:elsewhere names a token folder" in line


# --- raw run == tokens run -----------------------------------------------------------


def test_classifier_from_tokens_is_the_raw_run(classifier_runs):
    assert classifier_runs["outputs"]["raw"][0] == classifier_runs["outputs"]["resumed"][0] == 0
    assert_same_run(
        classifier_runs["raw"],
        classifier_runs["tokens_run"],
        f"tokens:{classifier_runs['tokens_dir']}",
        epochs_compared=1,
    )
    saved = read_json(os.path.join(classifier_runs["tokens_run"], "settings.json"))
    assert saved["settings"]["pooling"] == "cls"
    # Chosen at tokenize time (the length) and at training time (the rest), all recorded.
    assert set(saved["chosen_from_data"]) == {
        "sequence_length",
        "ngram_length",
        "batch_size",
        "warmup_fraction",
        "ngram_l2",
        "ngram_buckets",
    }
    # The same choices, printed the same way.
    raw_lines = choice_lines(classifier_runs["outputs"]["raw"][1])
    assert "batch_size" in " ".join(raw_lines)
    assert choice_lines(classifier_runs["outputs"]["tokens"]) == raw_lines


def test_translator_from_tokens_is_the_raw_run(translator_runs):
    assert translator_runs["outputs"]["raw"][0] == translator_runs["outputs"]["tokens"][0] == 0
    assert_same_run(
        translator_runs["raw"],
        translator_runs["tokens_run"],
        f"tokens:{translator_runs['tokens_dir']}",
    )
    assert "val_chrf" in read_history(translator_runs["tokens_run"])[0]
    assert read_json(os.path.join(translator_runs["tokens_run"], "samples.json")) == read_json(
        os.path.join(translator_runs["raw"], "samples.json")
    )
    assert choice_lines(translator_runs["outputs"]["tokens"][1]) == choice_lines(
        translator_runs["outputs"]["raw"][1]
    )


# --- flags that contradict the folder --------------------------------------------------


CONTRADICTIONS = [
    (
        "classifier",
        ["--max-length", "64"],
        "--max-length 64 contradicts tokens:{}: its tokens were made with max_length 512",
    ),
    (
        "classifier",
        ["--vocab-size", "300"],
        "--vocab-size 300 contradicts tokens:{}: its tokens were made with vocabulary_size 200",
    ),
    ("classifier", ["--sequence-length", "64"], "--sequence-length 64 contradicts"),
    (
        "classifier",
        ["--pooling", "mean"],
        "--pooling mean contradicts tokens:{}: its tokens were made for pooling cls",
    ),
    ("classifier", ["--text-column", "body"], "--text-column applies to raw texts"),
    ("classifier", ["--max-examples", "20"], "--max-examples applies to raw texts"),
    ("classifier", ["--pretrain-epochs", "1"], "--pretrain-epochs applies to raw texts"),
    (
        "translator",
        ["--shared-vocabulary"],
        "--shared-vocabulary true contradicts tokens:{}: its tokens were made with shared_vocabulary false",
    ),
    ("translator", ["--max-words", "10"], "--max-words applies to raw texts"),
    ("translator", ["--test-size", "4"], "--test-size applies to raw texts"),
]


@pytest.mark.parametrize(
    "task, flags, expected",
    CONTRADICTIONS,
    ids=[f"{task} {' '.join(flags)}" for task, flags, _ in CONTRADICTIONS],
)
def test_flags_that_contradict_the_folder(request, tmp_path, capsys, task, flags, expected):
    main, train_flags = (
        (train_classifier.main, CLASSIFIER_TRAIN_FLAGS)
        if task == "classifier"
        else (train_translator.main, TRANSLATOR_TRAIN_FLAGS)
    )
    tokens_dir = request.getfixturevalue(f"{task}_runs")["tokens_dir"]
    line = expect_usage_error(
        main,
        [
            "--data",
            f"tokens:{tokens_dir}",
            *flags,
            *train_flags,
            "--run-dir",
            str(tmp_path / "run"),
        ],
        capsys,
    )
    assert expected.format(tokens_dir) in line
    assert not os.path.exists(tmp_path / "run")


def test_a_folder_of_the_other_task_or_none_is_a_usage_error(translator_runs, tmp_path, capsys):
    line = expect_usage_error(
        train_classifier.main,
        ["--data", f"tokens:{translator_runs['tokens_dir']}", "--run-dir", str(tmp_path / "run")],
        capsys,
    )
    assert "holds tokens for the translator, not the classifier" in line
    line = expect_usage_error(
        train_translator.main,
        ["--data", f"tokens:{tmp_path / 'absent'}", "--run-dir", str(tmp_path / "run")],
        capsys,
    )
    assert f"No such token folder: {tmp_path / 'absent'}" in line
    line = expect_usage_error(
        train_translator.main, ["--data", "tokens:", "--run-dir", str(tmp_path / "run")], capsys
    )
    assert "tokens:DIR needs a folder" in line


# --- --resume ----------------------------------------------------------------------


def test_a_tokens_run_resumes(classifier_runs):
    # Its settings, folder and first epoch are the raw run's:
    # test_classifier_from_tokens_is_the_raw_run.
    run_dir = classifier_runs["tokens_run"]
    assert classifier_runs["epochs_before_resume"] == 1
    status, output = classifier_runs["outputs"]["resumed"]
    assert status == 0 and "Resuming" in output
    assert [row["epoch"] for row in read_history(run_dir)] == ["0", "1"]
    assert (
        read_json(os.path.join(run_dir, "settings.json"))["data"]
        == f"tokens:{classifier_runs['tokens_dir']}"
    )
    assert os.path.exists(os.path.join(run_dir, "metrics.json"))
