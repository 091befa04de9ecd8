"""Callbacks and the run folder layout shared by the training applications."""

import csv
import os
import time

import keras


class TimeBudget(keras.callbacks.Callback):
    """Stops training cleanly once `minutes` of wall-clock time are spent.

    Checked after every batch (Keras 3 honours `stop_training` between
    batches), so a budget is overrun by at most one step. The run then goes on
    to evaluation and export as after a normal end.
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
        if self.minutes is None or self.exhausted:
            return
        if time.monotonic() - self._start >= self.minutes * 60:
            self.exhausted = True
            self.model.stop_training = True
            print(f"\nTime budget of {self.minutes:g} minutes spent: stopping training.", flush=True)


class RunFolder:
    """Where one training run keeps its state, so `--resume` finds it again.

    `settings.json` (the run's settings), `vocabulary*.txt`, `backup/`
    (Keras' BackupAndRestore: weights, optimizer and epoch), `checkpoints/`
    (`last.keras` every epoch, `best.keras` on validation loss), `logs/`
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

    def callbacks(self, monitor="val_loss", patience=None):
        """Backup (for `--resume`), checkpoints, TensorBoard, history, early stopping."""
        os.makedirs(self.file("checkpoints"), exist_ok=True)
        callbacks = [
            # Before the backup: a kill between the two then repeats an epoch
            # (read_history keeps its last row) rather than losing its row.
            # Appends, so the curve after a resume still starts at epoch 1.
            keras.callbacks.CSVLogger(self.history_path, append=True),
            keras.callbacks.ModelCheckpoint(self.file("checkpoints", "last.keras")),
            keras.callbacks.ModelCheckpoint(
                self.file("checkpoints", "best.keras"), monitor=monitor, save_best_only=True
            ),
            keras.callbacks.TensorBoard(self.file("logs")),
            keras.callbacks.BackupAndRestore(self.backup_dir, save_freq="epoch"),
        ]
        if patience:
            callbacks.append(
                keras.callbacks.EarlyStopping(
                    monitor=monitor, patience=patience, restore_best_weights=True
                )
            )
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
