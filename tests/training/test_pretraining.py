"""Masked-token pretraining of the classifier's encoder on its texts and unlabelled
ones: the masking, the tied head, the loss going down, the hand-over
to the classifier, `--unlabeled` files, the time budget, and `--resume` in each phase.
The app run under a time budget also shows what the classifier app chooses from the data
(the rules themselves: tests/training/test_data_rules.py)."""

import contextlib
import dataclasses
import io
import json
import os
import random

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.cli import train_classifier
from keras_transformer.models import TransformerClassifier
from keras_transformer.text.vocabulary import CLS, MASK, RESERVED_TOKENS
from keras_transformer.training.classifier import pipeline as classifier_training
from keras_transformer.training.classifier import pretraining as pretraining
from keras_transformer.training.classifier.settings import ClassifierSettings
from keras_transformer.training.compiling import learning_rate_schedule
from keras_transformer.training.runs import RunFolder
from tests.classifier_fixtures import (
    TINY_ENCODER_FLAGS,
    TRAIN_FLAGS,
    expect_usage_error,
    write_keyword_csv,
)

VOCABULARY_SIZE = 500
RESERVED = len(RESERVED_TOKENS)
MASK_ID = RESERVED_TOKENS.index(MASK)
CLS_ID = RESERVED_TOKENS.index(CLS)
TINY = ClassifierSettings(
    sequence_length=24,
    vocabulary_size=VOCABULARY_SIZE,
    num_layers=1,
    d_model=16,
    num_heads=2,
    intermediate_dim=32,
    dropout=0.0,
    batch_size=16,
    learning_rate=5e-3,
    warmup_fraction=0.1,
    pretrain_epochs=2,
)


def numpy(tensor):
    return keras.ops.convert_to_numpy(tensor)


# --- masking -------------------------------------------------------------------------


