"""A small search over the classifier's configuration within one time budget.

`search_classifier` trains `trials` classifiers, each as `train_classifier`
trains one (its own run folder, early stopping, the bag of n-grams), and
keeps the one whose Transformer scores best on validation by
`settings.monitor` at its kept epoch (the validation loss breaks ties). The
searched fields are the Transformer's, and the bag's weight is chosen on
validation after it, so the Transformer's own score ranks the trials without
choosing on validation twice. The first trial is the settings as given.

From scratch, KerasTuner's random search draws the fields of `SEARCH_SPACE`
the caller did not fix. A pretrained checkpoint fixes the sizes, so its
search tries only peak learning rates, in order: the fine-tuning default
times each of `PRETRAINED_RATE_FACTORS`, as BERT's fine-tuning picks its
rate on validation. The texts are tokenized once, for every trial.

    RUN_DIR/               the kept trial's run folder, copied: what `keras-transformer export` exports
    RUN_DIR/search.json    every trial's values, validation scores, epochs and minutes
    RUN_DIR/search/        KerasTuner's state and each trial's own run folder
"""

import dataclasses
import json
import os
import shutil
import time

try:
    import keras_tuner
except ImportError as error:  # an optional dependency: only --search needs it
    raise ImportError(
        "--search needs KerasTuner: pip install keras-tuner "
        '(or "keras-transformer-toolkit[search]").'
    ) from error

from keras_transformer.data.tokens import TokenizedClassificationData
from keras_transformer.training.classifier.pipeline import train_classifier
from keras_transformer.training.classifier.tokenizing import tokenize_classification_data
from keras_transformer.training.runs import say
from keras_transformer.training.settings import flag_of

SEARCH_FILE = "search.json"

# Field: the values a trial draws from (the settings' own value joins them).
# `intermediate_dim` keeps its ratio to `d_model` unless fixed. [CLS] pooling
# is not searched: its tokens (a [CLS] first) are not the other poolings'.
SEARCH_SPACE = {
    "num_layers": (1, 2, 3),
    "d_model": (64, 128, 256),
    "dropout": (0.1, 0.2, 0.3, 0.4),
    "pooling": ("mean", "max"),
    "learning_rate": (3e-4, 5e-4, 1e-3, 2e-3),
}

# The peak rates a fine-tune tries, as multiples of the settings' rate, in the
# order tried: the two ends first, since which suits a corpus differs by
# corpus (benchmarks/BENCHMARKS.md, "Pretrained checkpoints").
PRETRAINED_RATE_FACTORS = (1, 4, 2)


@dataclasses.dataclass
class SearchTrial:
    """One configuration tried: its values, its validation score and how long it trained."""

    trial_id: str
    values: dict
    score: float  # validation `monitor`
    loss: float  # validation loss, which breaks ties
    epochs: int
    minutes: float


def search_classifier(
    data,
    settings,
    run_dir,
    trials,
    time_budget_minutes=None,
    verbose=1,
    fixed=(),
    resume=False,
    strategy=None,
):
    """Tries `trials` configurations of `settings`; keeps the best on validation.

    Args:
        data: a `keras_transformer.data.ClassificationData` (raw texts) or the
            `TokenizedClassificationData` of a token folder.
        settings: the `ClassifierSettings` of the first trial; the fields of
            `search_space(settings)` not in `fixed` vary in the others.
        run_dir: the folder the kept trial is copied into (see the module).
        trials: int, at least 1. How many configurations to train.
        time_budget_minutes: the whole search's budget, tokenization
            included: each trial gets an equal share of what is left when it
            starts. None: each trains for `settings.epochs` (or until early
            stopping).
        verbose: Keras verbosity; 0 silences KerasTuner too.
        fixed: names of the settings the user gave (flags): the search keeps
            them at their `settings` value.
        resume: a search does not resume; True raises.
        strategy: a search trains on one machine; a strategy raises.

    Returns:
        The kept trial's `ClassifierRun`, its `run_dir` set to `run_dir`.

    Raises:
        ValueError: `trials` below 1, `fixed` leaving nothing to vary, more
            trials than a checkpoint's learning rates, `resume`, pretraining,
            or a `strategy`.
    """
    _check_search(settings, run_dir, trials, fixed, resume, strategy)
    started = time.monotonic()
    search_dir = os.path.join(run_dir, "search")
    shutil.rmtree(search_dir, ignore_errors=True)
    os.makedirs(search_dir)
    if not isinstance(data, TokenizedClassificationData):
        data = tokenize_classification_data(data, settings, search_dir, verbose)
    direction = "min" if settings.monitor == "val_loss" else "max"
    # A checkpoint's few rates are tried in order; random draws could repeat one.
    oracle = (
        keras_tuner.oracles.RandomSearchOracle
        if settings.pretrained is None
        else keras_tuner.oracles.GridSearchOracle
    )
    tuner = ClassifierTuner(
        data=data,
        settings=settings,
        fixed=set(fixed),
        trials=trials,
        started=started,
        time_budget_minutes=time_budget_minutes,
        verbose=verbose,
        oracle=oracle(
            objective=keras_tuner.Objective(settings.monitor, direction=direction),
            max_trials=trials,
            seed=settings.seed,
        ),
        directory=run_dir,
        project_name="search",
        overwrite=False,
    )
    tuner.search(verbose=min(verbose, 1))
    if not tuner.finished:
        raise RuntimeError(f"No trial of the search in {search_dir} finished.")
    return _keep_best(tuner, settings.monitor, direction, run_dir, verbose)


