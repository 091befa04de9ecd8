"""Masked-token pretraining of the classifier's encoder.

Before fine-tuning, `train_classifier` (with `ClassifierSettings.pretrain_epochs`)
calls `pretrain_encoder`: a `MaskedLanguageModel` with the classifier's
embedding and encoder blocks learns to restore masked tokens of the training
texts and any unlabelled texts (`read_unlabeled_texts`), then hands its
embedding and blocks to the classifier. Pretraining keeps its own run folder,
`RUN_DIR/pretraining/` (backup, checkpoints, logs, history.csv), and leaves
its weights in `RUN_DIR/pretraining/pretrained_encoder.weights.h5` once done,
so `--resume` continues pretraining if it was cut short and skips it after.
Masking runs in `tf.data`: pretraining needs TensorFlow (imported where used).
"""

import dataclasses
import math
import os
import shutil
import time

import keras

from keras_transformer.data.errors import DataError
from keras_transformer.models import MaskedLanguageModel
from keras_transformer.text.padding import trim_shared_padding
from keras_transformer.text.vocabulary import MASK, RESERVED_TOKENS
from keras_transformer.training.callbacks import FitScheduleToBudget
from keras_transformer.training.classifier.model import build_compiled_model
from keras_transformer.training.compiling import learning_rate_schedule
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import masked_accuracy
from keras_transformer.training.runs import RunFolder, fit_in_folder, say

PRETRAINING_DIR = "pretraining"  # inside the run folder
PRETRAINED_WEIGHTS_FILE = (
    "pretrained_encoder.weights.h5"  # inside PRETRAINING_DIR, written when done
)
# The most of a --time-budget pretraining may take; fine-tuning gets the rest.
PRETRAINING_BUDGET_SHARE = 0.5

# BERT's recipe: 15% of the tokens are chosen; of those, 80% become [MASK],
# 10% a random token and 10% stay as they are (so the model cannot learn
# that only [MASK] positions need predicting).
MASK_RATE = 0.15
MASK_TOKEN_SHARE = 0.8
RANDOM_TOKEN_SHARE = 0.1
MASK_ID = RESERVED_TOKENS.index(MASK)
# Ids below this are the reserved tokens ([PAD], [CLS], ...): never chosen, never drawn.
FIRST_WORD_ID = len(RESERVED_TOKENS)


def read_unlabeled_texts(path):
    """The non-blank lines of a UTF-8 file, one text a line, stripped.

    Raises:
        DataError: the file is missing or unreadable, not UTF-8, or has no text.
    """
    try:
        with open(path, "rb") as text_file:
            raw = text_file.read()
    except FileNotFoundError:
        raise DataError(f"Unlabeled texts file not found: {path}") from None
    except OSError as error:
        raise DataError(f"Cannot read the unlabeled texts file {path}: {error.strerror}") from None
    try:
        content = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise DataError(
            f"The unlabeled texts file {path} is not UTF-8: byte {raw[error.start]:#04x} on "
            f"line {line}."
        ) from None
    texts = [line.strip() for line in content.splitlines() if line.strip()]
    if not texts:
        raise DataError(f"The unlabeled texts file {path} has no text (one text a line).")
    return texts


def mask_tokens(token_ids, seed, vocabulary_size):
    """BERT-style masking of a batch of ids.

    Args:
        token_ids: int32 `[B, T]`, 0-padded.
        seed: int `[2]`, for the stateless random ops (a batch's masks
            depend on it alone).
        vocabulary_size: random replacements are drawn among the
            non-reserved ids below it.

    Returns:
        `(inputs, labels)`, both int32 `[B, T]`: `inputs` with the chosen
        positions replaced, `labels` the original id at the chosen positions
        and 0 elsewhere, so a loss that skips id 0 counts only them. Reserved
        tokens (`[PAD]`, `[CLS]`, ...) are never chosen.
    """
    import tensorflow as tf

    token_ids = tf.cast(token_ids, tf.int32)
    choose_seed, how_seed, random_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))
    shape = tf.shape(token_ids)
    chosen = tf.logical_and(
        token_ids >= FIRST_WORD_ID, tf.random.stateless_uniform(shape, choose_seed) < MASK_RATE
    )
    how = tf.random.stateless_uniform(shape, how_seed)
    random_ids = tf.random.stateless_uniform(
        shape, random_seed, minval=FIRST_WORD_ID, maxval=vocabulary_size, dtype=tf.int32
    )
    replacement = tf.where(
        how < MASK_TOKEN_SHARE,
        MASK_ID,
        tf.where(how < MASK_TOKEN_SHARE + RANDOM_TOKEN_SHARE, random_ids, token_ids),
    )
    inputs = tf.where(chosen, replacement, token_ids)
    labels = tf.where(chosen, token_ids, 0)
    return inputs, labels


def masked_batches(token_ids, batch_size, vocabulary_size, seed, training):
    """A dataset of `mask_tokens` batches of `token_ids` (`[N, T]`).

    With `training`, the rows are reshuffled and masked afresh every epoch
    (dynamic masking, as RoBERTa); otherwise every pass gives the same
    batches and masks, so the validation loss compares across epochs.
    """
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(token_ids)
    if training:
        dataset = dataset.shuffle(len(token_ids), seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.batch(batch_size).map(trim_shared_padding)
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=training).batch(2)
    return (
        tf.data.Dataset.zip(dataset, seeds)
        .map(lambda ids, batch_seed: mask_tokens(ids, batch_seed, vocabulary_size))
        .prefetch(tf.data.AUTOTUNE)
    )