def word_batch(rows=400, length=60, seed=0):
    """Rows of `[CLS]`, then word ids, then padding of varied lengths."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(RESERVED, VOCABULARY_SIZE, size=(rows, length)).astype("int32")
    ids[:, 0] = CLS_ID
    for row, real in enumerate(rng.integers(5, length, size=rows)):
        ids[row, real:] = 0
    return ids


def test_masking_follows_berts_rates_and_labels_only_the_chosen_positions():
    ids = word_batch()
    inputs, labels = (
        numpy(t)
        for t in pretraining.mask_tokens(tf.constant(ids), tf.constant([3, 4]), VOCABULARY_SIZE)
    )
    words = ids >= RESERVED
    chosen = labels != 0
    assert words.sum() > 10_000
    assert chosen.sum() / words.sum() == pytest.approx(0.15, abs=0.01)
    # Reserved tokens ([CLS], [PAD]) are never chosen, nor changed.
    assert not chosen[~words].any()
    np.testing.assert_array_equal(inputs[~words], ids[~words])
    # Labels: the original id where chosen, 0 (ignored by the loss) elsewhere.
    np.testing.assert_array_equal(labels[chosen], ids[chosen])
    np.testing.assert_array_equal(inputs[~chosen], ids[~chosen])
    became_mask = inputs[chosen] == MASK_ID
    kept = inputs[chosen] == ids[chosen]
    became_random = ~became_mask & ~kept
    assert became_mask.mean() == pytest.approx(0.8, abs=0.03)
    # A random draw equals the original 1 time in 493: "kept" holds those too.
    assert became_random.mean() == pytest.approx(0.1, abs=0.02)
    assert kept.mean() == pytest.approx(0.1, abs=0.02)
    random_ids = inputs[chosen][became_random]
    assert random_ids.min() >= RESERVED and random_ids.max() < VOCABULARY_SIZE


def test_training_batches_are_masked_afresh_each_epoch_and_validation_batches_alike():
    ids = word_batch(rows=32, length=20)

    def chosen_positions_per_pass(training):
        """For each pass, {original row: its chosen positions}, whatever order the rows came in."""
        dataset = pretraining.masked_batches(ids, 8, VOCABULARY_SIZE, seed=7, training=training)
        passes = []
        for _ in range(2):
            chosen = {}
            for inputs, labels in dataset:
                inputs, labels = numpy(inputs), numpy(labels)
                originals = np.where(labels != 0, labels, inputs)
                for original, row_labels in zip(originals, labels, strict=True):
                    chosen[tuple(np.trim_zeros(original, "b"))] = tuple(np.flatnonzero(row_labels))
            assert len(chosen) == len(ids)
            passes.append(chosen)
        return passes

    first, second = chosen_positions_per_pass(training=True)
    assert first != second
    first, second = chosen_positions_per_pass(training=False)
    assert first == second


# --- the model -----------------------------------------------------------------------


def tiny_masked_lm():
    return pretraining.build_masked_lm(TINY, VOCABULARY_SIZE, steps_per_epoch=4)


def test_the_output_projection_is_the_token_embedding():
    model = tiny_masked_lm()
    table = model.embedding.token_embedding.embeddings
    assert model.output_kernel is table
    # No other [V, d] weight: the head has no projection of its own.
    assert [w.path for w in model.weights if tuple(w.shape) == (VOCABULARY_SIZE, TINY.d_model)] == [
        table.path
    ]
    # With a zero embedding table, every position's logits are the output bias alone.
    model.output_bias.assign(np.arange(VOCABULARY_SIZE, dtype="float32"))
    table.assign(np.zeros(table.shape, "float32"))
    logits = numpy(model(word_batch(rows=2, length=TINY.sequence_length)))
    np.testing.assert_allclose(
        logits, np.broadcast_to(np.arange(VOCABULARY_SIZE), logits.shape), atol=1e-5
    )


def test_pretraining_lowers_the_masked_token_loss_on_a_repetitive_corpus():
    # Three "sentences" of fixed word order, repeated: each word is predictable from its neighbours.
    sentences = [list(range(start, start + 12)) for start in (10, 40, 70)]
    ids = np.zeros((96, TINY.sequence_length), "int32")
    for row in range(len(ids)):
        ids[row, :12] = sentences[row % 3]
    epochs = 12
    settings = dataclasses.replace(TINY, pretrain_epochs=epochs, learning_rate=0.02)
    model = pretraining.build_masked_lm(settings, VOCABULARY_SIZE, steps_per_epoch=len(ids) // 16)
    validation = pretraining.masked_batches(ids, 16, VOCABULARY_SIZE, seed=1, training=False)
    before = model.evaluate(validation, verbose=0, return_dict=True)
    model.fit(
        pretraining.masked_batches(ids, 16, VOCABULARY_SIZE, seed=2, training=True),
        epochs=epochs,
        shuffle=False,
        verbose=0,
    )
    after = model.evaluate(validation, verbose=0, return_dict=True)
    assert before["loss"] > np.log(VOCABULARY_SIZE) - 1.0  # a fresh model knows nothing
    # Below what knowing only which 36 words occur gives: the context is used.
    assert after["loss"] < np.log(36) - 1.0
    assert after["masked_accuracy"] > 0.5


def test_copy_encoder_to_refuses_a_classifier_of_another_depth():
    model = tiny_masked_lm()
    classifier = TransformerClassifier(
        VOCABULARY_SIZE,
        3,
        sequence_length=TINY.sequence_length,
        num_layers=2,
        d_model=TINY.d_model,
        num_heads=2,
        intermediate_dim=32,
    )
    classifier.build((None, TINY.sequence_length))
    with pytest.raises(ValueError, match="encoder_block_1"):
        model.copy_encoder_to(classifier)


# --- --unlabeled -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyword_csv(tmp_path_factory):
    return write_keyword_csv(
        tmp_path_factory.mktemp("pretraining_data") / "keywords.csv", num_examples=60
    )


def write_unlabeled(path, lines=40):
    """Lines with two words the labelled texts never use, often enough to enter the vocabulary."""
    rng = random.Random(0)
    fillers = "the a of and to in is was on for".split()
    path.write_text(
        "".join(f"zephyr quokka {' '.join(rng.sample(fillers, 4))}\n\n" for _ in range(lines)),
        encoding="utf-8",
    )
    return str(path)


@pytest.mark.parametrize(
    "content, expected",
    [
        (None, "not found"),
        (b"", "has no text"),
        (b"  \n\n\t\n", "has no text"),
        (b"fine line\ncaf\xe9 latin-1\n", "not UTF-8: byte 0xe9 on line 2"),
    ],
    ids=["missing", "empty", "blank", "latin-1"],
)
def test_bad_unlabeled_files_are_usage_errors_naming_the_file(
    tmp_path, keyword_csv, capsys, content, expected
):
    path = tmp_path / "unlabeled.txt"
    if content is not None:
        path.write_bytes(content)
    line = expect_usage_error(
        train_classifier.main,
        [
            "--data",
            f"csv:{keyword_csv}",
            *TRAIN_FLAGS,
            "--pretrain-epochs",
            "1",
            "--unlabeled",
            str(path),
            "--run-dir",
            str(tmp_path / "run"),
            "--no-export",
        ],
        capsys,
    )
    assert str(path) in line and expected in line
    assert not os.path.exists(tmp_path / "run")


def test_unlabeled_without_pretraining_and_negative_epochs_are_usage_errors(
    tmp_path, keyword_csv, capsys
):
    unlabeled = write_unlabeled(tmp_path / "unlabeled.txt")
    common = [
        "--data",
        f"csv:{keyword_csv}",
        *TRAIN_FLAGS,
        "--run-dir",
        str(tmp_path / "run"),
        "--no-export",
    ]
    line = expect_usage_error(train_classifier.main, [*common, "--unlabeled", unlabeled], capsys)
    assert "--pretrain-epochs" in line
    line = expect_usage_error(train_classifier.main, [*common, "--pretrain-epochs", "-1"], capsys)
    assert "pretrain_epochs" in line and "-1" in line


def test_unlabeled_files_give_their_non_blank_lines(tmp_path):
    path = tmp_path / "unlabeled.txt"
    path.write_bytes("\ufeffFirst text \r\n\r\n  second, naïve\n\t\nthird".encode("utf-8"))
    assert pretraining.read_unlabeled_texts(path) == ["First text", "second, naïve", "third"]


def test_an_unlabeled_folder_is_a_data_error(tmp_path):
    from keras_transformer.data import DataError

    with pytest.raises(DataError, match=f"Cannot read the unlabeled texts file {tmp_path}"):
        pretraining.read_unlabeled_texts(tmp_path)


# --- the time budget -------------------------------------------------------------------


BUDGET = 1e-6  # minutes: spent by the first step of each phase


@pytest.fixture(scope="module")
def budget_run(tmp_path_factory, keyword_csv):
    """`apps.train_classifier` pretraining under a `--time-budget`, with the sequence length,
    vocabulary, batch size, warmup and bag of n-grams left to the data (`--max-length 4`
    caps the length); the time budget each phase's `fit_in_folder` got, the fine-tuned
    model, and what the run printed. One run for the budget and for the data rules: each
    app run costs its tracing."""
    run_dir = tmp_path_factory.mktemp("pretraining_budget") / "run"
    budgets, models = {}, {}

    def recording(name, fit):
        def fit_in_folder(model, *args, time_budget_minutes=None, **kwargs):
            budgets[name], models[name] = time_budget_minutes, model
            return fit(model, *args, time_budget_minutes=time_budget_minutes, **kwargs)

        return fit_in_folder

    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
        patch.setattr(
            pretraining, "fit_in_folder", recording("pretraining", pretraining.fit_in_folder)
        )
        patch.setattr(
            classifier_training,
            "fit_in_folder",
            recording("fine-tuning", classifier_training.fit_in_folder),
        )
        status = train_classifier.main(
            [
                "--data",
                f"csv:{keyword_csv}",
                *TINY_ENCODER_FLAGS,
                "--max-length",
                "4",
                "--pretrain-epochs",
                "20",
                "--epochs",
                "20",
                "--time-budget",
                str(BUDGET),
                "--run-dir",
                str(run_dir),
                "--no-export",
                "--verbose",
                "2",
            ]
        )
    assert status == 0
    return run_dir, budgets, models["fine-tuning"], printed.getvalue().splitlines()


def test_pretraining_and_fine_tuning_share_one_time_budget(budget_run, keyword_csv):
    from keras_transformer.data import load_classification_data

    run_dir, budgets, model, _ = budget_run
    assert budgets["pretraining"] == pytest.approx(BUDGET * pretraining.PRETRAINING_BUDGET_SHARE)
    assert 0 < budgets["fine-tuning"] <= BUDGET
    # Each phase stopped early, after one epoch of its twenty.
    assert len(RunFolder(run_dir / "pretraining").read_history()["loss"]) == 1
    report = json.loads((run_dir / "metrics.json").read_text())
    assert report["stopped_by_time_budget"] and report["epochs_completed"] == 1
    # Fine-tuning cut short by its budget shortened its learning-rate schedule to the steps
    # the budget allowed.
    settings = report["settings"]
    train_texts = len(load_classification_data(f"csv:{keyword_csv}").train)
    planned = settings["epochs"] * -(-train_texts // settings["batch_size"])
    assert float(learning_rate_schedule(model).total_steps.numpy()) < planned


def test_the_classifier_app_chooses_what_no_flag_set(budget_run):
    """The data rules (tests/training/test_data_rules.py) as an app run says and records them."""
    run_dir, _, _, printed = budget_run
    saved = json.loads((run_dir / "settings.json").read_text())
    # Keyword texts are 7 WordPieces: 8 after rounding, held at --max-length 4.
    assert (
        saved["settings"]["sequence_length"]
        == saved["chosen_from_data"]["sequence_length"]["value"]
        == 4
    )
    assert [line for line in printed if line.startswith("sequence_length 4: the 95th percentile")]
    assert [line for line in printed if line.startswith("batch_size 8: ")]  # 48 texts: 6 steps at 8
    # Everything no flag set is chosen. Flags that are set win, neither chosen nor said: the
    # app run of tests/training/test_model_selection.py (TRAIN_FLAGS) checks that.
    assert set(saved["chosen_from_data"]) == {
        "sequence_length",
        "vocabulary_size",
        "batch_size",
        "warmup_fraction",
        "ngram_l2",
        "ngram_length",
        "ngram_buckets",
    }


# --- a run killed in each phase, resumed ------------------------------------------------


class Killed(RuntimeError):
    pass


def run_app(argv, kill_after=None):
    """`apps.train_classifier.main(argv)`, recording each epoch's `(model class, epoch)` and
    the classifier's embedding table when fine-tuning starts. With `kill_after=(class, epoch)`
    the run dies right after that epoch's backup, as a SIGKILL would leave it."""
    epochs, start_weights = [], {}
    csv_end = keras.callbacks.CSVLogger.on_epoch_end
    backup_end = keras.callbacks.BackupAndRestore.on_epoch_end
    fine_tune = classifier_training.fit_in_folder

    def logging(self, epoch, logs=None):
        epochs.append((type(self.model).__name__, epoch))
        return csv_end(self, epoch, logs)

    def backing_up(self, epoch, logs=None):
        backup_end(self, epoch, logs)
        if kill_after == (type(self.model).__name__, epoch):
            raise Killed

    def fine_tuning(model, *args, **kwargs):
        start_weights["token_embedding"] = numpy(model.embedding.token_embedding.embeddings).copy()
        start_weights["encoder_block_0"] = [w.copy() for w in model.encoder_blocks[0].get_weights()]
        return fine_tune(model, *args, **kwargs)

    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
        patch.setattr(keras.callbacks.CSVLogger, "on_epoch_end", logging)
        patch.setattr(keras.callbacks.BackupAndRestore, "on_epoch_end", backing_up)
        patch.setattr(classifier_training, "fit_in_folder", fine_tuning)
        try:
            status = train_classifier.main(argv)
        except Killed:
            status = "killed"
    return {
        "status": status,
        "epochs": epochs,
        "start_weights": start_weights,
        "stdout": printed.getvalue(),
    }