def search_space(settings):
    """The fields a search of `settings` varies, each with its values in order:
    `SEARCH_SPACE` from scratch; the learning rate alone (`settings`' rate
    times `PRETRAINED_RATE_FACTORS`) for a pretrained checkpoint."""
    if settings.pretrained is None:
        return {
            name: tuple(sorted(set(choices) | {getattr(settings, name)}))
            for name, choices in SEARCH_SPACE.items()
        }
    return {
        "learning_rate": tuple(
            settings.learning_rate * factor for factor in PRETRAINED_RATE_FACTORS
        )
    }


def trial_settings(settings, hyperparameters, fixed):
    """`settings` with the `search_space` fields not in `fixed` drawn from
    `hyperparameters` (a `keras_tuner.HyperParameters`; a new field's
    default is the settings' value, so the first trial is `settings`)."""
    values = {}
    for name, choices in search_space(settings).items():
        current = getattr(settings, name)
        if name in fixed or current == "cls":
            continue
        values[name] = hyperparameters.Choice(name, list(choices), default=current)
    if "d_model" in values and "intermediate_dim" not in fixed:
        values["intermediate_dim"] = (
            settings.intermediate_dim * values["d_model"] // settings.d_model
        )
    return dataclasses.replace(settings, **values)


def validation_scores(run):
    """`(monitor, loss)` on validation of the Transformer `train_classifier`
    kept (its kept epoch), before any bag of n-grams is added."""
    kept = run.report["kept_epoch"]
    return float(kept["value"]), float(kept["val_loss"])


def format_search(finished, best, monitor):
    """A table of the trials, the kept one marked with `*`."""
    names = sorted({name for trial in finished for name in trial.values})
    header = ["trial", *names, monitor, "val_loss", "epochs", "minutes"]
    rows = [
        [
            trial.trial_id,
            *(
                f"{trial.values[name]:g}"
                if isinstance(trial.values[name], float)
                else str(trial.values[name])
                for name in names
            ),
            f"{trial.score:.4f}",
            f"{trial.loss:.4f}",
            str(trial.epochs),
            f"{trial.minutes:.1f}",
        ]
        for trial in finished
    ]
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    lines = [f"Search: {len(finished)} configurations, kept trial {best.trial_id} by {monitor}:"]
    for mark, row in [
        (" ", header),
        *(("*" if trial is best else " ", row) for trial, row in zip(finished, rows)),
    ]:
        lines.append(f"{mark} " + "  ".join(cell.rjust(width) for cell, width in zip(row, widths)))
    return "\n".join(lines)


