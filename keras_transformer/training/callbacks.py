"""The Keras callbacks both training pipelines fit with: time budget, schedule fitted to it,
the best epoch."""

import collections
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
        # {"epoch" (1-based), "monitor", "value", "val_loss", "epochs_without_improvement"}
        self.best = None

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
                f"Cannot select epochs on {self.monitor!r}: the epoch logged only "
                f"{', '.join(sorted(logs))}."
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


class RecentEpochWeights(keras.callbacks.Callback):
    """Keeps the trainable weights of the last `epochs` epochs, to average them after training.

    Averaging the weights of the last checkpoints of a run smooths out the
    noise of the last steps (Vaswani et al. 2017 averaged the last 5 or 20
    checkpoints of their translators). Copies live in memory, one per epoch
    kept; a resumed run keeps only the epochs since it resumed.

    Args:
        epochs: int. The most recent epochs to keep.
    """

    def __init__(self, epochs):
        super().__init__()
        if epochs < 1:
            raise ValueError(f"RecentEpochWeights keeps at least one epoch, got {epochs}.")
        self.epochs = epochs
        self._weights = collections.deque(maxlen=epochs)
        self._epoch_numbers = collections.deque(maxlen=epochs)

    @property
    def epoch_numbers(self):
        """The kept epochs, 1-based, oldest first."""
        return list(self._epoch_numbers)

    def on_epoch_end(self, epoch, logs=None):
        self._weights.append([keras.ops.convert_to_numpy(v) for v in self.model.trainable_weights])
        self._epoch_numbers.append(epoch + 1)

    def average(self, last=None):
        """The mean of the last `last` kept epochs' trainable weights (all kept by default), in
        `model.trainable_weights` order, for `set_trainable_weights`."""
        last = len(self._weights) if last is None else last
        if not 1 <= last <= len(self._weights):
            raise ValueError(
                f"Cannot average the last {last} epochs: {len(self._weights)} are kept."
            )
        recent = list(self._weights)[-last:]
        return [
            np.mean(np.stack(values), axis=0).astype(values[0].dtype) for values in zip(*recent)
        ]


def set_trainable_weights(model, values):
    """Assigns `values` (as `RecentEpochWeights.average` returns them) to `model.trainable_weights`."""
    for variable, value in zip(model.trainable_weights, values, strict=True):
        variable.assign(value)


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