STALE_WEIGHTS = b"not the weights of this run"


def folder_state(run_dir):
    weights = os.path.join(run_dir, "pretraining", pretraining.PRETRAINED_WEIGHTS_FILE)
    return {
        "vocabulary": open(os.path.join(run_dir, "vocabulary.txt"), encoding="utf-8").read(),
        "weights_mtime": os.stat(weights).st_mtime_ns if os.path.exists(weights) else None,
    }


@pytest.fixture(scope="module")
def killed_twice(tmp_path_factory, keyword_csv):
    """One run killed after its first pretraining epoch, resumed and killed after its
    first fine-tuning epoch, resumed again to the end; two epochs in each phase.

    The run folder starts with the weights file an earlier, finished pretraining would have
    left, not of this run: the new run must pretrain again rather than load it."""
    folder = tmp_path_factory.mktemp("pretraining_resume")
    run_dir = str(folder / "run")
    stale = os.path.join(run_dir, pretraining.PRETRAINING_DIR, pretraining.PRETRAINED_WEIGHTS_FILE)
    os.makedirs(os.path.dirname(stale))
    with open(stale, "wb") as stale_file:
        stale_file.write(STALE_WEIGHTS)
    argv = [
        "--data",
        f"csv:{keyword_csv}",
        *TRAIN_FLAGS,
        "--epochs",
        "2",
        "--pretrain-epochs",
        "2",
        "--unlabeled",
        write_unlabeled(folder / "unlabeled.txt"),
        "--run-dir",
        run_dir,
        "--no-export",
    ]
    keras.utils.set_random_seed(0)
    runs = [run_app(argv, kill_after=("MaskedLanguageModel", 0))]
    runs[0].update(folder_state(run_dir))
    runs.append(run_app([*argv, "--resume"], kill_after=("TransformerClassifier", 0)))
    runs[1].update(folder_state(run_dir))
    runs.append(run_app([*argv, "--resume"]))
    runs[2].update(folder_state(run_dir))
    return run_dir, runs


