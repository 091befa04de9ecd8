"""Model selection: `BestEpoch` keeps the epoch with the best
monitored validation metric, the loss breaking ties; `MacroF1`; `--monitor`."""

import json
import os
import time

import keras
import numpy as np
import pytest
from sklearn.metrics import f1_score

from keras_transformer.cli import train_classifier
from keras_transformer.training.callbacks import (
    BestEpoch,
    FitScheduleToBudget,
    RecentEpochWeights,
    set_trainable_weights,
)
from keras_transformer.training.classifier.settings import ClassifierSettings
from keras_transformer.training.metrics import MacroF1
from keras_transformer.training.runs import RunFolder
from keras_transformer.training.schedules import WarmupCosine
from tests.classifier_fixtures import TRAIN_FLAGS, write_keyword_csv


def tiny_model():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(loss="mse")
    return model


def replay(callback, model, epoch_logs, first_epoch=0):
    """Plays scripted epochs through `callback`, giving the model distinct
    weights each epoch. Returns those weights by epoch index and whether
    the callback asked to stop after each epoch."""
    callback.set_model(model)
    callback.on_train_begin()
    weights_by_epoch, stops = {}, []
    for offset, logs in enumerate(epoch_logs):
        epoch = first_epoch + offset
        weights = [np.full(w.shape, float(epoch + 1), "float32") for w in model.get_weights()]
        model.set_weights(weights)
        weights_by_epoch[epoch] = weights
        model.stop_training = False
        callback.on_epoch_end(epoch, dict(logs))
        stops.append(model.stop_training)
    callback.on_train_end()
    return weights_by_epoch, stops


def best_epoch(tmp_path, monitor="val_accuracy", patience=0):
    tmp_path.mkdir(exist_ok=True)
    return BestEpoch(
        tmp_path / "best.keras",
        tmp_path / "best_epoch.json",
        monitor=monitor,
        patience=patience,
        verbose=0,
    )


def assert_weights_equal(model, weights):
    for actual, expected in zip(model.get_weights(), weights, strict=True):
        np.testing.assert_array_equal(actual, expected)


# Validation loss rises from epoch 2 as the model grows confident, while accuracy still
# climbs to epoch 4.
RISING_LOSS = [
    {"val_accuracy": 0.70, "val_loss": 0.50},
    {"val_accuracy": 0.74, "val_loss": 0.55},
    {"val_accuracy": 0.73, "val_loss": 0.60},
    {"val_accuracy": 0.77, "val_loss": 0.70},
    {"val_accuracy": 0.76, "val_loss": 0.80},
]


def test_keeps_the_accuracy_best_epoch_when_the_loss_rises(tmp_path):
    model = tiny_model()
    weights, _ = replay(best_epoch(tmp_path), model, RISING_LOSS)
    assert_weights_equal(model, weights[3])
    assert_weights_equal(
        keras.models.load_model(tmp_path / "best.keras", compile=False), weights[3]
    )
    record = json.loads((tmp_path / "best_epoch.json").read_text())
    assert record["epoch"] == 4 and record["monitor"] == "val_accuracy"
    assert record["value"] == pytest.approx(0.77) and record["val_loss"] == pytest.approx(0.70)


def test_on_val_loss_keeps_the_loss_best_epoch(tmp_path):
    model = tiny_model()
    weights, _ = replay(best_epoch(tmp_path, monitor="val_loss"), model, RISING_LOSS)
    assert_weights_equal(model, weights[0])


def test_a_tie_on_accuracy_goes_to_the_lower_loss(tmp_path):
    model = tiny_model()
    logs = [
        {"val_accuracy": 0.75, "val_loss": 0.60},
        {"val_accuracy": 0.75, "val_loss": 0.50},
        {"val_accuracy": 0.75, "val_loss": 0.55},
    ]
    weights, _ = replay(best_epoch(tmp_path), model, logs)
    assert_weights_equal(model, weights[1])


