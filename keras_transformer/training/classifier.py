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

from keras_transformer.data.tokens import (
    CLASSIFIER_TOKEN_SETTINGS,
    CLASSIFIER_VOCABULARY,
    ClassificationTokens,
    TokenizedClassificationData,
    classifier_input_length,
    copy_vocabularies,
    settings_from_tokens,
)
from keras_transformer.models import TransformerClassifier
from keras_transformer.text.vocabulary import read_vocabulary
from keras_transformer.training.batching import ArrayBatches
from keras_transformer.training.callbacks import FitScheduleToBudget, MacroF1, RunFolder
from keras_transformer.training.data_defaults import (
    check_chosen,
    choices_from_record,
    choices_record,
    classifier_settings_from_counts,
    classifier_tokenization_from_data,
)
from keras_transformer.training.distribute import (
    compile_with_xla,
    dtype_policy,
    strategy_scope,
    worker_run_dir,
)
from keras_transformer.training.evaluation import (
    classification_report,
    format_classification_report,
)
from keras_transformer.training.fitting import build_optimizer, learning_rate_schedule
from keras_transformer.training.linear import fit_logistic_regression
from keras_transformer.training.losses import WarmupCosine
from keras_transformer.training.pretraining import (
    clear_pretraining,
    pretrain_encoder,
    pretraining_started,
)
from keras_transformer.training.runs import (
    draw_plot,
    fit_in_folder,
    save_model_and_curves,
    save_settings,
    saved_run_or_fresh_start,
    say,
)
from keras_transformer.training.settings import check_settings

METRICS_FILE = "metrics.json"  # written once a run finished
# beside the bag of n-grams' logits (`add_bag_of_ngrams`)
TRANSFORMER_WEIGHTS = (
    0.0,
    0.25,
    0.5,
    0.75,
    1.0,
)
MONITORS = ("val_accuracy", "val_macro_f1", "val_loss")  # what `--monitor` selects the epoch on
# `--ngram-units`: the bag of n-grams' feature families (`BagOfNgrams.adapt`), or a choice on validation
# between both and the words alone: the pieces add rare stems and punctuation, but can dilute the words.
NGRAM_UNITS = {
    "pieces": [("pieces",)],
    "words": [("words",)],
    "both": [("pieces", "words")],
    "choose": [("pieces", "words"), ("words",)],
}
WORD_BUCKETS = 262139  # `BagOfNgrams.num_word_buckets` where words are features


