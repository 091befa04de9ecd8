"""Tiny classifier and translator runs from made-up NumPy ids through the run-folder flow.

What `train_classifier` and `train_translator` do after tokenization
(`fit_in_folder` with the `RunFolder` callbacks, the time budget, the best
epoch, history, `val_chrf`, the samples, the model and its curves), on any
backend and without TensorFlow: tests/training/test_without_tensorflow.py
runs them in a subprocess where TensorFlow cannot be imported.
"""

import numpy as np

from keras_transformer.text.vocabulary import END, RESERVED_TOKENS, START, detokenize

VOCABULARY = [
    *RESERVED_TOKENS,
    *(f"w{index}" for index in range(33)),
    *(f"##s{index}" for index in range(4)),
]
NUM_CLASSES = 3


class Crash(Exception):
    pass


def crash_after_epoch(epoch):
    """A callback that stops the process's `fit` after `epoch` (0-based) is backed up."""
    import keras

    class CrashAfter(keras.callbacks.Callback):
        def on_epoch_end(self, ended, logs=None):
            if ended == epoch:
                raise Crash(f"after epoch {epoch}")

    return CrashAfter()


def random_rows(rng, count, width, shortest=2):
    rows = np.zeros((count, width), np.int32)
    for row, length in zip(rows, rng.integers(shortest, width + 1, size=count)):
        row[:length] = rng.integers(len(RESERVED_TOKENS), len(VOCABULARY), size=length)
    return rows


def classifier_arrays(seed=0, count=96, width=16):
    """(ids, labels): the label is the first id's remainder, so there is something to learn.
    Rows are long enough that batches have few widths: each width costs JAX a compilation."""
    ids = random_rows(np.random.default_rng(seed), count, width, shortest=width - 3)
    return ids, (ids[:, 0] % NUM_CLASSES).astype(np.int32)


def run_classifier(run_dir, epochs=2, crash_after=None, time_budget_minutes=None):
    """Fits a tiny classifier in `run_dir` (resuming its backup); returns
    `(FitResult or None, folder)`."""
    import keras

    from keras_transformer.training.batching import ArrayBatches
    from keras_transformer.training.callbacks import FitScheduleToBudget
    from keras_transformer.training.classifier.model import build_classifier_model
    from keras_transformer.training.classifier.settings import ClassifierSettings
    from keras_transformer.training.compiling import learning_rate_schedule
    from keras_transformer.training.runs import RunFolder, fit_in_folder, save_model_and_curves

    settings = ClassifierSettings(
        epochs=epochs,
        batch_size=16,
        sequence_length=16,
        vocabulary_size=len(VOCABULARY),
        num_layers=1,
        d_model=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
        warmup_fraction=0.1,
        ngram_l2=1e-4,
        ngram_buckets=1009,
        monitor="val_accuracy",
    ).validate()
    keras.utils.set_random_seed(settings.seed)
    folder = RunFolder(run_dir)
    if not folder.has_backup():
        folder.start_fresh()
    train_ids, train_labels = classifier_arrays(0)
    validation_ids, validation_labels = classifier_arrays(1, count=32)
    model = build_classifier_model(settings, len(VOCABULARY), NUM_CLASSES, steps_per_epoch=6)
    try:
        fitted = fit_in_folder(
            model,
            None,
            folder,
            settings,
            ArrayBatches((train_ids, train_labels), settings.batch_size, seed=settings.seed),
            ArrayBatches((validation_ids, validation_labels), settings.batch_size),
            time_budget_minutes=time_budget_minutes,
            verbose=0,
            callbacks=[
                FitScheduleToBudget(learning_rate_schedule(model), time_budget_minutes),
                *([crash_after_epoch(crash_after)] if crash_after is not None else []),
            ],
        )
    except Crash:
        return None, folder
    save_model_and_curves(folder, fitted)
    return fitted, folder


def translator_arrays(seed=0, count=96, width=10):
    """(source ids `[N, width]`, target ids `[N, width + 1]`): each target is its source
    reversed, between `[START]` and `[END]`."""
    sources = random_rows(np.random.default_rng(seed), count, width - 1, shortest=width - 4)
    sources = np.pad(sources, [(0, 0), (0, 1)])
    targets = np.zeros((count, width + 1), np.int32)
    for source, target in zip(sources, targets):
        words = source[source != 0][::-1]
        target[: len(words) + 2] = [VOCABULARY.index(START), *words, VOCABULARY.index(END)]
    return sources, targets


def run_translator(run_dir, epochs=2, crash_after=None):
    """Fits a tiny translator in `run_dir` (resuming its backup), with `val_chrf`;
    returns `(FitResult or None, folder, samples)`, the samples `translate_ids` of 4 sources."""
    import keras

    from keras_transformer.training.runs import RunFolder, fit_in_folder, save_model_and_curves
    from keras_transformer.training.translator.model import build_compiled_translator
    from keras_transformer.training.translator.pipeline import (
        _translation_batches,
        _validation_chrf,
        translate_ids,
    )
    from keras_transformer.training.translator.settings import TranslatorSettings

    settings = TranslatorSettings(
        epochs=epochs,
        batch_size=16,
        sequence_length=10,
        vocabulary_size=len(VOCABULARY),
        target_vocabulary_size=len(VOCABULARY),
        num_layers=1,
        d_model=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
        source_word_dropout=0.0,
        label_smoothing=0.0,
        warmup_steps=10,
        schedule="inverse_sqrt",
        chrf_pairs=8,
        monitor="val_chrf",
    ).validate()
    keras.utils.set_random_seed(settings.seed)
    folder = RunFolder(run_dir)
    if not folder.has_backup():
        folder.start_fresh()
    train_sources, train_targets = translator_arrays(0)
    validation_sources, validation_targets = translator_arrays(1, count=16)
    references = detokenize(validation_targets, VOCABULARY)
    model = build_compiled_translator(settings, len(VOCABULARY), len(VOCABULARY))
    try:
        fitted = fit_in_folder(
            model,
            None,
            folder,
            settings,
            _translation_batches(train_sources, train_targets, settings, shuffle=True),
            _translation_batches(validation_sources, validation_targets, settings, shuffle=False),
            verbose=0,
            callbacks=[crash_after_epoch(crash_after)] if crash_after is not None else [],
            epoch_metrics=_validation_chrf(
                validation_sources, validation_targets, references, settings, VOCABULARY
            ),
        )
    except Crash:
        return None, folder, None
    save_model_and_curves(folder, fitted)
    return fitted, folder, translate_ids(fitted.model, validation_sources[:4], settings, VOCABULARY)
