"""Training a `Seq2SeqTransformer` from sentence pairs: vocabularies, fit, samples.

`apps/train_translator.py` parses flags into a `TranslatorSettings` and calls
`train_translator`. The run folder has the same layout as the classifier's
(`RunFolder`), so `--resume` and `--time-budget` behave the same.
Mixed precision, XLA and tf.distribute strategies come from
`keras_transformer.training.distribute`; across machines, `fit_multi_worker`
stands in for `fit`.
"""

import dataclasses
import json
import os

import keras
import numpy as np

from keras_transformer.data.tokens import (
    SHARED_VOCABULARY,
    SOURCE_VOCABULARY,
    TARGET_VOCABULARY,
    TRANSLATOR_TOKEN_SETTINGS,
    TokenizedTranslationData,
    TranslationTokens,
    copy_vocabularies,
    settings_from_tokens,
)
from keras_transformer.decoding import greedy_decode, greedy_decode_loop
from keras_transformer.models import Seq2SeqTransformer
from keras_transformer.text.padding import trim_shared_padding_array
from keras_transformer.text.vocabulary import END, START, detokenize, read_vocabulary
from keras_transformer.training.batching import ArrayBatches, batch_width_multiple
from keras_transformer.training.callbacks import FitScheduleToBudget, RunFolder
from keras_transformer.training.data_defaults import (
    check_chosen,
    choices_from_record,
    choices_record,
    target_word_count,
    translator_settings_from_counts,
    translator_tokenization_from_data,
)
from keras_transformer.training.distribute import (
    compile_with_xla,
    dtype_policy,
    strategy_scope,
    worker_run_dir,
)
from keras_transformer.training.fitting import build_optimizer, learning_rate_schedule
from keras_transformer.training.losses import (
    MaskedSparseCategoricalCrossentropy,
    TransformerSchedule,
    WarmupCosine,
    masked_accuracy,
)
from keras_transformer.training.runs import (
    fit_in_folder,
    save_model_and_curves,
    save_settings,
    saved_run_or_fresh_start,
    say,
)
from keras_transformer.training.settings import check_settings
from keras_transformer.training.translation_metrics import ValidationChrF, chrf_subset

SAMPLES_FILE = "samples.json"  # written once a run finished
MONITORS = ("val_chrf", "val_masked_accuracy", "val_loss")  # what `--monitor` selects the epoch on
SCHEDULES = ("inverse_sqrt", "cosine")


@dataclasses.dataclass
class TranslatorSettings:
    """Everything that shapes a translator run; saved with the run for `--resume`.

    The `FROM_DATA` fields left None are chosen from the training pairs
    (`keras_transformer.training.data_defaults`); `max_length` caps the
    chosen `sequence_length`. `vocabulary_size` is the source side's.
    """

    FROM_DATA = (
        "vocabulary_size",
        "target_vocabulary_size",
        "sequence_length",
        "num_layers",
        "d_model",
        "intermediate_dim",
        "dropout",
        "label_smoothing",
        "warmup_steps",
        "schedule",
        "patience",
    )

    epochs: int = 20
    batch_size: int = 64
    sequence_length: int = None
    max_length: int = 64
    vocabulary_size: int = None
    # None: chosen from the targets, or `vocabulary_size` when that was set.
    target_vocabulary_size: int = None
    num_layers: int = None
    # None: as many decoder blocks as encoder blocks (`num_layers`). A deep
    # encoder with a shallow decoder decodes faster: the encoder runs once.
    num_decoder_layers: int = None
    d_model: int = None
    num_heads: int = 4
    intermediate_dim: int = None
    dropout: float = None
    label_smoothing: float = None
    warmup_steps: int = None
    learning_rate_scale: float = 0.75
    clip_norm: float = 1.0
    patience: int = None  # None: 0 under the cosine schedule, else 3
    # chrF of greedy translations of `chrf_pairs` validation pairs: what the
    # user reads, where the loss and the teacher-forced token accuracy are
    # only proxies (issue 16). One of MONITORS; the validation loss breaks ties.
    monitor: str = "val_chrf"
    seed: int = 1337
    mixed_precision: str = "off"  # "off", "float16" or "bfloat16"
    jit_compile: bool = False  # XLA
    chrf_pairs: int = 200  # validation pairs translated each epoch for `val_chrf` (0: none)
    shared_vocabulary: bool = False  # one cased vocabulary for both sides, one tied embedding
    # "inverse_sqrt": the paper's warmup then 1/sqrt(step) (TransformerSchedule).
    # "cosine": the same warmup to the same peak, then a cosine that reaches 0
    # at the planned steps, or where a time budget ends (FitScheduleToBudget).
    # None: the corpus' size tier chooses.
    schedule: str = None

    def validate(self):
        extra = (
            "warmup_steps",
            "target_vocabulary_size",
            *(() if self.num_decoder_layers is None else ("num_decoder_layers",)),
        )
        check_settings(self, extra_integers=extra)
        if self.monitor not in MONITORS:
            raise ValueError(
                f"`monitor` must be one of {', '.join(MONITORS)}, got {self.monitor!r}."
            )
        if not isinstance(self.chrf_pairs, int) or self.chrf_pairs < 0:
            raise ValueError(
                f"`chrf_pairs` must be a non-negative integer, got {self.chrf_pairs!r}."
            )
        if self.monitor == "val_chrf" and self.chrf_pairs == 0:
            raise ValueError(
                "`monitor` val_chrf needs validation pairs to translate: `chrf_pairs` is 0."
            )
        if self.schedule is not None and self.schedule not in SCHEDULES:
            raise ValueError(
                f"`schedule` must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}."
            )
        if self.patience is not None and (not isinstance(self.patience, int) or self.patience < 0):
            raise ValueError(f"`patience` must be a non-negative integer, got {self.patience!r}.")
        if not isinstance(self.shared_vocabulary, bool):
            raise ValueError(
                f"`shared_vocabulary` must be True or False, got {self.shared_vocabulary!r}."
            )
        return self