@dataclasses.dataclass
class ClassifierSettings:
    """Everything that shapes a classifier run; saved with the run for `--resume`.

    The `FROM_DATA` fields left None are chosen from the training texts
    (`keras_transformer.training.data_defaults`); `max_length` caps the
    chosen `sequence_length`.
    """

    FROM_DATA = (
        "vocabulary_size",
        "sequence_length",
        "batch_size",
        "warmup_fraction",
        "ngram_l2",
        "ngram_length",
    )

    epochs: int = 12
    batch_size: int = None
    sequence_length: int = None
    max_length: int = 512
    vocabulary_size: int = None
    num_layers: int = 1
    d_model: int = 128
    num_heads: int = 4
    intermediate_dim: int = 256
    dropout: float = 0.3
    pooling: str = "max"
    learning_rate: float = 1e-3
    weight_decay: float = 0.01
    warmup_fraction: float = None
    clip_norm: float = 1.0
    patience: int = 4
    monitor: str = "val_accuracy"  # one of MONITORS; the validation loss breaks ties
    seed: int = 1337
    mixed_precision: str = "off"  # "off", "float16" or "bfloat16"
    jit_compile: bool = False  # XLA
    # Masked-token pretraining of the encoder before fine-tuning (0 = none).
    pretrain_epochs: int = 0
    # A logistic regression on the TF-IDF of WordPiece unigrams and bigrams
    # (`BagOfNgrams`), fit after the Transformer and added to its logits at a
    # weight chosen on validation: True, False, or a dict of `BagOfNgrams`
    # arguments.
    bag_of_ngrams: object = True
    ngram_l2: float = None  # the bag of n-grams' L2 penalty (`BagOfNgrams`' l2)
    # Fit it again on training + validation once validation chose (`add_bag_of_ngrams`).
    ngram_refit: bool = True
    ngram_units: str = "choose"  # one of NGRAM_UNITS
    # The tokens the bag of n-grams reads, beyond sequence_length for long texts.
    ngram_length: int = None

    def validate(self):
        check_settings(self)
        if self.monitor not in MONITORS:
            raise ValueError(
                f"`monitor` must be one of {', '.join(MONITORS)}, got {self.monitor!r}."
            )
        if self.learning_rate <= 0:
            raise ValueError(f"`learning_rate` must be positive, got {self.learning_rate}.")
        if self.warmup_fraction is not None and not 0.0 <= self.warmup_fraction < 1.0:
            raise ValueError(f"`warmup_fraction` must be in [0, 1), got {self.warmup_fraction}.")
        if not isinstance(self.bag_of_ngrams, (bool, dict)):
            raise ValueError(
                f"`bag_of_ngrams` must be True, False or a dict of BagOfNgrams arguments, "
                f"got {self.bag_of_ngrams!r}."
            )
        if self.ngram_l2 is not None and not (
            isinstance(self.ngram_l2, (int, float)) and self.ngram_l2 >= 0
        ):
            raise ValueError(f"`ngram_l2` must be a number of at least 0, got {self.ngram_l2!r}.")
        if self.ngram_length is not None and not (
            isinstance(self.ngram_length, int)
            and not isinstance(self.ngram_length, bool)
            and self.ngram_length > 0
        ):
            raise ValueError(
                f"`ngram_length` must be a positive integer, got {self.ngram_length!r}."
            )
        if self.ngram_units not in NGRAM_UNITS:
            raise ValueError(
                f"`ngram_units` must be one of {', '.join(NGRAM_UNITS)}, got {self.ngram_units!r}."
            )
        if not isinstance(self.ngram_refit, bool):
            raise ValueError(f"`ngram_refit` must be True or False, got {self.ngram_refit!r}.")
        if not isinstance(self.pretrain_epochs, int) or self.pretrain_epochs < 0:
            raise ValueError(
                f"`pretrain_epochs` must be an integer of at least 0, got {self.pretrain_epochs!r}."
            )
        return self


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


def tokenize_classification_data(data, settings, vocabulary_dir, verbose=1, unlabeled_texts=()):
    """Builds the vocabulary into `vocabulary_dir`, chooses the settings that
    fix the tokens (`vocabulary_size`, `sequence_length`) where `settings`
    leaves them None, and encodes every split.

    Args:
        data: a `ClassificationData`.
        settings: a `ClassifierSettings`; not changed.
        vocabulary_dir: where `vocabulary.txt` goes (a run folder, or the
            token folder being written).
        verbose: say what is built (the chosen values are the caller's to say).
        unlabeled_texts: more texts for the vocabulary.

    Returns:
        A `TokenizedClassificationData` named as `data`.
    """
    from keras_transformer.text.wordpiece import (
        WordPieceTokenizer,
        build_vocabulary,
        save_vocabulary,
    )

    unlabeled_texts = list(unlabeled_texts)
    vocabulary_path = os.path.join(vocabulary_dir, CLASSIFIER_VOCABULARY)

    def build_tokenizer(vocabulary_size):
        # Unlabelled texts shape the vocabulary too; the lengths are the labelled texts'.
        say(
            verbose,
            f"Building a WordPiece vocabulary from {len(data.train) + len(unlabeled_texts)} texts...",
        )
        save_vocabulary(
            build_vocabulary([*data.train.texts, *unlabeled_texts], vocabulary_size),
            vocabulary_path,
        )
        return WordPieceTokenizer(vocabulary_path)

    settings, chosen = classifier_tokenization_from_data(
        settings, data.train.texts, build_tokenizer
    )
    return encode_classification_data(data, settings, vocabulary_path, choices_record(chosen))


