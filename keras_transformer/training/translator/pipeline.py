"""Training a `Seq2SeqTransformer` from sentence pairs: vocabularies, fit, samples.

`apps/train_translator.py` parses flags into a `TranslatorSettings` and calls
`train_translator`. The run folder has the same layout as the classifier's
(`RunFolder`), so `--resume` and `--time-budget` behave the same.
Mixed precision, XLA and tf.distribute strategies come from
`keras_transformer.training.distribute`; across machines, `fit_multi_worker`
stands in for `fit`.
"""

import csv
import dataclasses
import json
import os

import keras
import numpy as np

from keras_transformer.data.tokens import (
    TokenizedTranslationData,
    copy_vocabularies,
    settings_from_tokens,
)
from keras_transformer.models import Seq2SeqTransformer
from keras_transformer.text.padding import trim_shared_padding_array
from keras_transformer.training.batching import ArrayBatches, batch_width_rounding
from keras_transformer.training.callbacks import (
    FitScheduleToBudget,
    RecentEpochWeights,
    set_trainable_weights,
)
from keras_transformer.training.compiling import learning_rate_schedule
from keras_transformer.training.data_rules import choices_from_record, choices_record
from keras_transformer.training.distribute import worker_run_dir
from keras_transformer.training.runs import (
    METRICS_FILE,
    RunFolder,
    fit_in_folder,
    save_model_and_curves,
    save_settings,
    saved_run_or_fresh_start,
    say,
)
from keras_transformer.training.schedules import WarmupCosine
from keras_transformer.training.translator.chrf import ValidationChrF, chrf_subset, corpus_chrf
from keras_transformer.training.translator.data_rules import translator_settings_from_counts
from keras_transformer.training.translator.greedy import GreedyTranslator
from keras_transformer.training.translator.model import build_compiled_translator
from keras_transformer.training.translator.scoring import corpus_scores
from keras_transformer.training.translator.settings import TranslatorSettings
from keras_transformer.training.translator.tokenizing import (
    encode_translation_data,
    run_tokenizers,
    run_vocabularies,
    tokenize_translation_data,
)

SAMPLES_FILE = "samples.json"  # written once a run finished
TEST_TRANSLATIONS_FILE = "test_translations.tsv"  # the test split, as metrics.json scores it