@dataclasses.dataclass
class TranslatorRun:
    model: Seq2SeqTransformer
    settings: TranslatorSettings  # with the values chosen from the data (or resumed)
    samples: list
    epochs_completed: int
    stopped_by_time_budget: bool
    training_seconds: float
    run_dir: str

    # Made from the run folder when asked for: they need TensorFlow, which training from tokens does not.
    @property
    def source_tokenizer(self):
        return run_tokenizers(RunFolder(self.run_dir), self.settings)[0]

    @property
    def target_tokenizer(self):
        return run_tokenizers(RunFolder(self.run_dir), self.settings)[1]


def train_translator(
    data,
    settings,
    run_dir,
    resume=False,
    time_budget_minutes=None,
    verbose=1,
    num_samples=5,
    callbacks=(),
    strategy=None,
):
    """Builds one vocabulary per language, trains with `fit`, translates a few test sources.

    Args:
        data: a `keras_transformer.data.TranslationData`, or the
            `TokenizedTranslationData` of `tokenize_translation_data` or of a
            token folder (`keras_transformer.data.tokens`): then its
            vocabularies and the settings tokenization fixed are the run's.
        settings: a `TranslatorSettings`.
        run_dir: the run folder (vocabularies, backup, checkpoints, logs, history).
        resume: continue from the run folder's last backup with its saved settings.
        time_budget_minutes: stop training after this much wall-clock time.
        verbose: Keras verbosity.
        num_samples: test sources to translate (greedy) and print at the end.
        callbacks: more Keras callbacks for `fit` (benchmarks take snapshots).
        strategy: a `tf.distribute.Strategy` from
            `keras_transformer.training.distribute.make_strategy`, or None.
            Under a multi-worker strategy every worker calls this with the
            same data and settings; only the chief writes `run_dir` and
            returns a `TranslatorRun`; the others return None.
    """
    with worker_run_dir(run_dir, strategy, resume=resume) as own_run_dir:
        return _train_translator(
            data,
            settings,
            RunFolder(own_run_dir),
            run_dir,
            resume,
            time_budget_minutes,
            verbose,
            num_samples,
            callbacks,
            strategy,
        )


def tokenize_translation_data(data, settings, vocabulary_dir, verbose=1):
    """Builds the vocabularies into `vocabulary_dir`, chooses the settings that
    fix the tokens (the vocabulary sizes, `sequence_length`) where `settings`
    leaves them None, and encodes every split.

    Args:
        data: a `TranslationData`.
        settings: a `TranslatorSettings`; not changed.
        vocabulary_dir: where the vocabulary files go (a run folder, or the
            token folder being written).
        verbose: say what is built (the chosen values are the caller's to say).

    Returns:
        A `TokenizedTranslationData` named as `data`.
    """
    folder = RunFolder(vocabulary_dir)

    def build_tokenizers(source_vocabulary_size, target_vocabulary_size):
        say(verbose, f"Building WordPiece vocabularies from {len(data.train)} training pairs...")
        sizes = dataclasses.replace(
            settings,
            vocabulary_size=source_vocabulary_size,
            target_vocabulary_size=target_vocabulary_size,
        )
        build_run_vocabularies(folder, data, sizes)
        return run_tokenizers(folder, sizes)

    settings, chosen = translator_tokenization_from_data(
        settings, data.train.sources, data.train.targets, build_tokenizers
    )
    return encode_translation_data(data, settings, folder, choices_record(chosen))