def encode_classification_data(data, settings, vocabulary_path, chosen_from_data=None):
    """`data` encoded with the vocabulary at `vocabulary_path`, to the
    `sequence_length` (or the longer `ngram_length`) and with the pooling of
    `settings` (all chosen), as a `TokenizedClassificationData` named as `data`."""
    import tensorflow as tf

    from keras_transformer.text.wordpiece import WordPieceTokenizer

    tokenizer = WordPieceTokenizer(vocabulary_path)
    add_cls = settings.pooling == "cls"

    def encode(split):
        token_ids = tokenizer.encode(
            tf.constant(split.texts, tf.string), classifier_input_length(settings), add_cls=add_cls
        )
        return ClassificationTokens(token_ids.numpy(), np.asarray(split.labels, np.int32))

    return TokenizedClassificationData(
        name=data.name,
        source_name=data.name,
        settings={name: getattr(settings, name) for name in CLASSIFIER_TOKEN_SETTINGS},
        chosen_from_data=chosen_from_data or {},
        vocabulary_files={CLASSIFIER_VOCABULARY: vocabulary_path},
        class_names=list(data.class_names),
        train=encode(data.train),
        validation=encode(data.validation),
        test=encode(data.test),
    )


def _train_classifier(
    data, settings, folder, run_dir, resume, time_budget_minutes, verbose, strategy, unlabeled_texts
):
    vocabulary_path = folder.file(CLASSIFIER_VOCABULARY)
    tokens = data if isinstance(data, TokenizedClassificationData) else None
    if tokens is not None and (unlabeled_texts or settings.pretrain_epochs):
        raise ValueError(
            f"{tokens.name} holds tokens, and pretraining (--pretrain-epochs, --unlabeled) needs the raw texts: "
            "train from the data source instead."
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
        settings = saved_classifier_settings(saved)
        if tokens is None:
            tokens = encode_classification_data(data, settings, vocabulary_path)
        else:
            settings_from_tokens(settings, tokens)  # raises if the folder was tokenized otherwise
    else:
        settings.validate()
        clear_pretraining(folder)
        if tokens is None:
            tokens = tokenize_classification_data(
                data, settings, folder.path, verbose, unlabeled_texts
            )
        else:
            copy_vocabularies(tokens, folder.path)
        settings = settings_from_tokens(settings, tokens)
        settings, counted = classifier_settings_from_counts(settings, len(tokens.train))
        chosen = choices_from_record(tokens.chosen_from_data) + counted
        for choice in chosen:
            say(verbose, choice.line())
        save_settings(
            folder,
            settings.validate(),
            class_names=tokens.class_names,
            data=tokens.name,
            chosen_from_data=choices_record(chosen),
        )
    keras.utils.set_random_seed(settings.seed)
    steps_per_epoch = math.ceil(len(tokens.train) / settings.batch_size)
    model = build_classifier_model(
        settings,
        len(read_vocabulary(vocabulary_path)),
        len(data.class_names),
        steps_per_epoch,
        strategy,
    )
    # Tokens encoded for a bag of n-grams that reads further than this model are cut to what it reads.
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
    train_ids, train_labels = tokens.train.token_ids, tokens.train.labels
    validation_ids, validation_labels = tokens.validation.token_ids, tokens.validation.labels
    test_ids, test_labels = tokens.test.token_ids, tokens.test.labels

    if model.ngrams is not None:
        if model.ngrams.num_word_buckets:
            model.ngrams.set_vocabulary(read_vocabulary(vocabulary_path))
        model.ngrams.adapt(train_ids)
    if settings.pretrain_epochs:
        # pretraining masks raw texts
        from keras_transformer.text.wordpiece import (
            WordPieceTokenizer,
        )

        time_budget_minutes = pretrain_encoder(
            model,
            settings,
            WordPieceTokenizer(vocabulary_path),
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
        _batches(train_ids, train_labels, settings.batch_size, shuffle_seed=settings.seed),
        _batches(validation_ids, validation_labels, settings.batch_size),
        time_budget_minutes=time_budget_minutes,
        verbose=verbose,
        callbacks=[FitScheduleToBudget(learning_rate_schedule(model), time_budget_minutes)],
    )
    if fitted is None:
        return None  # the chief evaluates and writes the results
    combination = None
    if fitted.model.ngrams is not None and not fitted.model.ngrams.trainable:
        combination = add_bag_of_ngrams(fitted.model, settings, tokens, verbose)

    # Batch by batch: `predict` would wrap the batches with the first ones' widths (`as_tf_dataset`).
    probabilities = np.concatenate(
        [
            fitted.model.predict_on_batch(token_ids)
            for token_ids, _ in _batches(test_ids, test_labels, settings.batch_size)
        ]
    )
    report = classification_report(test_labels, np.argmax(probabilities, axis=-1), data.class_names)
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
        data.class_names,
        folder.file("confusion_matrix.png"),
    )
    save_model_and_curves(folder, fitted)
    say(verbose, format_classification_report(report))
    return ClassifierRun(
        model=fitted.model,
        class_names=list(data.class_names),
        report=report,
        epochs_completed=report["epochs_completed"],
        stopped_by_time_budget=fitted.stopped_by_time_budget,
        training_seconds=fitted.training_seconds,
        run_dir=os.fspath(run_dir),
    )


