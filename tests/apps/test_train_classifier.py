"""`keras-transformer train-classifier`: the run folder, bad input, the time budget,
new export versions, and `--resume` after the process is killed."""

import csv
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import keras
import numpy as np
import pytest

from keras_transformer.cli import train_classifier
from keras_transformer.training.runs import RunFolder
from tests.classifier_fixtures import (
    CLASS_NAMES,
    MODEL_FLAGS,
    TRAIN_FLAGS,
    expect_usage_error,
    is_png,
    load_export,
    load_keras_model,
    snapshot,
    write_keyword_csv,
)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_history(run_dir):
    with open(os.path.join(run_dir, "history.csv"), newline="") as history_file:
        return list(csv.DictReader(history_file))


def read_metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.json")) as metrics_file:
        return json.load(metrics_file)


# --- a normal run ----------------------------------------------------------------


def test_run_exits_zero_and_reports_where_things_went(trained_classifier):
    assert trained_classifier.exit_status == 0
    assert f"Exported SavedModel: {trained_classifier.version_dir}" in trained_classifier.stdout
    assert os.path.isfile(os.path.join(trained_classifier.version_dir, "saved_model.pb"))
    assert sorted(os.listdir(trained_classifier.export_dir)) == ["1"]


def test_metrics_report_the_test_split(trained_classifier):
    from keras_transformer.data import load_classification_data

    metrics = read_metrics(trained_classifier.run_dir)
    # The app splits with its default seed; about 10% of the 120 texts are test.
    test_size = len(load_classification_data(f"csv:{trained_classifier.csv_path}").test)
    assert 9 <= test_size <= 15
    assert metrics["num_examples"] == test_size
    assert 0.0 <= metrics["accuracy"] <= 1.0 and 0.0 <= metrics["macro_f1"] <= 1.0
    assert sorted(metrics["per_class"]) == CLASS_NAMES
    assert sum(row["support"] for row in metrics["per_class"].values()) == test_size
    matrix = np.asarray(metrics["confusion_matrix"])
    assert matrix.shape == (3, 3)
    assert matrix.sum() == test_size
    assert np.trace(matrix) / test_size == pytest.approx(metrics["accuracy"])
    assert metrics["epochs_completed"] == 3
    assert metrics["stopped_by_time_budget"] is False


def test_run_folder_has_plots_history_and_tensorboard_logs(trained_classifier):
    run_dir = trained_classifier.run_dir
    assert is_png(os.path.join(run_dir, "confusion_matrix.png"))
    assert is_png(os.path.join(run_dir, "learning_curves.png"))
    history = read_history(run_dir)
    assert [int(row["epoch"]) for row in history] == [0, 1, 2]
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(history[0])
    events = [
        os.path.join(root, name)
        for root, _, names in os.walk(os.path.join(run_dir, "logs"))
        for name in names
        if name.startswith("events.out.tfevents")
    ]
    assert events and all(os.path.getsize(path) > 0 for path in events)


PROBE_TEXTS = [
    "goal match team",
    "stocks market shares",
    "film music actor",
    "the news of the week",
]


@pytest.fixture(scope="module")
def run_models(trained_classifier):
    """The trained classifier's checkpoints, finished model and export, loaded once, with the
    token ids of `PROBE_TEXTS` and the finished model's answers for them."""
    import tensorflow as tf

    from keras_transformer.text import WordPieceTokenizer

    run_dir = trained_classifier.run_dir
    tokenizer = WordPieceTokenizer(os.path.join(run_dir, "vocabulary.txt"))
    token_ids = tokenizer.encode(tf.constant(PROBE_TEXTS), 32).numpy()
    finished = load_keras_model(os.path.join(run_dir, "model.keras"))
    return {
        "token_ids": token_ids,
        "last": keras.models.load_model(os.path.join(run_dir, "checkpoints", "last.keras")),
        "best": keras.models.load_model(os.path.join(run_dir, "checkpoints", "best.keras")),
        "finished": finished,
        "finished_answers": finished.predict(token_ids, verbose=0),
        "served_answers": load_export(trained_classifier.version_dir)
        .signatures["serving_default"](text=tf.constant(PROBE_TEXTS))["probabilities"]
        .numpy(),
    }


