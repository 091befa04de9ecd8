"""Callbacks and the run folder layout shared by the training applications."""

import csv
import importlib.util
import json
import os
import time

import keras
import numpy as np

# The metrics a run can select its epoch on: higher is better for all but the loss.
MONITOR_MODES = {
    "val_loss": "min",
    "val_accuracy": "max",
    "val_macro_f1": "max",
    "val_masked_accuracy": "max",
    "val_chrf": "max",
}


class TimeBudget(keras.callbacks.Callback):
    """Stops training cleanly once `minutes` of wall-clock time are spent.

    Checked after every batch (Keras 3 honours `stop_training` between
    batches), so a budget is overrun by at most one step (and the end of that
    epoch: validation, and any metric callbacks), and after every epoch. The
    run then goes on to evaluation and export as after a normal end.
    """

    def __init__(self, minutes):
        super().__init__()
        if minutes is not None and minutes <= 0:
            raise ValueError(f"The time budget must be positive, got {minutes} minutes.")
        self.minutes = minutes
        self.exhausted = False
        self._start = None

    def on_train_begin(self, logs=None):
        self._start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        self.check()

    def on_epoch_end(self, epoch, logs=None):
        # Validation and end-of-epoch decoding may spend the rest of the
        # budget: stopping here spares a next epoch of a single step.
        self.check()

    def check(self):
        if self.minutes is None or self.exhausted:
            return
        if time.monotonic() - self._start >= self.minutes * 60:
            self.exhausted = True
            self.model.stop_training = True
            print(
                f"\nTime budget of {self.minutes:g} minutes spent: stopping training.", flush=True
            )