def add_bag_of_ngrams(model, settings, tokens, verbose=1):
    """Fits `model.ngrams` (all zeros, frozen while the Transformer trained)
    as a logistic regression on the training split (its `l2` the penalty), then weighs the
    Transformer's logits beside it: the head is scaled by the weight of
    `TRANSFORMER_WEIGHTS` whose sum does best on validation by
    `settings.monitor` (the validation loss breaks ties; 0 keeps the
    regression alone). Two models trained apart err apart, which a sum
    trained as one model does not get. Where `settings.ngram_units` offers
    more than one set of feature families (`NGRAM_UNITS`), each is fit and
    the best pair of families and weight is kept. With `settings.ngram_refit`
    the regression is then fit again on the training and validation texts
    (the penalty scaled to keep its `C`): validation has chosen all it
    chooses. `_train_classifier` calls it once the kept epoch's weights are
    back, unless the bag was given `trainable=True` (then `fit` trained it).

    Returns:
        What was done, as a dict for `metrics.json`.
    """
    ngrams, train, validation = model.ngrams, tokens.train, tokens.validation
    transformer_logits, labels = _validation_outputs(
        model,
        tokens,
        settings.batch_size,
        lambda ids: np.log(np.maximum(model.predict_on_batch(ids), 1e-30)),
    )
    metric = settings.monitor.removeprefix("val_")

    def rank(scores):
        return (-scores["loss"] if metric == "loss" else scores[metric], -scores["loss"])

    def best_value(scores_by_weight):
        return (min if metric == "loss" else max)(
            scores[metric] for scores in scores_by_weight.values()
        )

    candidates = NGRAM_UNITS[settings.ngram_units] if ngrams.num_word_buckets else [("pieces",)]
    tried = {}
    for features in candidates:
        ngrams.adapt(train.token_ids, features=features)
        linear = fit_logistic_regression(ngrams, train.token_ids, train.labels, ngrams.l2)
        ngram_logits, _ = _validation_outputs(model, tokens, settings.batch_size, ngrams)
        tried[features] = (
            linear,
            {
                weight: _validation_scores(ngram_logits + weight * transformer_logits, labels)
                for weight in TRANSFORMER_WEIGHTS
            },
        )
    features, best = max(
        ((features, weight) for features in candidates for weight in TRANSFORMER_WEIGHTS),
        key=lambda pair: rank(tried[pair[0]][1][pair[1]]),
    )
    linear, scores = tried[features]
    model.head.kernel.assign(keras.ops.convert_to_numpy(model.head.kernel) * best)
    model.head.bias.assign(keras.ops.convert_to_numpy(model.head.bias) * best)
    record = {
        "features": list(features),
        "transformer_weight": best,
        "validation": {str(weight): scores[weight] for weight in TRANSFORMER_WEIGHTS},
        "logistic_regression": dataclasses.asdict(linear),
    }
    if len(candidates) > 1:
        record["validation_by_features"] = {
            "+".join(option): {
                str(weight): tried[option][1][weight] for weight in TRANSFORMER_WEIGHTS
            }
            for option in candidates
        }
    say(
        verbose,
        f"Bag of n-grams ({' and '.join(features)}): a logistic regression fit in {linear.seconds:.1f} s "
        f"({linear.iterations} iterations, training accuracy {linear.train_accuracy:.4f}); the Transformer's "
        f"logits added at weight {best} (validation {metric} "
        + ", ".join(f"{weight}: {scores[weight][metric]:.4f}" for weight in TRANSFORMER_WEIGHTS)
        + ")"
        + "".join(
            f"; {' and '.join(option)}: at best {best_value(tried[option][1]):.4f}"
            for option in candidates
            if option != features
        )
        + ").",
    )
    if settings.ngram_refit:
        token_ids = _stacked_ids(train.token_ids, validation.token_ids)
        ngrams.adapt(token_ids, features=features)
        refit = fit_logistic_regression(
            ngrams,
            token_ids,
            np.concatenate([train.labels, validation.labels]),
            ngrams.l2 * len(train) / (len(train) + len(validation)),
        )
        record["refit_on_train_and_validation"] = dataclasses.asdict(refit)
        say(
            verbose,
            f"Fit again on the {len(train)} training and {len(validation)} validation texts in "
            f"{refit.seconds:.1f} s.",
        )
    elif features != candidates[-1]:
        # The last fit was another family's: fit the chosen one again (L-BFGS from zeros: the same optimum).
        ngrams.adapt(train.token_ids, features=features)
        fit_logistic_regression(ngrams, train.token_ids, train.labels, ngrams.l2)
    return record