def test_checkpoints_load_and_best_is_the_exported_model(run_models):
    last, best, finished = run_models["last"], run_models["best"], run_models["finished"]
    for model in (last, best):
        probabilities = model.predict(run_models["token_ids"], verbose=0)
        assert probabilities.shape == (len(PROBE_TEXTS), len(CLASS_NAMES))
        np.testing.assert_allclose(probabilities.sum(axis=-1), 1.0, atol=1e-5)
    # BestEpoch restores the best epoch's weights when training ends; the bag
    # of n-grams is fit after that (best.keras has it at zero), and the export
    # answers as the finished model.keras does.
    np.testing.assert_allclose(
        run_models["served_answers"], run_models["finished_answers"], atol=1e-5
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(finished.encoder_blocks[0].weights[0]),
        keras.ops.convert_to_numpy(best.encoder_blocks[0].weights[0]),
    )


# --- bad input ---------------------------------------------------------------------


def run_expecting_usage_error(argv, capsys):
    return expect_usage_error(train_classifier.main, argv, capsys)


def test_missing_csv_file_is_a_usage_error(tmp_path, capsys):
    missing = tmp_path / "nowhere.csv"
    message = run_expecting_usage_error(
        ["--data", f"csv:{missing}", *TRAIN_FLAGS, "--run-dir", str(tmp_path / "run")], capsys
    )
    assert str(missing) in message
    assert not os.path.exists(tmp_path / "run")


def test_missing_column_is_named(tmp_path, capsys):
    path = write_keyword_csv(tmp_path / "data.csv", 30)
    message = run_expecting_usage_error(
        [
            "--data",
            f"csv:{path}",
            "--text-column",
            "body",
            *TRAIN_FLAGS,
            "--run-dir",
            str(tmp_path / "run"),
        ],
        capsys,
    )
    assert "'body'" in message
    assert "'text'" in message  # the columns the file does have


def test_a_single_class_is_a_usage_error(tmp_path, capsys):
    path = write_keyword_csv(tmp_path / "data.csv", 30, classes=["sport"])
    message = run_expecting_usage_error(
        ["--data", f"csv:{path}", *TRAIN_FLAGS, "--run-dir", str(tmp_path / "run")], capsys
    )
    assert "two classes" in message and "'sport'" in message


def test_heads_that_do_not_divide_the_width_are_a_usage_error(tmp_path, capsys):
    path = write_keyword_csv(tmp_path / "data.csv", 30)
    message = run_expecting_usage_error(
        [
            "--data",
            f"csv:{path}",
            *TRAIN_FLAGS,
            "--num-heads",
            "3",
            "--d-model",
            "16",
            "--run-dir",
            str(tmp_path / "run"),
        ],
        capsys,
    )
    assert "num_heads" in message and "16" in message and "3" in message
    assert not os.path.exists(tmp_path / "run")


def test_resume_of_a_finished_run_refuses_and_keeps_its_results(trained_classifier, capsys):
    before = snapshot(trained_classifier.run_dir)
    message = run_expecting_usage_error(
        [
            "--data",
            f"csv:{trained_classifier.csv_path}",
            *TRAIN_FLAGS,
            "--resume",
            "--run-dir",
            trained_classifier.run_dir,
            "--no-export",
        ],
        capsys,
    )
    assert "already finished" in message and trained_classifier.run_dir in message
    assert snapshot(trained_classifier.run_dir) == before


# --- time budget, and a second export next to the first ----------------------------
# The run is tests/classifier_fixtures.py's `budget_classifier` (tests/apps/test_export_app.py
# exports it again).


def test_time_budget_stops_after_the_first_batch_and_still_exports(budget_classifier):
    assert budget_classifier.exit_status == 0
    assert budget_classifier.batches == [0]
    metrics = read_metrics(budget_classifier.run_dir)
    assert metrics["stopped_by_time_budget"] is True
    assert metrics["epochs_completed"] == 1
    assert len(read_history(budget_classifier.run_dir)) == 1
    assert os.path.isfile(os.path.join(budget_classifier.version_dir, "saved_model.pb"))


def test_second_export_adds_a_version_and_leaves_the_first_untouched(budget_classifier):
    export_dir = budget_classifier.export_dir
    assert budget_classifier.version_dir == os.path.join(export_dir, "2")
    assert sorted(os.listdir(export_dir)) == ["1", "2"]  # no .staging-* leftover
    assert snapshot(os.path.join(export_dir, "1")) == budget_classifier.version_1_before
    with open(
        os.path.join(export_dir, "2", "assets.extra", "class_names.txt"), encoding="utf-8"
    ) as names:
        assert names.read().splitlines() == CLASS_NAMES


# --- --resume after a kill -----------------------------------------------------------

RESUME_TEST = "test_resume_after_sigkill_continues_from_the_last_backup"