def _keep_best(tuner, monitor, direction, run_dir, verbose):
    """Copies the best finished trial's run folder (by `monitor`, which `direction`
    optimizes) into `run_dir`, beside `search.json`; returns its `ClassifierRun`, its
    `run_dir` set to `run_dir`."""
    best = min(
        tuner.finished,
        key=lambda trial: (trial.score if direction == "min" else -trial.score, trial.loss),
    )
    run = tuner.runs[best.trial_id]
    _copy_run(run.run_dir, run_dir)
    with open(os.path.join(run_dir, SEARCH_FILE), "w") as search_file:
        json.dump(
            {
                "monitor": monitor,
                "kept": best.trial_id,
                "trials": [dataclasses.asdict(trial) for trial in tuner.finished],
            },
            search_file,
            indent=2,
        )
    say(verbose, format_search(tuner.finished, best, monitor))
    return dataclasses.replace(run, run_dir=os.fspath(run_dir))


def _check_search(settings, run_dir, trials, fixed, resume, strategy):
    """Raises ValueError for what a search does not do (see `search_classifier`)."""
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise ValueError(
            f"--search takes the number of configurations to try, at least 1; got {trials!r}."
        )
    if resume:
        raise ValueError(
            "--resume does not continue a --search: start the search again (or resume one trial's "
            f"run folder under {os.path.join(run_dir, 'search')} without --search)."
        )
    if strategy is not None:
        raise ValueError(
            "--search trains its trials one after the other on this machine: drop --distribute."
        )
    if settings.pretrain_epochs:
        raise ValueError(
            "--search does not pretrain its trials: drop --pretrain-epochs (or search without it)."
        )
    space = search_space(settings)
    kept_as_given = set(fixed) | ({"pooling"} if settings.pooling == "cls" else set())
    if not set(space) - kept_as_given:
        fields = {field.name: field for field in dataclasses.fields(settings)}
        flags = ", ".join(flag_of(fields[name]) or name for name in space)
        raise ValueError(f"--search varies {flags}, and every one is given: drop it or --search.")
    if settings.pretrained is not None and trials > len(PRETRAINED_RATE_FACTORS):
        factors = ", ".join(map(str, PRETRAINED_RATE_FACTORS))
        raise ValueError(
            f"--search with --pretrained tries at most {len(PRETRAINED_RATE_FACTORS)} peak "
            f"learning rates (the default times {factors}); got {trials}."
        )
    settings.validate()


def _copy_run(trial_dir, run_dir):
    """The trial's run folder's files into `run_dir`, replacing what an earlier run left there."""
    for name in os.listdir(trial_dir):
        source, target = os.path.join(trial_dir, name), os.path.join(run_dir, name)
        if os.path.isdir(target):
            shutil.rmtree(target)
        if os.path.isdir(source):
            shutil.copytree(source, target)
        else:
            shutil.copy2(source, target)


class ClassifierTuner(keras_tuner.Tuner):
    """Runs a trial as one `train_classifier` run in the trial's folder;
    `finished` lists the trials done, `runs` their `ClassifierRun`s by id."""

    def __init__(
        self, data, settings, fixed, trials, started, time_budget_minutes, verbose, **kwargs
    ):
        super().__init__(**kwargs)
        self.data, self.settings, self.fixed = data, settings, fixed
        self.trials, self.started, self.time_budget_minutes = trials, started, time_budget_minutes
        self.training_verbose = verbose
        self.finished, self.runs = [], {}

    def run_trial(self, trial, *args, **kwargs):
        settings = trial_settings(self.settings, trial.hyperparameters, self.fixed)
        budget = None
        if self.time_budget_minutes is not None:
            left = self.time_budget_minutes - (time.monotonic() - self.started) / 60
            budget = max(left, 0.0) / (self.trials - len(self.finished))
        trial_started = time.monotonic()
        run = train_classifier(
            self.data,
            settings,
            os.path.join(self.get_trial_dir(trial.trial_id), "run"),
            time_budget_minutes=budget,
            verbose=self.training_verbose,
        )
        score, loss = validation_scores(run)
        values = {
            name: getattr(settings, name)
            for name in search_space(self.settings)
            if name not in self.fixed
        }
        self.finished.append(
            SearchTrial(
                trial.trial_id,
                values,
                score,
                loss,
                run.epochs_completed,
                round((time.monotonic() - trial_started) / 60, 2),
            )
        )
        self.runs[trial.trial_id] = run
        return {self.settings.monitor: score}

    def save_model(self, trial_id, model, step=0):
        pass  # each trial's run folder holds its model

    def load_model(self, trial):
        return self.runs[trial.trial_id].model