def test_patience_counts_epochs_without_a_better_monitored_value(tmp_path):
    # The loss improves every epoch; only the accuracy stalls after epoch 2.
    logs = [
        {"val_accuracy": accuracy, "val_loss": 1.0 - 0.1 * index}
        for index, accuracy in enumerate([0.70, 0.80, 0.79, 0.78, 0.77])
    ]
    model = tiny_model()
    weights, stops = replay(best_epoch(tmp_path, patience=2), model, logs)
    assert stops.index(True) == 3
    assert_weights_equal(model, weights[1])
    _, stops_on_loss = replay(
        best_epoch(tmp_path / "loss", monitor="val_loss", patience=2), tiny_model(), logs
    )
    assert not any(stops_on_loss)


def test_the_best_so_far_survives_a_resume(tmp_path):
    model = tiny_model()
    before, _ = replay(best_epoch(tmp_path, patience=3), model, RISING_LOSS[:4])
    # A new process: a new callback on the same run folder files, resumed at epoch 5.
    resumed = best_epoch(tmp_path, patience=3)
    replay(
        resumed,
        model,
        [{"val_accuracy": 0.76, "val_loss": 0.40}, {"val_accuracy": 0.75, "val_loss": 0.4}],
        first_epoch=4,
    )
    assert_weights_equal(model, before[3])
    assert resumed.best["epoch"] == 4 and resumed.best["epochs_without_improvement"] == 2


def test_an_unlogged_monitor_is_a_clear_error(tmp_path):
    callback = best_epoch(tmp_path, monitor="val_macro_f1")
    callback.set_model(tiny_model())
    callback.on_train_begin()
    with pytest.raises(ValueError, match="val_macro_f1.*val_accuracy, val_loss"):
        callback.on_epoch_end(0, {"val_accuracy": 0.5, "val_loss": 1.0})


def test_recent_epoch_weights_average_the_last_epochs(tmp_path):
    model = tiny_model()
    recent = RecentEpochWeights(3)
    # Epoch e's weights are all e + 1: five epochs leave epochs 3, 4 and 5.
    replay(recent, model, [{}] * 5)
    assert recent.epoch_numbers == [3, 4, 5]
    for last, expected in ((1, 5.0), (2, 4.5), (3, 4.0), (None, 4.0)):
        for value in recent.average(last=last):
            np.testing.assert_array_equal(value, np.full(value.shape, expected, "float32"))
            assert value.dtype == np.float32
    with pytest.raises(ValueError, match="last 4 epochs: 3 are kept"):
        recent.average(last=4)
    with pytest.raises(ValueError, match="at least one epoch"):
        RecentEpochWeights(0)


def test_recent_epoch_weights_during_fit_are_the_epochs_weights():
    keras.utils.set_random_seed(0)
    model = tiny_model()
    seen = []
    record = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: seen.append([w.copy() for w in model.get_weights()])
    )
    recent = RecentEpochWeights(2)
    x, y = np.random.rand(16, 3).astype("float32"), np.random.rand(16, 2).astype("float32")
    model.fit(x, y, epochs=4, batch_size=4, verbose=0, callbacks=[record, recent])
    averaged = recent.average()
    for index, value in enumerate(averaged):
        np.testing.assert_allclose(value, (seen[2][index] + seen[3][index]) / 2, rtol=1e-6)
    set_trainable_weights(model, averaged)
    for actual, expected in zip(model.get_weights(), averaged, strict=True):
        np.testing.assert_array_equal(actual, expected)
    with pytest.raises(ValueError):
        set_trainable_weights(model, averaged[:1])