def encode_translation_data(data, settings, vocabulary_folder, chosen_from_data=None):
    """`data` encoded with the vocabularies in `vocabulary_folder` (a `RunFolder`)
    at `settings.sequence_length`, as a `TokenizedTranslationData` named as `data`."""
    import tensorflow as tf

    source_tokenizer, target_tokenizer = run_tokenizers(vocabulary_folder, settings)

    def encode(split, keep_texts):
        source_ids = source_tokenizer.encode(
            tf.constant(split.sources), settings.sequence_length
        ).numpy()
        target_ids = target_tokenizer.encode(
            tf.constant(split.targets), settings.sequence_length + 1, add_start_end=True
        ).numpy()
        texts = (
            {"sources": list(split.sources), "targets": list(split.targets)} if keep_texts else {}
        )
        return TranslationTokens(source_ids, target_ids, **texts)

    files = (
        [SHARED_VOCABULARY]
        if settings.shared_vocabulary
        else [SOURCE_VOCABULARY, TARGET_VOCABULARY]
    )
    return TokenizedTranslationData(
        name=data.name,
        source_name=data.name,
        settings={name: getattr(settings, name) for name in TRANSLATOR_TOKEN_SETTINGS},
        chosen_from_data=chosen_from_data or {},
        vocabulary_files={file_name: vocabulary_folder.file(file_name) for file_name in files},
        source_language=data.source_language,
        target_language=data.target_language,
        train_target_words=target_word_count(data.train.targets),
        train=encode(data.train, keep_texts=False),
        validation=encode(data.validation, keep_texts=True),
        test=encode(data.test, keep_texts=True),
    )


def _train_translator(
    data,
    settings,
    folder,
    run_dir,
    resume,
    time_budget_minutes,
    verbose,
    num_samples,
    callbacks,
    strategy,
):
    tokens = data if isinstance(data, TokenizedTranslationData) else None
    saved = saved_run_or_fresh_start(folder, run_dir, resume, SAMPLES_FILE, verbose)
    if saved is not None:
        settings = saved_translator_settings(saved)
        if tokens is None:
            tokens = encode_translation_data(data, settings, folder)
        else:
            settings_from_tokens(settings, tokens)  # raises if the folder was tokenized otherwise
    else:
        settings.validate()
        if tokens is None:
            tokens = tokenize_translation_data(data, settings, folder.path, verbose)
        else:
            copy_vocabularies(tokens, folder.path)
        settings = settings_from_tokens(settings, tokens)
        settings, counted = translator_settings_from_counts(
            settings, len(tokens.train), tokens.train_target_words
        )
        chosen = choices_from_record(tokens.chosen_from_data) + counted
        for choice in chosen:
            say(verbose, choice.line())
        save_settings(
            folder,
            settings.validate(),
            data=tokens.name,
            source_language=tokens.source_language,
            target_language=tokens.target_language,
            chosen_from_data=choices_record(chosen),
        )
    keras.utils.set_random_seed(settings.seed)
    source_vocabulary, target_vocabulary = run_vocabularies(folder, settings)

    train_dataset = _translation_batches(
        tokens.train.source_ids, tokens.train.target_ids, settings, shuffle=True
    )
    validation_dataset = _translation_batches(
        tokens.validation.source_ids, tokens.validation.target_ids, settings, shuffle=False
    )

    model = build_compiled_translator(
        settings,
        len(source_vocabulary),
        len(target_vocabulary),
        strategy,
        total_steps=settings.epochs * len(train_dataset),
    )
    schedule = learning_rate_schedule(model)
    fit_schedule = (
        [FitScheduleToBudget(schedule, time_budget_minutes)]
        if isinstance(schedule, WarmupCosine)
        else []
    )
    fitted = fit_in_folder(
        model,
        strategy,
        folder,
        settings,
        train_dataset,
        validation_dataset,
        time_budget_minutes=time_budget_minutes,
        verbose=verbose,
        callbacks=[*fit_schedule, *callbacks],
        epoch_metrics=_validation_chrf(
            tokens.validation.source_ids,
            tokens.validation.target_ids,
            tokens.validation.targets,
            settings,
            target_vocabulary,
        ),
    )
    if fitted is None:
        return None  # the chief translates the samples and writes the results

    sources = tokens.test.sources[:num_samples]
    translations = translate_ids(
        fitted.model, tokens.test.source_ids[:num_samples], settings, target_vocabulary
    )
    samples = [
        {"source": source, "reference": reference, "translation": translation}
        for source, reference, translation in zip(sources, tokens.test.targets, translations)
    ]
    with open(folder.file(SAMPLES_FILE), "w", encoding="utf-8") as samples_file:
        json.dump(samples, samples_file, indent=2, ensure_ascii=False)
    save_model_and_curves(folder, fitted)
    for sample in samples:
        say(
            verbose,
            f"  source:      {sample['source']}\n  reference:   {sample['reference']}\n"
            f"  translation: {sample['translation']}\n",
        )
    return TranslatorRun(
        model=fitted.model,
        settings=settings,
        samples=samples,
        epochs_completed=len(fitted.history.get("loss", [])),
        stopped_by_time_budget=fitted.stopped_by_time_budget,
        training_seconds=fitted.training_seconds,
        run_dir=os.fspath(run_dir),
    )