def build_masked_lm(settings, vocabulary_size, steps_per_epoch, strategy=None):
    """The built and compiled `MaskedLanguageModel` for a classifier of `settings`,
    with the classifier's optimizer and a `WarmupCosine` sized by `settings.pretrain_epochs`."""
    return build_compiled_model(
        settings,
        MaskedLanguageModel,
        settings.pretrain_epochs * steps_per_epoch,
        loss=MaskedSparseCategoricalCrossentropy(),
        make_metrics=lambda: [
            keras.metrics.MeanMetricWrapper(masked_accuracy, name="masked_accuracy")
        ],
        strategy=strategy,
        vocabulary_size=vocabulary_size,
    )


def pretraining_folder(folder):
    """The pretraining phase's `RunFolder` inside the run's `folder`."""
    return RunFolder(folder.file(PRETRAINING_DIR))


def pretraining_started(folder):
    """Whether the run in `folder` pretrained, or began to (something for `--resume` to keep)."""
    pretraining = pretraining_folder(folder)
    return pretraining.has_backup() or os.path.exists(pretraining.file(PRETRAINED_WEIGHTS_FILE))


def pretrain_encoder(
    classifier,
    settings,
    tokenizer,
    texts,
    validation_texts,
    folder,
    strategy=None,
    time_budget_minutes=None,
    verbose=1,
):
    """Pretrains a masked LM of the classifier's shape and copies its encoder into `classifier`.

    A finished pretraining (its weights file in the run folder) is loaded
    rather than run again; a cut-short one continues from its backup. A new
    run must clear `RUN_DIR/pretraining/` first (`RunFolder.start_fresh`
    leaves it alone): use `clear_pretraining`.

    Args:
        classifier: the built `TransformerClassifier` about to be fine-tuned.
        settings: its `ClassifierSettings` (`pretrain_epochs` epochs).
        tokenizer: the run's `WordPieceTokenizer`.
        texts: the texts to learn from (training split and unlabelled).
        validation_texts: the validation split's texts (the masked LM's
            validation loss picks its kept epoch).
        folder: the run's `RunFolder`.
        strategy: as for `train_classifier`.
        time_budget_minutes: the whole run's budget, or None; pretraining
            stops after `PRETRAINING_BUDGET_SHARE` of it.
        verbose: Keras verbosity.

    Returns:
        The minutes of `time_budget_minutes` left for fine-tuning (None without a budget).
    """
    started = time.monotonic()
    pretraining = pretraining_folder(folder)
    weights_path = pretraining.file(PRETRAINED_WEIGHTS_FILE)
    if os.path.exists(weights_path):
        say(verbose, f"Pretraining already done: loading {weights_path}.")
        model = build_masked_lm(settings, tokenizer.vocabulary_size, 1, strategy)
        model.load_weights(weights_path)
        model.copy_encoder_to(classifier)
        return time_budget_minutes
    budget = None if time_budget_minutes is None else time_budget_minutes * PRETRAINING_BUDGET_SHARE
    model = _fit_masked_lm(
        settings, tokenizer, texts, validation_texts, pretraining, strategy, budget, verbose
    )
    model.copy_encoder_to(classifier)
    # Every worker, in its own run folder: a resumed cluster must agree on skipping pretraining.
    model.save_weights(weights_path)
    if time_budget_minutes is None:
        return None
    # TimeBudget wants a positive budget; one this small stops fine-tuning after its first step.
    return max(time_budget_minutes - (time.monotonic() - started) / 60, 1e-9)


def _fit_masked_lm(
    settings, tokenizer, texts, validation_texts, pretraining, strategy, budget, verbose
):
    """The masked LM fit in the `pretraining` folder (resumed from its backup) within
    `budget` minutes (None: no limit)."""
    train_ids = _encoded(tokenizer, texts, settings)
    steps_per_epoch = math.ceil(len(train_ids) / settings.batch_size)
    model = build_masked_lm(settings, tokenizer.vocabulary_size, steps_per_epoch, strategy)
    say(
        verbose,
        f"Pretraining the encoder on {len(train_ids)} texts: masked-token prediction, "
        f"{settings.pretrain_epochs} epochs"
        + (f", at most {budget:g} minutes." if budget else "."),
    )
    if not pretraining.has_backup():
        pretraining.start_fresh()  # drops the history of epochs a kill left without a backup
    phase_settings = dataclasses.replace(
        settings, epochs=settings.pretrain_epochs, monitor="val_loss", patience=0
    )
    vocabulary_size, batch_size, seed = (
        tokenizer.vocabulary_size,
        settings.batch_size,
        settings.seed,
    )
    fitted = fit_in_folder(
        model,
        strategy,
        pretraining,
        phase_settings,
        masked_batches(train_ids, batch_size, vocabulary_size, seed, training=True),
        masked_batches(
            _encoded(tokenizer, validation_texts, settings),
            batch_size,
            vocabulary_size,
            seed,
            training=False,
        ),
        time_budget_minutes=budget,
        verbose=verbose,
        callbacks=[FitScheduleToBudget(learning_rate_schedule(model), budget)],
    )
    return fitted.model if fitted is not None else model  # None on the other workers of a cluster


def _encoded(tokenizer, texts, settings):
    """`texts` as id rows of the classifier's `sequence_length` (with [CLS] where it pools so)."""
    import tensorflow as tf

    return tokenizer.encode(
        tf.constant(texts, tf.string), settings.sequence_length, add_cls=settings.pooling == "cls"
    ).numpy()


def clear_pretraining(folder):
    """Removes what an earlier run's pretraining left in `folder` (for a new run)."""
    shutil.rmtree(pretraining_folder(folder).path, ignore_errors=True)