def test_epoch_weights_are_set_on_a_mirrored_strategys_variables_outside_its_scope():
    import tensorflow as tf

    from keras_transformer.training.distribute import make_strategy

    keras.utils.set_random_seed(0)
    strategy = make_strategy("mirrored")
    with strategy.scope():
        model = tiny_model()
    assert isinstance(model.trainable_weights[0].value, tf.distribute.DistributedValues)
    recent = RecentEpochWeights(2)
    x, y = np.random.rand(16, 3).astype("float32"), np.random.rand(16, 2).astype("float32")
    model.fit(x, y, epochs=3, batch_size=4, verbose=0, callbacks=[recent])
    averaged = recent.average()
    set_trainable_weights(model, averaged)  # as the translator does, outside the scope
    for variable, expected in zip(model.trainable_weights, averaged, strict=True):
        for replica_value in strategy.experimental_local_results(variable.value):
            np.testing.assert_array_equal(replica_value.numpy(), expected)
    np.testing.assert_array_equal(
        model.predict(x[:2], verbose=0), x[:2] @ averaged[0] + averaged[1]
    )


def test_macro_f1_matches_sklearn_over_batches():
    # Four classes: class 3 never occurs in labels or predictions, class 2 is
    # only ever predicted, never labelled.
    labels = np.array([0, 0, 0, 1, 1, 0, 1, 1, 0, 1])
    predicted = np.array([0, 2, 0, 1, 0, 0, 1, 2, 1, 1])
    scores = np.eye(4, dtype="float32")[predicted] * 0.7 + 0.1
    metric = MacroF1(num_classes=4)
    metric.update_state(labels[:6], scores[:6])
    metric.update_state(labels[6:], scores[6:])
    expected = f1_score(labels, predicted, average="macro")
    assert float(metric.result()) == pytest.approx(expected, abs=1e-6)
    metric.reset_state()
    metric.update_state(labels, np.eye(4, dtype="float32")[labels])
    assert float(metric.result()) == pytest.approx(1.0)


def test_monitor_flag_default_choices_and_bad_value(capsys):
    parser = train_classifier.build_parser()
    assert train_classifier.settings_from(parser.parse_args([])).monitor == "val_accuracy"
    for monitor in ("val_macro_f1", "val_loss"):
        assert (
            train_classifier.settings_from(parser.parse_args(["--monitor", monitor])).monitor
            == monitor
        )
    with pytest.raises(SystemExit) as raised:
        parser.parse_args(["--monitor", "accuracy"])
    assert raised.value.code == 2
    assert "--monitor: invalid choice: 'accuracy'" in capsys.readouterr().err
    with pytest.raises(
        ValueError, match="`monitor` must be one of val_accuracy, val_macro_f1, val_loss"
    ):
        ClassifierSettings(monitor="val_f1").validate()


def test_a_run_on_macro_f1_keeps_and_records_its_best_epoch(tmp_path, capsys):
    csv_path = write_keyword_csv(tmp_path / "keywords.csv")
    run_dir = tmp_path / "run"
    status = train_classifier.main(
        [
            "--data",
            f"csv:{csv_path}",
            *TRAIN_FLAGS,
            "--monitor",
            "val_macro_f1",
            "--verbose",
            "2",
            "--run-dir",
            str(run_dir),
            "--no-export",
        ]
    )
    assert status == 0
    folder = RunFolder(run_dir)
    history = folder.read_history()
    kept = json.loads((run_dir / "metrics.json").read_text())["kept_epoch"]
    assert kept == folder.read_best_epoch() and kept["monitor"] == "val_macro_f1"
    best_value = max(history["val_macro_f1"])
    ties = [index for index, value in enumerate(history["val_macro_f1"]) if value == best_value]
    best_index = min(ties, key=lambda index: history["val_loss"][index])
    assert kept["epoch"] == best_index + 1
    assert kept["value"] == pytest.approx(best_value) and kept["val_loss"] == pytest.approx(
        history["val_loss"][best_index]
    )
    printed = capsys.readouterr().out
    assert f"Kept epoch {kept['epoch']} (val_macro_f1 " in printed
    assert os.path.isfile(run_dir / "checkpoints" / "best.keras")
    # The same run shows the data rules giving way to flags: the sequence length, vocabulary
    # and batch size TRAIN_FLAGS set are kept, neither chosen nor said; what no flag set is
    # chosen (tests/training/test_data_rules.py runs the app with them left to the data).
    saved = json.loads((run_dir / "settings.json").read_text())
    assert (
        saved["settings"]["sequence_length"],
        saved["settings"]["vocabulary_size"],
        saved["settings"]["batch_size"],
    ) == (32, 200, 16)
    assert set(saved["chosen_from_data"]) == {
        "warmup_fraction",
        "ngram_l2",
        "ngram_length",
        "ngram_buckets",
    }
    assert not [line for line in printed.splitlines() if line.startswith("batch_size ")]


