"""Training a `TransformerClassifier` from texts: vocabulary, fit, evaluation.

`apps/train_classifier.py` parses flags into a `ClassifierSettings` and calls
`train_classifier`; `benchmarks/classifier_quality.py` calls it too, so the
benchmark measures exactly what users run.
Mixed precision, XLA and tf.distribute strategies come from
`keras_transformer.training.distribute`; across machines, `fit_multi_worker`
stands in for `fit`.
"""

import dataclasses
import json
import math
import os

import keras
import numpy as np

from keras_transformer.data.checkpoint_files import read_vocabulary_lines
from keras_transformer.data.tokens import (
    CLASSIFIER_VOCABULARY,
    TokenizedClassificationData,
    check_checkpoint_tokens,
    copy_vocabularies,
    settings_from_tokens,
)
from keras_transformer.models import TransformerClassifier
from keras_transformer.text.vocabulary import read_vocabulary
from keras_transformer.training.batching import ArrayBatches
from keras_transformer.training.callbacks import FitScheduleToBudget
from keras_transformer.training.classifier.bag_of_ngrams import add_bag_of_ngrams
from keras_transformer.training.classifier.data_rules import (
    CHECKPOINT_SIZES,
    classifier_settings_from_counts,
    classifier_settings_from_token_ids,
)
from keras_transformer.training.classifier.evaluation import (
    classification_report,
    format_classification_report,
)
from keras_transformer.training.classifier.model import build_classifier_model
from keras_transformer.training.classifier.pretraining import (
    clear_pretraining,
    pretrain_encoder,
    pretraining_started,
)
from keras_transformer.training.classifier.settings import ClassifierSettings
from keras_transformer.training.classifier.tokenizing import (
    encode_classification_data,
    tokenize_classification_data,
)
from keras_transformer.training.compiling import learning_rate_schedule
from keras_transformer.training.data_rules import choices_from_record, choices_record
from keras_transformer.training.distribute import worker_run_dir
from keras_transformer.training.runs import (
    METRICS_FILE,
    RunFolder,
    draw_plot,
    fit_in_folder,
    save_model_and_curves,
    save_settings,
    saved_run_or_fresh_start,
    say,
)


@dataclasses.dataclass
class ClassifierRun:
    """What `train_classifier` hands back."""

    model: TransformerClassifier
    class_names: list
    report: dict
    epochs_completed: int
    stopped_by_time_budget: bool
    training_seconds: float
    run_dir: str


# With --lora-rank, beside model.keras: the adapters, head and bag alone (`save_adapters`).
LORA_ADAPTERS_FILE = "adapters.npz"


def train_classifier(
    data,
    settings,
    run_dir,
    resume=False,
    time_budget_minutes=None,
    verbose=1,
    strategy=None,
    unlabeled_texts=(),
):
    """Builds the vocabulary, trains with `fit`, evaluates on the test split.

    Args:
        data: a `keras_transformer.data.ClassificationData`, or the
            `TokenizedClassificationData` of `tokenize_classification_data` or
            of a token folder (`keras_transformer.data.tokens`): then its
            vocabulary and the settings tokenization fixed are the run's.
        settings: a `ClassifierSettings`.
        run_dir: folder for the run's vocabulary, backup, checkpoints, logs,
            history, report and plots.
        resume: continue from the run folder's last backup (weights, optimizer
            and epoch); the saved settings and vocabulary are used.
        time_budget_minutes: stop training after this much wall-clock time,
            then evaluate as usual.
        verbose: Keras verbosity (progress bars at 1).
        strategy: a `tf.distribute.Strategy` from
            `keras_transformer.training.distribute.make_strategy`, or None.
            Under a multi-worker strategy every worker calls this with the
            same data and settings; only the chief writes `run_dir`,
            evaluates and returns a `ClassifierRun`; the others return None.
        unlabeled_texts: more texts for the vocabulary and, with
            `settings.pretrain_epochs`, for pretraining (give the same to a
            resume); raw data only.
    """
    with worker_run_dir(run_dir, strategy, resume=resume) as own_run_dir:
        return _train_classifier(
            data,
            settings,
            RunFolder(own_run_dir),
            run_dir,
            resume,
            time_budget_minutes,
            verbose,
            strategy,
            list(unlabeled_texts),
        )