@dataclasses.dataclass
class TranslatorRun:
    model: Seq2SeqTransformer
    settings: TranslatorSettings  # with the values chosen from the data (or resumed)
    samples: list
    metrics: dict  # the test split's score, as metrics.json records it
    epochs_completed: int
    stopped_by_time_budget: bool
    training_seconds: float
    run_dir: str

    # Made from the run folder when asked for: they need TensorFlow, which training from
    # tokens does not.
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
    settings, tokens = _settings_and_tokens(data, settings, folder, run_dir, resume, verbose)
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
    # A run saved before `average_epochs` existed resumes with None: no average.
    recent_epochs = (
        [RecentEpochWeights(settings.average_epochs)] if (settings.average_epochs or 0) > 1 else []
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
        callbacks=[*fit_schedule, *recent_epochs, *callbacks],
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

    ending = (
        _keep_average_if_better(
            fitted.model, recent_epochs[0], tokens.validation, settings, target_vocabulary, verbose
        )
        if recent_epochs
        else None
    )
    metrics, samples = _test_report(
        fitted, settings, tokens, target_vocabulary, folder, num_samples, verbose, ending
    )
    return TranslatorRun(
        model=fitted.model,
        settings=settings,
        samples=samples,
        metrics=metrics,
        epochs_completed=len(fitted.history.get("loss", [])),
        stopped_by_time_budget=fitted.stopped_by_time_budget,
        training_seconds=fitted.training_seconds,
        run_dir=os.fspath(run_dir),
    )


def _settings_and_tokens(data, settings, folder, run_dir, resume, verbose):
    """The run's settings and tokens: those it saved, to resume; else `settings` with the
    values chosen from the data (said and saved), the folder ready for a new run."""
    tokens = data if isinstance(data, TokenizedTranslationData) else None
    saved = saved_run_or_fresh_start(folder, run_dir, resume, SAMPLES_FILE, verbose)
    if saved is not None:
        # A run saved before source word dropout existed trained without it.
        settings = TranslatorSettings(**{"source_word_dropout": 0.0, **saved["settings"]})
        if tokens is None:
            return settings, encode_translation_data(data, settings, folder)
        settings_from_tokens(settings, tokens)  # raises if the folder was tokenized otherwise
        return settings, tokens
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
    return settings, tokens


def _keep_average_if_better(model, recent_epochs, validation, settings, vocabulary, verbose):
    """Gives `model` the average of its last epochs' weights when that translates the whole
    validation split better (greedy chrF) than the kept epoch's weights, which it holds now.

    Returns what was compared and kept, for `metrics.json`, or None when fewer than two
    epochs ran (since a resume).
    """
    epochs = recent_epochs.epoch_numbers
    if len(epochs) < 2 or not len(validation):
        return None
    kept = [keras.ops.convert_to_numpy(variable) for variable in model.trainable_weights]

    def validation_chrf():
        return corpus_chrf(
            translate_ids(model, validation.source_ids, settings, vocabulary), validation.targets
        )

    kept_chrf = validation_chrf()
    set_trainable_weights(model, recent_epochs.average())
    average_chrf = validation_chrf()
    keep_average = average_chrf > kept_chrf
    if not keep_average:
        set_trainable_weights(model, kept)
    ending = {
        "averaged_epochs": [epochs[0], epochs[-1]],
        "validation_chrf": {"kept_epoch": kept_chrf, "average": average_chrf},
        "kept": "average" if keep_average else "kept_epoch",
    }
    say(
        verbose,
        f"The average of epochs {epochs[0]}-{epochs[-1]} translates the {len(validation)} "
        f"validation pairs at chrF {average_chrf:.2f} (greedy), the kept epoch at "
        f"{kept_chrf:.2f}: keeping the {'average' if keep_average else 'kept epoch'}.",
    )
    return ending


def _test_report(
    fitted, settings, tokens, target_vocabulary, folder, num_samples, verbose, ending=None
):
    """Translates the whole test split greedily, as the export's `greedy` signature would, and
    writes its BLEU and chrF (`metrics.json`, with `ending`, what
    `_keep_average_if_better` compared, when it ran), every translation beside its source and
    reference (`test_translations.tsv`), the first `num_samples` of them (`samples.json`, the
    run's finished mark, last), the model and the learning curves.

    Returns `(metrics, samples)`.
    """
    test = tokens.test
    say(verbose, f"Translating the {len(test)} test pairs (greedy):")
    translations = GreedyTranslator(
        fitted.model, target_vocabulary, settings.sequence_length, settings.batch_size
    )(test.source_ids, verbose=verbose)
    metrics = {
        "data": tokens.name,
        "split": "test",
        "pairs": len(test),
        "decoding": "greedy",
        **(corpus_scores(translations, test.targets) if len(test) else {}),
        "kept_epoch": folder.read_best_epoch(),
        **({"ending": ending} if ending else {}),
        "epochs_completed": len(fitted.history.get("loss", [])),
        "stopped_by_time_budget": fitted.stopped_by_time_budget,
        "training_seconds": round(fitted.training_seconds, 1),
        "settings": dataclasses.asdict(settings),
    }
    with open(folder.file(METRICS_FILE), "w", encoding="utf-8") as metrics_file:
        json.dump(metrics, metrics_file, indent=2)
    with open(folder.file(TEST_TRANSLATIONS_FILE), "w", encoding="utf-8", newline="") as rows:
        writer = csv.writer(rows, delimiter="\t", lineterminator="\n")
        writer.writerow(["source", "reference", "translation"])
        writer.writerows(zip(test.sources, test.targets, translations))
    samples = [
        {"source": source, "reference": reference, "translation": translation}
        for source, reference, translation in zip(
            test.sources[:num_samples], test.targets, translations
        )
    ]
    with open(folder.file(SAMPLES_FILE), "w", encoding="utf-8") as samples_file:
        json.dump(samples, samples_file, indent=2, ensure_ascii=False)
    save_model_and_curves(folder, fitted)
    say(verbose, score_line(metrics))
    for sample in samples:
        say(
            verbose,
            f"  source:      {sample['source']}\n  reference:   {sample['reference']}\n"
            f"  translation: {sample['translation']}\n",
        )
    return metrics, samples


def score_line(metrics):
    """One line of a run's test score (`metrics.json`'s) and what computed it."""
    if not metrics["pairs"]:
        return "Test: no test pairs, so no test score."
    if metrics["bleu"] is None:
        scores = f"chrF {metrics['chrf']:.2f}, no BLEU (sacrebleu is not installed)"
    else:
        scores = f"BLEU {metrics['bleu']:.2f}, chrF {metrics['chrf']:.2f} (sacrebleu)"
    return f"Test ({metrics['pairs']} pairs, greedy): {scores}"


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
    """Greedy translations of encoded sources (`[N, sequence_length]`) as text, on any backend:
    a `GreedyTranslator` with the run's sequence length and batch size."""
    return GreedyTranslator(model, vocabulary, settings.sequence_length, settings.batch_size)(
        source_ids
    )


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
    round_up = batch_width_rounding()
    labels = trim_shared_padding_array(target_ids[:, 1:], round_up=round_up)
    inputs = target_ids[:, : labels.shape[1]]
    return {
        "source_ids": trim_shared_padding_array(source_ids, round_up=round_up),
        "target_ids": inputs,
    }, labels