class StopInEpoch(keras.callbacks.Callback):
    """Stops mid-epoch as `TimeBudget` does when the budget runs out."""

    def __init__(self, epoch, batch):
        super().__init__()
        self.stop_at = (epoch, batch)
        self.epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.stop_at:
            self.model.stop_training = True


def test_a_fit_cut_short_by_the_time_budget_ends_on_the_best_epoch(tmp_path):
    # Validated against the opposite labels, so the accuracy gets worse as
    # training goes on and an early epoch is the best.
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(
        optimizer=keras.optimizers.SGD(0.5),
        loss="sparse_categorical_crossentropy",
        metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
    )
    folder = RunFolder(tmp_path / "run")
    folder.start_fresh()
    model.fit(
        x,
        y,
        validation_data=(x, 1 - y),
        epochs=10,
        batch_size=8,
        verbose=0,
        callbacks=[
            StopInEpoch(epoch=4, batch=2),
            *folder.callbacks(monitor="val_accuracy", patience=0, verbose=0),
        ],
    )
    history = folder.read_history()
    assert len(history["loss"]) == 5
    kept = folder.read_best_epoch()
    assert kept["epoch"] < 5 and kept["value"] == pytest.approx(max(history["val_accuracy"]))
    best = keras.models.load_model(tmp_path / "run" / "checkpoints" / "best.keras", compile=False)
    last = keras.models.load_model(tmp_path / "run" / "checkpoints" / "last.keras", compile=False)
    assert_weights_equal(model, best.get_weights())
    assert not np.allclose(model.get_weights()[0], last.get_weights()[0])


# --- the learning rate under a time budget ---


def test_warmup_cosine_follows_keras_cosine_decay():
    schedule = WarmupCosine(peak=1e-3, total_steps=200, warmup_fraction=0.1)
    reference = keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0, decay_steps=180, warmup_target=1e-3, warmup_steps=20, alpha=0.0
    )
    for step in (0, 5, 19, 20, 21, 100, 199, 200, 250):
        assert float(schedule(step)) == pytest.approx(float(reference(step)), abs=1e-9), step


def test_the_schedule_ends_when_the_time_budget_does(monkeypatch):
    clock = {"now": 1000.0}
    monkeypatch.setattr(time, "monotonic", lambda: clock["now"])
    schedule = WarmupCosine(peak=1e-3, total_steps=1000, warmup_fraction=0.1)
    model = tiny_model()
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=schedule), loss="mse")
    model.optimizer.build(model.trainable_variables)
    fitting = FitScheduleToBudget(schedule, minutes=1, every=10)
    fitting.set_model(model)
    fitting.on_train_begin()
    for batch in range(10):  # one step a second
        clock["now"] += 1.0
        model.optimizer.iterations.assign_add(1)
        fitting.on_train_batch_end(batch)
    # 50 seconds left at a step a second: the cosine now ends at step 10 + 50.
    assert float(schedule.total_steps.numpy()) == pytest.approx(61.0)
    assert float(schedule(61)) == pytest.approx(0.0, abs=1e-12)
    without_budget = WarmupCosine(peak=1e-3, total_steps=1000, warmup_fraction=0.1)
    fitting = FitScheduleToBudget(without_budget, minutes=None, every=10)
    fitting.set_model(model)
    fitting.on_train_begin()
    for batch in range(10):
        fitting.on_train_batch_end(batch)
    assert float(without_budget.total_steps.numpy()) == 1000.0