def kill_then_resume(folder):
    """Trains in a fresh process, SIGKILLs it once two epochs are logged, then runs
    the same command with --resume. Returns what the test checks, or
    {"failure": message} when the first run could not be killed mid-training."""
    # 480 texts (384 of them for training) in batches of 8: 48 steps an epoch, so
    # the kill lands several epochs before the end.
    data_path = write_keyword_csv(folder / "data.csv", 480, seed=1)
    run_dir = str(folder / "run")
    argv = [
        sys.executable,
        "-m",
        "apps.train_classifier",
        "--data",
        f"csv:{data_path}",
        *MODEL_FLAGS,
        "--epochs",
        "6",
        "--batch-size",
        "8",
        "--patience",
        "0",
        # The bag of n-grams is fit once training ends, after the kill's window; without it
        # both processes trace far less (its graph dominates a tiny model's).
        "--no-bag-of-ngrams",
        "--run-dir",
        run_dir,
        "--no-export",
    ]
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
    history_path = os.path.join(run_dir, "history.csv")

    with open(folder / "first.log", "wb") as log:
        process = subprocess.Popen(
            argv, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + 240
            while True:
                if os.path.exists(history_path) and len(read_history(run_dir)) >= 2:
                    break
                if process.poll() is not None:
                    return {
                        "failure": f"training ended (status {process.returncode}) before it could be killed:\n"
                        + (folder / "first.log").read_text(errors="replace")
                    }
                if time.monotonic() > deadline:
                    return {"failure": "no two epochs logged within 240 s"}
                time.sleep(0.02)
            process.send_signal(signal.SIGKILL)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
    outcome = {
        "run_dir": run_dir,
        "first_status": process.returncode,
        "metrics_after_kill": os.path.exists(os.path.join(run_dir, "metrics.json")),
        "before_kill": read_history(run_dir),
    }
    with open(os.path.join(run_dir, "backup", "training_metadata.json")) as metadata_file:
        outcome["epochs_backed_up"] = json.load(metadata_file)["epoch"]
    outcome["kept"] = {
        name: snapshot(run_dir)[name] for name in ("vocabulary.txt", "settings.json")
    }
    outcome["resumed"] = subprocess.run(
        argv + ["--resume"], cwd=REPO_ROOT, env=env, capture_output=True, timeout=300
    )
    return outcome


@pytest.fixture(scope="module", autouse=True)
def killed_and_resumed(request, tmp_path_factory):
    """`kill_then_resume` in a background thread, started with this module: the
    two fresh processes (each pays for a TensorFlow import) run beside this
    module's in-process tests instead of after them. The thread only starts
    them, polls a file and waits; the test asserts on what it returns."""
    if not any(item.name == RESUME_TEST for item in request.session.items):
        yield None
        return
    folder = tmp_path_factory.mktemp("resume")
    outcome = {}

    def target():
        try:
            outcome.update(kill_then_resume(folder))
        except BaseException as error:  # reported by the test, not lost in the thread
            outcome["failure"] = f"{type(error).__name__}: {error}"

    thread = threading.Thread(target=target, name="kill_then_resume", daemon=True)
    thread.start()
    yield thread, outcome
    thread.join(timeout=600)


def test_resume_after_sigkill_continues_from_the_last_backup(killed_and_resumed):
    thread, outcome = killed_and_resumed
    thread.join(timeout=600)
    assert not thread.is_alive(), "the kill-and-resume run did not finish within 600 s"
    if "failure" in outcome:
        pytest.fail(outcome["failure"])
    run_dir = outcome["run_dir"]
    assert outcome["first_status"] == -signal.SIGKILL
    assert not outcome["metrics_after_kill"]
    before_kill = outcome["before_kill"]
    epochs_backed_up = outcome["epochs_backed_up"]
    assert 2 <= len(before_kill) < 6
    kept = outcome["kept"]

    resumed = outcome["resumed"]
    assert resumed.returncode == 0, resumed.stderr.decode(errors="replace")[-3000:]

    history = read_history(run_dir)
    epochs = [int(row["epoch"]) for row in history]
    assert sorted(set(epochs)) == list(range(6))
    # A kill after an epoch's history row but before its backup repeats that
    # one epoch on resume (the row is logged first on purpose); nothing else repeats.
    assert len(epochs) - len(set(epochs)) <= 1
    # The rows from before the kill are kept, and training went on from the
    # epoch after the last backup rather than starting over.
    assert history[: len(before_kill)] == before_kill
    assert epochs[len(before_kill)] == epochs_backed_up
    assert {name: snapshot(run_dir)[name] for name in kept} == kept  # no new vocabulary
    metrics = read_metrics(run_dir)
    assert metrics["epochs_completed"] == 6
    assert metrics["stopped_by_time_budget"] is False

    # No --verbose and stdout a pipe: one "Epoch N/6" line for each epoch
    # trained after the resume, and no redrawn progress bar.
    stdout = resumed.stdout.decode(errors="replace")
    assert "\r" not in stdout and "\x1b[" not in stdout, stdout[-3000:]
    resumed_epochs = [
        int(number) for number in re.findall(r"^Epoch (\d+)/6$", stdout, flags=re.MULTILINE)
    ]
    assert resumed_epochs == list(range(epochs_backed_up + 1, 7)), stdout[-3000:]


def test_a_kill_between_the_backup_and_the_history_row_loses_no_epoch(tmp_path, monkeypatch):
    """The window a SIGKILL can hit, made deterministic, on a one-weight model
    trained with the run folder's callbacks."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    folder = RunFolder(tmp_path / "run")
    folder.start_fresh()

    def fit():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(
            x,
            y,
            validation_data=(x, y),
            epochs=3,
            batch_size=16,
            verbose=0,
            callbacks=folder.callbacks(patience=0),
        )

    original = keras.callbacks.CSVLogger.on_epoch_end

    def killed_at_epoch_1(self, epoch, logs=None):
        if epoch == 1:
            raise RuntimeError("simulated kill")
        return original(self, epoch, logs)

    monkeypatch.setattr(keras.callbacks.CSVLogger, "on_epoch_end", killed_at_epoch_1)
    with pytest.raises(RuntimeError, match="simulated kill"):
        fit()
    monkeypatch.setattr(keras.callbacks.CSVLogger, "on_epoch_end", original)
    fit()  # what --resume does: the same callbacks, restoring from backup/
    # An epoch logged but not backed up may repeat (read_history keeps the last row).
    assert sorted({int(row["epoch"]) for row in read_history(folder.path)}) == [0, 1, 2]
    assert len(folder.read_history()["loss"]) == 3


# --- the bag of n-grams --------------------------------------------------------------


def test_a_bag_of_ngrams_run_fits_its_regression_after_the_transformer_and_exports_the_sum(
    trained_classifier, run_models
):
    """The trained classifier's run: the bag of n-grams is on by default (test_no_bag_of_ngrams_
    builds_none checks that --bag-of-ngrams gives the same setting)."""
    from keras_transformer.training.classifier.bag_of_ngrams import MIX_WEIGHTS, mix_name

    run_dir = trained_classifier.run_dir
    with open(os.path.join(run_dir, "settings.json")) as settings_file:
        saved = json.load(settings_file)
    assert saved["settings"]["bag_of_ngrams"] is True
    # 1 / (2 C n) with C = 10 for the 96 training texts of 120 (an 80/10/10 split)
    assert saved["settings"]["ngram_l2"] == pytest.approx(1 / (20 * 96), rel=1e-2)
    assert "logistic regression" in saved["chosen_from_data"]["ngram_l2"]["reason"]
    token_ids = run_models["token_ids"]
    # Rows for twice the training texts' distinct bigrams: the 96 keyword texts have a few
    # hundred, so the floor of the range, where a fixed size gave every corpus 262,139.
    assert saved["settings"]["ngram_buckets"] == 1009
    assert "distinct WordPiece bigrams" in saved["chosen_from_data"]["ngram_buckets"]["reason"]
    final = run_models["finished"]
    assert final.ngrams.num_buckets == final.ngrams.num_word_buckets == 1009

    # The kept epoch's checkpoint: the Transformer alone (the bag frozen at zero while it trained).
    best = run_models["best"]
    assert not best.ngrams.trainable
    assert np.all(keras.ops.convert_to_numpy(best.ngrams(token_ids)) == 0.0)
    # The finished model: the regression fit afterwards, the head scaled by the weight chosen on
    # validation.
    idf = keras.ops.convert_to_numpy(final.ngrams.idf)
    # Adapted to the training texts: filler words (in most texts) weigh less than keywords, unseen
    # n-grams 0.
    assert 1.0 <= idf[idf > 0].min() < idf.max() and (idf == 0).mean() > 0.9
    ngram_logits = keras.ops.convert_to_numpy(final.ngrams(token_ids))
    assert np.argmax(ngram_logits, axis=1)[:3].tolist() == [
        2,
        0,
        1,
    ]  # alone it tells the keywords' classes apart
    with open(os.path.join(run_dir, "metrics.json")) as metrics_file:
        combination = json.load(metrics_file)["bag_of_ngrams"]
    scores = combination["validation"]
    assert set(scores) == {mix_name(weights) for weights in MIX_WEIGHTS}
    assert combination["mix"] == mix_name(
        (combination["transformer_weight"], combination["bag_weight"])
    )
    kept = scores[combination["mix"]]["accuracy"]
    assert kept == max(score["accuracy"] for score in scores.values())
    # Each part alone is among the pairs tried, and scored on test too.
    assert {mix_name((0.0, 1.0)), mix_name((1.0, 0.0))} <= set(scores)
    parts = combination["parts"]
    assert parts["transformer"]["validation"] == scores[mix_name((1.0, 0.0))]
    with open(os.path.join(run_dir, "metrics.json")) as metrics_file:
        assert parts["mix"]["test"]["accuracy"] == pytest.approx(
            json.load(metrics_file)["accuracy"]
        )
    assert combination["logistic_regression"]["converged"]
    # Words and pieces, or words alone, chosen on validation; the words spelled by the run's
    # vocabulary.
    assert combination["features"] in (["pieces", "words"], ["words"])
    assert set(combination["validation_by_features"]) == {"pieces+words", "words"}
    with open(os.path.join(run_dir, "vocabulary.txt"), encoding="utf-8") as vocabulary_file:
        vocabulary = vocabulary_file.read().splitlines()
    kinds = keras.ops.convert_to_numpy(final.ngrams.piece_kinds)
    assert [kind == 2 for kind in kinds] == [token.startswith("##") for token in vocabulary]
    assert kinds[vocabulary.index("goal")] == 1 and kinds[vocabulary.index("[UNK]")] == 0
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(final.head.kernel),
        combination["transformer_weight"] * keras.ops.convert_to_numpy(best.head.kernel),
        atol=1e-6,
    )
    np.testing.assert_allclose(
        run_models["served_answers"], run_models["finished_answers"], atol=1e-5
    )


def test_no_bag_of_ngrams_builds_none(tmp_path):
    settings = train_classifier.settings_from(
        train_classifier.build_parser().parse_args(["--no-bag-of-ngrams"])
    )
    assert settings.bag_of_ngrams is False
    # --bag-of-ngrams is the default, which the trained classifier's run (above) used.
    for argv in (["--bag-of-ngrams"], []):
        parsed = train_classifier.build_parser().parse_args(argv)
        assert train_classifier.settings_from(parsed).bag_of_ngrams is True
    from keras_transformer.training.classifier.model import bag_of_ngrams_arguments

    assert bag_of_ngrams_arguments(settings) is None
    with pytest.raises(ValueError, match="ngram_l2"):  # chosen from the data by training
        bag_of_ngrams_arguments(dataclasses.replace(settings, bag_of_ngrams=True))
    with pytest.raises(ValueError, match="ngram_buckets"):  # chosen from the data too
        bag_of_ngrams_arguments(dataclasses.replace(settings, bag_of_ngrams=True, ngram_l2=0.5))
    chosen = dataclasses.replace(settings, ngram_l2=0.5, ngram_buckets=1013)
    # add_bag_of_ngrams fits it once the Transformer trained, on words and pieces by default.
    fitted_after = {
        "use_bias": True,
        "trainable": False,
        "num_buckets": 1013,
        "num_word_buckets": 1013,
    }
    assert bag_of_ngrams_arguments(dataclasses.replace(chosen, bag_of_ngrams=True)) == {
        "l2": 0.5,
        **fitted_after,
    }
    assert bag_of_ngrams_arguments(dataclasses.replace(chosen, bag_of_ngrams={"l2": 0.1})) == {
        "l2": 0.1,
        **fitted_after,
    }
    assert "num_word_buckets" not in bag_of_ngrams_arguments(
        dataclasses.replace(chosen, bag_of_ngrams=True, ngram_units="pieces")
    )
    # Trained with the Transformer by `fit` instead (then nothing is fit after it).
    assert (
        bag_of_ngrams_arguments(dataclasses.replace(chosen, bag_of_ngrams={"trainable": True}))[
            "trainable"
        ]
        is True
    )
    assert settings.ngram_refit is True
    no_refit = train_classifier.build_parser().parse_args(["--no-ngram-refit"])
    assert train_classifier.settings_from(no_refit).ngram_refit is False
    with pytest.raises(ValueError, match="bag_of_ngrams"):
        dataclasses.replace(settings, bag_of_ngrams="yes").validate()


def test_ngram_units_flag_and_what_it_builds():
    from keras_transformer.training.classifier.model import bag_of_ngrams_arguments

    parser = train_classifier.build_parser()
    assert train_classifier.settings_from(parser.parse_args([])).ngram_units == "choose"
    for units in ("pieces", "words", "both"):
        settings = train_classifier.settings_from(
            parser.parse_args(
                ["--ngram-units", units, "--ngram-l2", "0.1", "--ngram-buckets", "1009"]
            )
        )
        assert settings.ngram_units == units
        # Pieces alone build the bag without word rows, as before word units existed.
        assert ("num_word_buckets" in bag_of_ngrams_arguments(settings)) == (units != "pieces")
    with pytest.raises(SystemExit):
        parser.parse_args(["--ngram-units", "letters"])
    with pytest.raises(ValueError, match="ngram_units"):
        dataclasses.replace(settings, ngram_units="letters").validate()


def test_the_bag_of_ngrams_reads_past_the_transformer_and_so_does_the_export(tmp_path):
    """Every text opens with 20 filler words; the class's keyword comes after them, past the
    Transformer's 8 tokens: only a bag that reads the whole text can tell the classes apart."""
    import csv
    import random

    import tensorflow as tf

    from keras_transformer.text import WordPieceTokenizer

    rng = random.Random(3)
    keywords = {"sport": "goal", "business": "stocks", "culture": "film"}
    filler = "the a of and to in is was on for with as by at from this that it today news".split()

    def text(label):
        return (
            " ".join(rng.choice(filler) for _ in range(20))
            + f" {keywords[label]} "
            + rng.choice(filler)
        )

    csv_path = tmp_path / "late.csv"
    with open(csv_path, "w", newline="", encoding="utf-8") as csv_file:
        writer = csv.writer(csv_file)
        writer.writerow(["text", "label"])
        for index in range(150):
            label = sorted(keywords)[index % 3]
            writer.writerow([text(label), label])
    run_dir, export_dir = str(tmp_path / "run"), str(tmp_path / "export")
    flags = [flag for flag in TRAIN_FLAGS]
    flags[flags.index("--sequence-length") + 1] = "8"
    status = train_classifier.main(
        [
            "--data",
            f"csv:{csv_path}",
            *flags,
            "--epochs",
            "1",
            "--run-dir",
            run_dir,
            "--export-dir",
            export_dir,
        ]
    )
    assert status == 0
    with open(os.path.join(run_dir, "settings.json")) as settings_file:
        saved = json.load(settings_file)
    # 22 words
    assert saved["settings"]["sequence_length"] == 8 and saved["settings"]["ngram_length"] == 24
    with open(os.path.join(run_dir, "metrics.json")) as metrics_file:
        assert json.load(metrics_file)["accuracy"] >= 0.8  # of 15 test texts; chance is 1 in 3

    labels = [index % 3 for index in range(30)]
    texts = [text(sorted(keywords)[label]) for label in labels]
    final = keras.models.load_model(os.path.join(run_dir, "model.keras"))
    assert final.input_length == 24
    tokenizer = WordPieceTokenizer(os.path.join(run_dir, "vocabulary.txt"))
    token_ids = tokenizer.encode(tf.constant(texts), 24)
    expected = final.predict(token_ids, verbose=0)
    assert np.mean(np.argmax(expected, axis=1) == labels) >= 0.8
    # Cut where the Transformer's reach ends, the same texts are all filler.
    cut = final.predict(tokenizer.encode(tf.constant(texts), 8), verbose=0)
    assert np.mean(np.argmax(cut, axis=1) == labels) < 0.6
    exported = tf.saved_model.load(os.path.join(export_dir, "1"))
    served = exported.signatures["serving_default"](text=tf.constant(texts))
    np.testing.assert_allclose(served["probabilities"].numpy(), expected, atol=1e-5)
    # The Transformer reads filler only, so validation may give it weight 0: then the export
    # ships no encoder, and no attention to show.
    with open(os.path.join(run_dir, "metrics.json")) as metrics_file:
        transformer_weight = json.load(metrics_file)["bag_of_ngrams"]["transformer_weight"]
    if transformer_weight == 0:
        assert "attention" not in exported.signatures
    else:
        attention = exported.signatures["attention"](text=tf.constant(texts))
        assert attention["tokens"].shape[1] == 8  # what the Transformer reads