def test_a_new_run_pretrains_again_whatever_an_earlier_run_left(killed_twice):
    run_dir, (first, _, _) = killed_twice
    # Pretraining ran rather than loading the stale weights, which the new run removed.
    assert first["epochs"] == [("MaskedLanguageModel", 0)]
    assert first["weights_mtime"] is None
    weights = os.path.join(
        run_dir, pretraining.PRETRAINING_DIR, pretraining.PRETRAINED_WEIGHTS_FILE
    )
    with open(weights, "rb") as weights_file:
        assert weights_file.read() != STALE_WEIGHTS


def test_a_run_killed_in_pretraining_resumes_pretraining(killed_twice):
    _, (first, second, _) = killed_twice
    assert first["status"] == "killed"
    assert first["epochs"] == [("MaskedLanguageModel", 0)]
    assert first["weights_mtime"] is None
    # Resumed from the backup: the second pretraining epoch only, then fine-tuning.
    assert second["epochs"] == [("MaskedLanguageModel", 1), ("TransformerClassifier", 0)]
    assert second["vocabulary"] == first["vocabulary"]
    assert second["weights_mtime"] is not None


def test_a_run_killed_in_fine_tuning_resumes_without_pretraining_again(killed_twice):
    run_dir, (_, second, third) = killed_twice
    assert second["status"] == "killed"
    assert third["status"] == 0
    assert third["epochs"] == [("TransformerClassifier", 1)]
    assert third["weights_mtime"] == second["weights_mtime"]
    assert os.path.exists(os.path.join(run_dir, "metrics.json"))
    assert len(RunFolder(os.path.join(run_dir, "pretraining")).read_history()["loss"]) == 2
    assert len(RunFolder(run_dir).read_history()["loss"]) == 2