def _stacked_ids(*arrays):
    """0-padded id arrays one below the other, padded to the widest."""
    width = max(array.shape[1] for array in arrays)
    return np.concatenate(
        [np.pad(array, ((0, 0), (0, width - array.shape[1]))) for array in arrays]
    )


def _validation_outputs(model, tokens, batch_size, outputs_of):
    """`outputs_of(token_ids)` on the validation split, batch by batch, with the labels in the same order."""
    outputs, labels = [], []
    for token_ids, batch_labels in _batches(
        tokens.validation.token_ids, tokens.validation.labels, batch_size
    ):
        outputs.append(np.asarray(keras.ops.convert_to_numpy(outputs_of(token_ids)), np.float64))
        labels.append(np.asarray(batch_labels))
    return np.concatenate(outputs), np.concatenate(labels)


def _validation_scores(logits, labels):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    predicted = np.argmax(logits, axis=1)
    macro_f1 = classification_report(labels, predicted, list(range(logits.shape[1])))["macro_f1"]
    return {
        "accuracy": float(np.mean(predicted == labels)),
        "macro_f1": float(macro_f1),
        "loss": float(-np.mean(log_probabilities[np.arange(len(labels)), labels])),
    }


def build_classifier_model(settings, vocabulary_size, num_classes, steps_per_epoch, strategy=None):
    """The built and compiled `TransformerClassifier` that `train_classifier` trains,
    with a `WarmupCosine` learning rate sized by `settings.epochs`.

    Created in `strategy`'s scope (its variables then live on every replica)
    under `settings.mixed_precision`'s dtype policy, compiled with XLA when
    `settings.jit_compile`. Under mixed_float16, `compile` wraps the
    optimizer in a `keras.optimizers.LossScaleOptimizer`.
    """
    check_chosen(settings, "sequence_length", "warmup_fraction")
    return build_compiled_model(
        settings,
        TransformerClassifier,
        settings.epochs * steps_per_epoch,
        loss="sparse_categorical_crossentropy",
        # Objects, not "accuracy": Keras builds a metric named by a string
        # inside the first traced train step, which then traces twice.
        make_metrics=lambda: [
            keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
            *([MacroF1(num_classes)] if settings.monitor == "val_macro_f1" else []),
        ],
        strategy=strategy,
        vocabulary_size=vocabulary_size,
        num_classes=num_classes,
        pooling=settings.pooling,
        bag_of_ngrams=bag_of_ngrams_arguments(settings),
        ngram_length=settings.ngram_length if settings.bag_of_ngrams is not False else None,
    )


