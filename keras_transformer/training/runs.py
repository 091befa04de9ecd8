"""The run-folder flow every training pipeline shares: resume or start over,
save the settings, fit under a time budget with the folder's callbacks, and
leave the model and its learning curves in the folder."""

import dataclasses
import json
import os
import time

from keras_transformer.training.batching import ArrayBatches, FollowEpochs
from keras_transformer.training.callbacks import TimeBudget
from keras_transformer.training.distribute import fit, is_chief

SETTINGS_FILE = "settings.json"


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
    """Writes `settings.json`: the settings dataclass, for `--resume`, and `details` about the run."""
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


PLOTS_NOTICE = "Plots need matplotlib (pip install matplotlib); not drawn (history.csv and metrics are written)."
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