def test_fine_tuning_starts_from_the_pretrained_encoder(killed_twice):
    run_dir, (_, second, _) = killed_twice
    settings = ClassifierSettings(
        **json.load(open(os.path.join(run_dir, "settings.json")))["settings"]
    )
    assert settings.pretrain_epochs == 2
    vocabulary_size = len(second["vocabulary"].splitlines())
    pretrained = pretraining.build_masked_lm(settings, vocabulary_size, steps_per_epoch=1)
    pretrained.load_weights(
        os.path.join(run_dir, "pretraining", pretraining.PRETRAINED_WEIGHTS_FILE)
    )
    fresh = pretraining.build_masked_lm(settings, vocabulary_size, steps_per_epoch=1)
    started_with = second["start_weights"]
    np.testing.assert_array_equal(
        started_with["token_embedding"], numpy(pretrained.embedding.token_embedding.embeddings)
    )
    assert not np.allclose(
        started_with["token_embedding"], numpy(fresh.embedding.token_embedding.embeddings)
    )
    for started, saved in zip(
        started_with["encoder_block_0"], pretrained.encoder_blocks[0].get_weights(), strict=True
    ):
        np.testing.assert_array_equal(started, saved)


def test_the_vocabulary_learns_the_unlabeled_words(killed_twice):
    _, (first, _, _) = killed_twice
    assert {"zephyr", "quokka"} <= set(first["vocabulary"].splitlines())