def _train_classifier(
    data, settings, folder, run_dir, resume, time_budget_minutes, verbose, strategy, unlabeled_texts
):
    settings, tokens = _settings_and_tokens(
        data, settings, folder, run_dir, resume, verbose, unlabeled_texts
    )
    keras.utils.set_random_seed(settings.seed)
    model, tokens = _model_and_its_tokens(settings, tokens, folder, strategy)
    if settings.pretrain_epochs:
        # Needs TensorFlow, as pretraining does: imported only where a run pretrains, so that
        # a run from a token folder trains without it.
        from keras_transformer.text.wordpiece import WordPieceTokenizer

        time_budget_minutes = pretrain_encoder(
            model,
            settings,
            WordPieceTokenizer(folder.file(CLASSIFIER_VOCABULARY)),
            [*data.train.texts, *unlabeled_texts],
            data.validation.texts,
            folder,
            strategy,
            time_budget_minutes,
            verbose,
        )
    fitted = fit_in_folder(
        model,
        strategy,
        folder,
        settings,
        ArrayBatches(
            (tokens.train.token_ids, tokens.train.labels),
            settings.batch_size,
            seed=settings.seed,
            bucket_width=settings.bucket_width,
        ),
        ArrayBatches((tokens.validation.token_ids, tokens.validation.labels), settings.batch_size),
        time_budget_minutes=time_budget_minutes,
        verbose=verbose,
        callbacks=[FitScheduleToBudget(learning_rate_schedule(model), time_budget_minutes)],
    )
    if fitted is None:
        return None  # the chief evaluates and writes the results
    combination = None
    if fitted.model.ngrams is not None and not fitted.model.ngrams.trainable:
        combination = add_bag_of_ngrams(fitted.model, settings, tokens, verbose)
    report = _test_report(fitted, settings, tokens, folder, combination)
    say(verbose, format_classification_report(report))
    return ClassifierRun(
        model=fitted.model,
        class_names=list(tokens.class_names),
        report=report,
        epochs_completed=report["epochs_completed"],
        stopped_by_time_budget=fitted.stopped_by_time_budget,
        training_seconds=fitted.training_seconds,
        run_dir=os.fspath(run_dir),
    )


def _settings_and_tokens(data, settings, folder, run_dir, resume, verbose, unlabeled_texts):
    """The run's settings and tokens: those it saved, to resume; else `settings` with the
    values chosen from the data (said and saved), the folder ready for a new run."""
    tokens = data if isinstance(data, TokenizedClassificationData) else None
    if tokens is not None:
        # Before any file is written: tokens are for one vocabulary, ours or a checkpoint's.
        check_checkpoint_tokens(tokens, settings.pretrained)
    if tokens is not None and (unlabeled_texts or settings.pretrain_epochs):
        raise ValueError(
            f"{tokens.name} holds tokens, and pretraining (--pretrain-epochs, --unlabeled) needs "
            "the raw texts: train from the data source instead."
        )
    saved = saved_run_or_fresh_start(
        folder,
        run_dir,
        resume,
        METRICS_FILE,
        verbose,
        earlier_phase_started=pretraining_started(folder),
    )
    if saved is not None:
        if saved["class_names"] != data.class_names:
            raise ValueError(
                f"Cannot resume {run_dir}: it was trained on classes {saved['class_names']}, "
                f"the data now has {data.class_names}."
            )
        settings = ClassifierSettings(**saved["settings"])
        if tokens is None:
            return settings, encode_classification_data(
                data, settings, folder.file(CLASSIFIER_VOCABULARY)
            )
        settings_from_tokens(settings, tokens)  # raises if the folder was tokenized otherwise
        return settings, tokens
    settings.validate()
    clear_pretraining(folder)
    if tokens is None:
        tokens = tokenize_classification_data(data, settings, folder.path, verbose, unlabeled_texts)
    else:
        copy_vocabularies(tokens, folder.path)
    settings = settings_from_tokens(settings, tokens)
    if settings.pretrained is not None:  # the checkpoint fixed the encoder's sizes too
        settings = dataclasses.replace(
            settings,
            **{name: tokens.chosen_from_data[name]["value"] for name in CHECKPOINT_SIZES},
        )
    settings, counted = classifier_settings_from_counts(settings, len(tokens.train))
    settings, from_ids = classifier_settings_from_token_ids(settings, tokens.train.token_ids)
    chosen = choices_from_record(tokens.chosen_from_data) + counted + from_ids
    for choice in chosen:
        say(verbose, choice.line())
    save_settings(
        folder,
        settings.validate(),
        class_names=tokens.class_names,
        data=tokens.name,
        chosen_from_data=choices_record(chosen),
    )
    return settings, tokens