def saved_translator_settings(saved):
    """The `TranslatorSettings` in a run's `settings.json` (as `saved_run_or_fresh_start` reads it)."""
    # A run saved before `val_chrf` existed resumes without it: a new column
    # would not match its history.csv's header.
    return TranslatorSettings(**{"chrf_pairs": 0, **saved["settings"]})


def build_run_vocabularies(folder, data, settings):
    """Learns the run's vocabularies from the training pairs into `folder` (read by `run_tokenizers`)."""
    from keras_transformer.text.wordpiece import build_vocabulary, save_vocabulary

    if settings.shared_vocabulary:
        # Cased, since its tokens are also the output.
        vocabulary = build_vocabulary(
            [*data.train.sources, *data.train.targets], settings.vocabulary_size, lower_case=False
        )
        save_vocabulary(vocabulary, folder.file(SHARED_VOCABULARY))
        return
    # Sources are lower-cased (less sparsity); targets keep case, since they are output.
    save_vocabulary(
        build_vocabulary(data.train.sources, settings.vocabulary_size),
        folder.file(SOURCE_VOCABULARY),
    )
    save_vocabulary(
        build_vocabulary(data.train.targets, settings.target_vocabulary_size, lower_case=False),
        folder.file(TARGET_VOCABULARY),
    )


def run_tokenizers(folder, settings):
    """The run's `(source, target)` tokenizers: one object twice with `shared_vocabulary`."""
    from keras_transformer.text.wordpiece import WordPieceTokenizer

    if settings.shared_vocabulary:
        tokenizer = WordPieceTokenizer(folder.file(SHARED_VOCABULARY), lower_case=False)
        return tokenizer, tokenizer
    return (
        WordPieceTokenizer(folder.file(SOURCE_VOCABULARY)),
        WordPieceTokenizer(folder.file(TARGET_VOCABULARY), lower_case=False),
    )


def run_vocabularies(folder, settings):
    """The run's `(source, target)` vocabularies as lists of tokens (no TensorFlow needed)."""
    if settings.shared_vocabulary:
        vocabulary = read_vocabulary(folder.file(SHARED_VOCABULARY))
        return vocabulary, vocabulary
    return read_vocabulary(folder.file(SOURCE_VOCABULARY)), read_vocabulary(
        folder.file(TARGET_VOCABULARY)
    )


def _validation_chrf(source_ids, target_ids, references, settings, vocabulary):
    """`[ValidationChrF]` on the run's seeded validation subset, or `[]` without `chrf_pairs`.

    `source_ids` and `target_ids` are the validation pairs encoded as for
    training, `references` their target texts, `vocabulary` the target's tokens.
    """
    if not settings.chrf_pairs or not len(references):
        return []
    subset = chrf_subset(len(references), settings.chrf_pairs, settings.seed)
    return [
        ValidationChrF(
            np.asarray(source_ids)[subset],
            np.asarray(target_ids)[subset],
            [references[index] for index in subset],
            vocabulary,
            max_output_length=settings.sequence_length,
            batch_size=settings.batch_size,
        )
    ]


def translate_ids(model, source_ids, settings, vocabulary):
    """Greedy translations of encoded sources (`[N, sequence_length]`) as text, on any backend.

    What the end-of-run samples show: `greedy_decode` on TensorFlow,
    `greedy_decode_loop` (the same tokens) elsewhere, detokenized with the
    target `vocabulary` (a list of tokens) as the export detokenizes.
    """
    start_id, end_id = vocabulary.index(START), vocabulary.index(END)
    if keras.backend.backend() == "tensorflow":
        token_ids = greedy_decode(
            model, source_ids, settings.sequence_length, start_id, end_id
        ).numpy()
    else:
        token_ids = greedy_decode_loop(
            model, source_ids, settings.sequence_length, start_id, end_id
        )
    return detokenize(token_ids, vocabulary)