class FitScheduleToBudget(keras.callbacks.Callback):
    """Shortens a learning-rate schedule to the steps a time budget leaves.

    The schedule (e.g. `WarmupCosine`) has a `total_steps` variable, sized by
    the planned epochs. Every `every` steps and at each epoch end this
    estimates, from the pace so far (validation and the first step's tracing
    included, so it errs short), how many steps the budget still allows, and
    sets `total_steps` to that when it is fewer than planned: the schedule
    then reaches its end when the budget does.
    """

    def __init__(self, schedule, minutes, every=50):
        super().__init__()
        self.schedule = schedule
        self.minutes = minutes
        self.every = every
        self.planned_steps = float(schedule.total_steps.numpy())
        self._start = None
        self._steps = 0

    def on_train_begin(self, logs=None):
        self._start = time.monotonic()
        self._steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self._steps += 1
        if self._steps % self.every == 0:
            self.fit_to_budget()

    def on_epoch_end(self, epoch, logs=None):
        self.fit_to_budget()

    def fit_to_budget(self):
        if self.minutes is None or self._steps == 0:
            return
        elapsed = time.monotonic() - self._start
        remaining_steps = max(0.0, self.minutes * 60 - elapsed) * self._steps / max(elapsed, 1e-9)
        done = float(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        self.schedule.total_steps.assign(min(self.planned_steps, done + 1 + remaining_steps))


@keras.saving.register_keras_serializable(package="keras_transformer")
class MacroF1(keras.metrics.Metric):
    """Macro-averaged F1 of sparse labels against class scores, over a whole split.

    Keeps the confusion matrix across batches (so the score is the split's,
    not a mean of per-batch scores) and, like
    `sklearn.metrics.f1_score(average="macro")`, averages only over the
    classes that occur in the labels or the predictions.
    """

    def __init__(self, num_classes, name="macro_f1", **kwargs):
        super().__init__(name=name, **kwargs)
        self.num_classes = num_classes
        self.confusion = self.add_variable(
            shape=(num_classes, num_classes),
            initializer="zeros",
            name="confusion",
            aggregation="sum",
        )

    def update_state(self, y_true, y_pred, sample_weight=None):
        ops = keras.ops
        true_one_hot = ops.one_hot(ops.reshape(ops.cast(y_true, "int32"), (-1,)), self.num_classes)
        predicted = ops.argmax(ops.reshape(y_pred, (-1, self.num_classes)), axis=-1)
        predicted_one_hot = ops.one_hot(predicted, self.num_classes)
        self.confusion.assign_add(
            ops.cast(
                ops.matmul(ops.transpose(true_one_hot), predicted_one_hot), self.confusion.dtype
            )
        )

    def result(self):
        ops = keras.ops
        true_positives = ops.diagonal(self.confusion)
        # 2TP + FP + FN: row sum (labelled c) plus column sum (predicted c).
        denominator = ops.sum(self.confusion, axis=0) + ops.sum(self.confusion, axis=1)
        present = ops.cast(denominator > 0, self.confusion.dtype)
        f1 = ops.where(denominator > 0, 2 * true_positives / ops.maximum(denominator, 1), 0)
        return ops.sum(f1) / ops.maximum(ops.sum(present), 1)

    def reset_state(self):
        self.confusion.assign(keras.ops.zeros_like(self.confusion))

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


class BestEpoch(keras.callbacks.Callback):
    """Keeps the best epoch by one validation metric: checkpoint, early stopping, restore.

    One callback for all three, so the saved `best.keras`, the epoch early
    stopping counts from and the weights training ends with cannot disagree.
    An epoch is better when its monitored value is better, or equal with a
    lower validation loss. The best-so-far record lives in a JSON file beside
    the checkpoint, so a resumed run (`--resume`) compares against the epochs
    before the interruption. At the end of training, however it ended (the
    last epoch, early stopping, the time budget), the model gets the best
    epoch's weights back.
    """

    def __init__(self, checkpoint_path, record_path, monitor="val_accuracy", patience=0, verbose=1):
        super().__init__()
        if monitor not in MONITOR_MODES:
            raise ValueError(
                f"Cannot select epochs on {monitor!r}: choose one of {', '.join(MONITOR_MODES)}."
            )
        self.checkpoint_path = os.fspath(checkpoint_path)
        self.record_path = os.fspath(record_path)
        self.monitor = monitor
        self.patience = patience
        self.verbose = verbose
        self.best = None  # {"epoch" (1-based), "monitor", "value", "val_loss", "epochs_without_improvement"}

    def on_train_begin(self, logs=None):
        self.best = read_best_epoch(self.record_path)

    def is_better(self, value, loss):
        if self.best is None:
            return True
        best_value, best_loss = self.best["value"], self.best["val_loss"]
        if value == best_value:
            return loss < best_loss
        return value > best_value if MONITOR_MODES[self.monitor] == "max" else value < best_value

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self.monitor not in logs:
            raise ValueError(
                f"Cannot select epochs on {self.monitor!r}: the epoch logged only {', '.join(sorted(logs))}."
            )
        value = float(logs[self.monitor])
        loss = float(logs.get("val_loss", np.nan))
        if self.is_better(value, loss):
            self.model.save(self.checkpoint_path)
            self.best = {
                "epoch": epoch + 1,
                "monitor": self.monitor,
                "value": value,
                "val_loss": loss,
                "epochs_without_improvement": 0,
            }
        else:
            self.best["epochs_without_improvement"] += 1
            if self.patience and self.best["epochs_without_improvement"] >= self.patience:
                self.model.stop_training = True
        # After the checkpoint: a kill in between leaves `best.keras` one
        # better epoch ahead of the record; the resumed run repeats that epoch.
        with open(self.record_path, "w") as record_file:
            json.dump(self.best, record_file, indent=2)

    def on_train_end(self, logs=None):
        if self.best is None:
            return
        self.model.load_weights(self.checkpoint_path)
        if self.verbose:
            print(f"Kept epoch {describe_best_epoch(self.best)}.", flush=True)


def read_best_epoch(record_path):
    """The `BestEpoch` record in `record_path`, or None before the first epoch."""
    if not os.path.exists(record_path):
        return None
    with open(record_path) as record_file:
        return json.load(record_file)


TENSORBOARD_NOTICE = (
    "TensorBoard logs need TensorFlow; not written (history.csv and learning_curves.png are)."
)
_tensorboard_notice_said = False


def tensorboard(log_dir, verbose=1):
    """`[keras.callbacks.TensorBoard(log_dir)]`, or `[]` where TensorFlow is not installed
    (Keras writes the logs with it on every backend); then says so, once per process."""
    global _tensorboard_notice_said
    if importlib.util.find_spec("tensorflow") is not None:
        return [keras.callbacks.TensorBoard(log_dir)]
    if verbose and not _tensorboard_notice_said:
        print(TENSORBOARD_NOTICE, flush=True)
    _tensorboard_notice_said = True
    return []


def describe_best_epoch(best):
    return (
        f"{best['epoch']} ({best['monitor']} {best['value']:.4f}, val_loss {best['val_loss']:.4f})"
    )


class RunFolder:
    """Where one training run keeps its state, so `--resume` finds it again.

    `settings.json` (the run's settings), `vocabulary*.txt`, `backup/`
    (Keras' BackupAndRestore: weights, optimizer and epoch), `checkpoints/`
    (`last.keras` every epoch, `best.keras` the epoch `BestEpoch` keeps,
    `best_epoch.json` which epoch that is), `logs/`
    (TensorBoard), `history.csv` (every epoch, across resumes), and the
    evaluation outputs.
    """

    def __init__(self, path):
        self.path = os.fspath(path)

    def file(self, *parts):
        return os.path.join(self.path, *parts)

    @property
    def backup_dir(self):
        return self.file("backup")

    @property
    def history_path(self):
        return self.file("history.csv")

    @property
    def best_epoch_path(self):
        return self.file("checkpoints", "best_epoch.json")

    def read_best_epoch(self):
        """Which epoch the run keeps: `{"epoch", "monitor", "value", "val_loss", ...}`, or None."""
        return read_best_epoch(self.best_epoch_path)

    def has_backup(self):
        return os.path.isdir(self.backup_dir) and bool(os.listdir(self.backup_dir))

    def start_fresh(self):
        """Removes what a previous run left that a new run would otherwise pick up."""
        import shutil

        for name in ("backup", "checkpoints", "logs"):
            shutil.rmtree(self.file(name), ignore_errors=True)
        if os.path.exists(self.history_path):
            os.remove(self.history_path)
        os.makedirs(self.path, exist_ok=True)

    def callbacks(self, monitor="val_loss", patience=None, verbose=1):
        """Backup (for `--resume`), checkpoints, TensorBoard, history, and the
        best epoch by `monitor` (its checkpoint, early stopping after
        `patience` epochs without a better one, its weights restored at the end)."""
        os.makedirs(self.file("checkpoints"), exist_ok=True)
        callbacks = [
            # Before the backup: a kill between the two then repeats an epoch
            # (read_history keeps its last row) rather than losing its row.
            # Appends, so the curve after a resume still starts at epoch 1.
            keras.callbacks.CSVLogger(self.history_path, append=True),
            keras.callbacks.ModelCheckpoint(self.file("checkpoints", "last.keras")),
            BestEpoch(
                self.file("checkpoints", "best.keras"),
                self.best_epoch_path,
                monitor=monitor,
                patience=patience or 0,
                verbose=verbose,
            ),
            *tensorboard(self.file("logs"), verbose),
            keras.callbacks.BackupAndRestore(self.backup_dir, save_freq="epoch"),
        ]
        return callbacks

    def read_history(self):
        """`history.csv` as a Keras-style `{metric: [per-epoch values]}`."""
        if not os.path.exists(self.history_path):
            return {}
        with open(self.history_path, newline="") as history_file:
            rows = list(csv.DictReader(history_file))
        # A resumed run may repeat an epoch that was logged but not backed up.
        by_epoch = {int(row["epoch"]): row for row in rows}
        history = {}
        for epoch in sorted(by_epoch):
            for key, value in by_epoch[epoch].items():
                if key != "epoch":
                    history.setdefault(key, []).append(float(value))
        return history