def _model_and_its_tokens(settings, tokens, folder, strategy):
    """The compiled model, its bag of n-grams adapted, and `tokens` cut to what it reads
    (tokens encoded for a bag of n-grams that reads further than this model)."""
    # A checkpoint's vocabulary is not one of ours (no [START], [END]): read as it is.
    vocabulary = (read_vocabulary if settings.pretrained is None else read_vocabulary_lines)(
        folder.file(CLASSIFIER_VOCABULARY)
    )
    model = build_classifier_model(
        settings,
        len(vocabulary),
        len(tokens.class_names),
        math.ceil(len(tokens.train) / settings.batch_size),
        strategy,
    )
    tokens = dataclasses.replace(
        tokens,
        **{
            split: dataclasses.replace(
                getattr(tokens, split),
                token_ids=getattr(tokens, split).token_ids[:, : model.input_length],
            )
            for split in ("train", "validation", "test")
        },
    )
    if model.ngrams is not None:
        if model.ngrams.num_word_buckets:
            model.ngrams.set_vocabulary(vocabulary)
        model.ngrams.adapt(tokens.train.token_ids)
    return model, tokens


def _test_report(fitted, settings, tokens, folder, combination):
    """The test split's `classification_report` with what the run did, written with its
    confusion matrix, the model and the learning curves into `folder`."""
    test = tokens.test
    # Batch by batch: `predict` would wrap the batches with the first ones' widths
    # (`as_tf_dataset`).
    probabilities = np.concatenate(
        [
            fitted.model.predict_on_batch(token_ids)
            for token_ids, _ in ArrayBatches((test.token_ids, test.labels), settings.batch_size)
        ]
    )
    report = classification_report(
        test.labels, np.argmax(probabilities, axis=-1), tokens.class_names
    )
    report.update(
        {
            "data": tokens.name,
            "kept_epoch": folder.read_best_epoch(),
            "split": "test",
            "epochs_completed": len(fitted.history.get("loss", [])),
            "stopped_by_time_budget": fitted.stopped_by_time_budget,
            "training_seconds": round(fitted.training_seconds, 1),
            "settings": dataclasses.asdict(settings),
            **({"bag_of_ngrams": combination} if combination is not None else {}),
        }
    )
    with open(folder.file(METRICS_FILE), "w") as metrics_file:
        json.dump(report, metrics_file, indent=2)
    draw_plot(
        "plot_confusion_matrix",
        np.asarray(report["confusion_matrix"]),
        tokens.class_names,
        folder.file("confusion_matrix.png"),
    )
    save_model_and_curves(folder, fitted)
    if settings.lora_rank is not None:
        fitted.model.save_adapters(folder.file(LORA_ADAPTERS_FILE))
    return report
