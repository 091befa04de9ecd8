"""The run folder (`RunFolder`) and the flow every training pipeline shares
through it: resume or start over, save the settings, fit under a time budget
with the folder's callbacks, and leave the model and its learning curves in
the folder."""

import csv
import dataclasses
import json
import os
import shutil
import time

import keras

from keras_transformer.training.batching import ArrayBatches, FollowEpochs
from keras_transformer.training.callbacks import BestEpoch, TimeBudget, read_best_epoch, tensorboard
from keras_transformer.training.distribute import fit, is_chief

SETTINGS_FILE = "settings.json"
METRICS_FILE = "metrics.json"  # the test split's score, written once a run finished


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


def say(verbose, message):
    """Prints a line of the run's story unless training is silent (`verbose=0`)."""
    if verbose:
        print(message, flush=True)


def saved_run_or_fresh_start(
    folder, run_dir, resume, finished_file, verbose, earlier_phase_started=False
):
    """The saved settings file of the run to resume, or None once `folder` is ready for a new run.

    A run resumes when `resume` is asked for and the folder has a backup and
    its settings. Otherwise the folder is cleared for a new run, except that
    `resume` of a finished run (its `finished_file` written) is refused:
    starting over would wipe its checkpoints and results, because Keras drops
    the backup when training ends.

    Args:
        folder: the run's `RunFolder`.
        run_dir: the folder as the user named it, for messages.
        resume: whether the user asked to resume.
        finished_file: the file, in the folder, written once a run finished.
        verbose: whether to say what happens.
        earlier_phase_started: whether a phase before `fit_in_folder`
            (pretraining) left state to resume from, backup or not.

    Returns:
        The dict in `settings.json` (`{"settings": {...}, ...}`), or None.

    Raises:
        ValueError: `resume` of a finished run.
    """
    settings_path = folder.file(SETTINGS_FILE)
    if resume and (folder.has_backup() or earlier_phase_started) and os.path.exists(settings_path):
        with open(settings_path) as settings_file:
            saved = json.load(settings_file)
        say(verbose, f"Resuming {run_dir} with the settings and vocabularies it started with.")
        return saved
    if resume and os.path.exists(folder.file(finished_file)):
        raise ValueError(
            f"The run in {run_dir} already finished (see {folder.file(finished_file)}); "
            "there is nothing to resume. Drop --resume to train again from scratch, "
            "or pass another --run-dir."
        )
    if resume:
        say(verbose, f"Nothing to resume in {run_dir}: starting a new run.")
    folder.start_fresh()
    return None


def save_settings(folder, settings, **details):
    """Writes `settings.json`: the settings dataclass, for `--resume`, and `details` about
    the run."""
    with open(folder.file(SETTINGS_FILE), "w") as settings_file:
        json.dump({"settings": dataclasses.asdict(settings), **details}, settings_file, indent=2)


@dataclasses.dataclass
class FitResult:
    """What `fit_in_folder` hands the chief."""

    model: object  # the model to evaluate and save
    history: dict  # `RunFolder.read_history()`: every epoch, across resumes
    training_seconds: float
    stopped_by_time_budget: bool


def fit_in_folder(
    model,
    strategy,
    folder,
    settings,
    train_dataset,
    validation_dataset,
    time_budget_minutes=None,
    verbose=1,
    steps_per_epoch=None,
    callbacks=(),
    epoch_metrics=(),
):
    """Fits `settings.epochs` with a time budget and the folder's callbacks
    (backup, checkpoints, logs, history, the best epoch by `settings.monitor`
    with early stopping after `settings.patience`).

    `epoch_metrics` are callbacks that add validation metrics to each epoch's
    logs (e.g. `val_chrf`); they run first, so the time budget counts them
    and the history and the best epoch see what they add. Training batches
    given as `ArrayBatches` are told each epoch `fit` begins (`FollowEpochs`),
    so their order after a resume is the uninterrupted run's.

    Returns:
        A `FitResult` on the chief; None on the other workers of a
        multi-worker strategy (the chief writes the results).
    """
    time_budget = TimeBudget(time_budget_minutes)
    follow_epochs = [FollowEpochs(train_dataset)] if isinstance(train_dataset, ArrayBatches) else []
    callbacks = [
        *follow_epochs,
        *epoch_metrics,
        time_budget,
        *folder.callbacks(settings.monitor, settings.patience, verbose),
        *callbacks,
    ]
    started = time.monotonic()
    model = fit(
        model,
        strategy,
        train_dataset,
        validation_dataset,
        settings.epochs,
        steps_per_epoch=steps_per_epoch,
        callbacks=callbacks,
        verbose=verbose,
    )
    training_seconds = time.monotonic() - started
    if not is_chief(strategy):
        return None
    return FitResult(model, folder.read_history(), training_seconds, time_budget.exhausted)


def save_model_and_curves(folder, fitted):
    """`model.keras` and, when epochs were logged, `learning_curves.png`."""
    if fitted.history:
        draw_plot("plot_learning_curves", fitted.history, folder.file("learning_curves.png"))
    fitted.model.save(folder.file("model.keras"))


PLOTS_NOTICE = (
    "Plots need matplotlib (pip install matplotlib); not drawn (history.csv and metrics are "
    "written)."
)
_plots_notice_said = False


def draw_plot(name, *arguments):
    """`keras_transformer.plots.<name>(*arguments)`, or, where matplotlib is not
    installed (a training machine with the core install), a notice once per process."""
    global _plots_notice_said
    try:
        from keras_transformer import plots
    except ImportError:
        if not _plots_notice_said:
            print(PLOTS_NOTICE, flush=True)
        _plots_notice_said = True
        return
    getattr(plots, name)(*arguments)