def build_compiled_translator(
    settings, source_vocabulary_size, target_vocabulary_size, strategy=None, total_steps=None
):
    """`build_translator_model`, compiled for `fit` (Adam on `settings.schedule`, masked loss
    and accuracy) in `strategy`'s scope under `settings.mixed_precision`. The cosine
    schedule reaches 0 after `total_steps` (needed for it)."""
    with strategy_scope(strategy), dtype_policy(settings.mixed_precision):
        model = build_translator_model(settings, source_vocabulary_size, target_vocabulary_size)
        # Under mixed_float16, compile wraps the optimizer in a LossScaleOptimizer.
        model.compile(
            optimizer=keras.optimizers.Adam(
                learning_rate_schedule_of(settings, total_steps),
                beta_1=0.9,
                beta_2=0.98,
                epsilon=1e-9,
                clipnorm=settings.clip_norm,
            ),
            loss=MaskedSparseCategoricalCrossentropy(label_smoothing=settings.label_smoothing),
            # An object, not the bare function: Keras wraps a function into a
            # metric inside the first traced train step, which then traces twice.
            metrics=[keras.metrics.MeanMetricWrapper(masked_accuracy, name="masked_accuracy")],
            jit_compile=compile_with_xla(settings.jit_compile),
        )
        build_optimizer(model)
    return model


def learning_rate_schedule_of(settings, total_steps=None):
    """The `TransformerSchedule` of `settings`, or with `schedule` "cosine" a
    `WarmupCosine` over `total_steps` with the same warmup and peak."""
    check_chosen(settings, "schedule", "d_model", "warmup_steps")
    inverse_sqrt = TransformerSchedule(
        settings.d_model, settings.warmup_steps, settings.learning_rate_scale
    )
    if settings.schedule == "inverse_sqrt":
        return inverse_sqrt
    if total_steps is None:
        raise ValueError("The cosine schedule needs `total_steps`.")
    peak = float(keras.ops.convert_to_numpy(inverse_sqrt(settings.warmup_steps - 1)))
    return WarmupCosine(peak, total_steps, warmup_steps=settings.warmup_steps)


def build_translator_model(settings, source_vocabulary_size, target_vocabulary_size):
    """A built `Seq2SeqTransformer` of `settings`' sizes (what `train_translator` trains)."""
    check_chosen(
        settings, "sequence_length", "num_layers", "d_model", "intermediate_dim", "dropout"
    )
    model = Seq2SeqTransformer(
        source_vocabulary_size=source_vocabulary_size,
        target_vocabulary_size=target_vocabulary_size,
        # Targets carry [START] or [END] on top of `sequence_length` tokens.
        sequence_length=settings.sequence_length + 1,
        num_encoder_layers=settings.num_layers,
        num_decoder_layers=settings.num_decoder_layers or settings.num_layers,
        d_model=settings.d_model,
        num_heads=settings.num_heads,
        intermediate_dim=settings.intermediate_dim,
        dropout=settings.dropout,
        share_embeddings=settings.shared_vocabulary,
    )
    model.build()
    return model


def _translation_batches(source_ids, target_ids, settings, shuffle):
    """`ArrayBatches` of encoded pairs for `fit`, teacher-forced (`_teacher_forcing`).

    Training batches (`shuffle`) are reshuffled every epoch and grouped by
    length in bands of 8 tokens; validation batches keep the pairs' order.
    Either way an epoch is `ceil(N / batch_size)` batches, every pair once.
    """
    return ArrayBatches(
        (source_ids, target_ids),
        settings.batch_size,
        make_batch=_teacher_forcing,
        seed=settings.seed if shuffle else None,
        bucket_width=8 if shuffle else None,
    )


def _teacher_forcing(source_ids, target_ids):
    """`[START] y1 .. yn [END]` -> inputs `[START] y1 .. yn`, labels `y1 .. yn [END]`,
    without the padding columns the whole batch shares (NumPy batches)."""
    multiple = batch_width_multiple()
    labels = trim_shared_padding_array(target_ids[:, 1:], multiple=multiple)
    inputs = target_ids[:, : labels.shape[1]]
    return {
        "source_ids": trim_shared_padding_array(source_ids, multiple=multiple),
        "target_ids": inputs,
    }, labels