def saved_classifier_settings(saved):
    """The `ClassifierSettings` in a run's `settings.json` (as `saved_run_or_fresh_start` reads it)."""
    # A run saved before the bag of n-grams existed has none, and one saved before its word
    # features has only the pieces': their checkpoints lack those weights.
    return ClassifierSettings(
        **{"bag_of_ngrams": False, "ngram_units": "pieces", **saved["settings"]}
    )


def bag_of_ngrams_arguments(settings):
    """The `bag_of_ngrams` argument of `TransformerClassifier` for `settings`:
    None, or `BagOfNgrams` arguments: `ngram_l2` as `l2`, with a bias (the
    regression's intercept), word features unless `ngram_units` is
    `"pieces"`, frozen (`add_bag_of_ngrams` fits it), unless the dict says
    otherwise."""
    if settings.bag_of_ngrams is False:
        return None
    given = {} if settings.bag_of_ngrams is True else dict(settings.bag_of_ngrams)
    if "l2" not in given:
        check_chosen(settings, "ngram_l2")
        given["l2"] = settings.ngram_l2
    words = {} if settings.ngram_units == "pieces" else {"num_word_buckets": WORD_BUCKETS}
    return {"use_bias": True, "trainable": False, **words, **given}


def build_compiled_model(
    settings, model_class, total_steps, loss, make_metrics, strategy=None, **model_arguments
):
    """A `model_class` with the encoder sizes of `settings` and `model_arguments`,
    built and compiled with `build_adamw` over `total_steps`, ready for `fit`.

    Created in `strategy`'s scope under `settings.mixed_precision`'s dtype
    policy, with the metrics `make_metrics()` returns (created in that scope
    too), compiled with XLA when `settings.jit_compile`.
    """
    with strategy_scope(strategy), dtype_policy(settings.mixed_precision):
        model = model_class(
            sequence_length=settings.sequence_length,
            num_layers=settings.num_layers,
            d_model=settings.d_model,
            num_heads=settings.num_heads,
            intermediate_dim=settings.intermediate_dim,
            dropout=settings.dropout,
            **model_arguments,
        )
        # BackupAndRestore loads weights before the first batch, so they must exist.
        model.build((None, settings.sequence_length))
        model.compile(
            optimizer=build_adamw(settings, total_steps),
            loss=loss,
            metrics=make_metrics(),
            jit_compile=compile_with_xla(settings.jit_compile),
        )
        build_optimizer(model)
    return model


def build_adamw(settings, total_steps):
    """The AdamW of `settings` (weight decay, clipping) with a `WarmupCosine` over `total_steps`."""
    check_chosen(settings, "warmup_fraction")
    return keras.optimizers.AdamW(
        learning_rate=WarmupCosine(settings.learning_rate, total_steps, settings.warmup_fraction),
        weight_decay=settings.weight_decay,
        clipnorm=settings.clip_norm,
    )


def _batches(token_ids, labels, batch_size, shuffle_seed=None):
    """`ArrayBatches` of `(token_ids, labels)`, padding trimmed; reshuffled every epoch with a seed."""
    return ArrayBatches((token_ids, labels), batch_size, seed=shuffle_seed)
