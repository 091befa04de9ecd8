"""Settings chosen from the training data (keras_transformer/training/data_rules.py and each
task's data_rules.py): the rules on small synthetic corpora, a set value winning, and what a
run prints, records in settings.json and keeps on --resume."""

import json
import os
import string

import keras
import numpy as np
import pytest

from keras_transformer.text import WordPieceTokenizer, build_vocabulary, save_vocabulary
from keras_transformer.training.classifier.data_rules import (
    classifier_settings_from_data,
    classifier_settings_from_token_ids,
)
from keras_transformer.training.classifier.settings import ClassifierSettings
from keras_transformer.training.data_rules import (
    check_chosen,
    large_corpus_settings,
    vocabulary_size_for,
)
from keras_transformer.training.translator.data_rules import translator_settings_from_data
from keras_transformer.training.translator.settings import TranslatorSettings

# Twenty lower-case words, each a whole WordPiece once a corpus repeats them:
# a text of n of them is n WordPieces long.
WORDS = [letter * 3 for letter in "abcdefghijklmnopqrst"]


def text_of(num_words, offset=0):
    return " ".join(WORDS[(offset + index) % len(WORDS)] for index in range(num_words))


def tokenizer_builder(folder, texts, lower_case=True):
    """`build_tokenizer` as the pipelines pass it, recording the sizes asked for."""
    asked = []

    def build(vocabulary_size):
        asked.append(vocabulary_size)
        path = save_vocabulary(
            build_vocabulary(texts, vocabulary_size, lower_case=lower_case),
            os.path.join(folder, f"vocabulary{len(asked)}.txt"),
        )
        return WordPieceTokenizer(path, lower_case=lower_case)

    build.asked = asked
    return build


def no_tokenizer(vocabulary_size):
    return None  # for settings whose lengths are set: nothing is measured


def no_tokenizers(source_vocabulary_size, target_vocabulary_size):
    return None, None


def chosen_names(choices):
    return [choice.name for choice in choices]


# --- classifier -------------------------------------------------------------------------


def test_short_texts_get_a_short_sequence_length(tmp_path):
    texts = [text_of(5, offset) for offset in range(100)]
    settings, choices = classifier_settings_from_data(
        ClassifierSettings(), texts, tokenizer_builder(tmp_path, texts)
    )
    assert settings.sequence_length == 8  # 5 WordPieces, rounded up to a multiple of 8
    reason = {choice.name: choice.reason for choice in choices}["sequence_length"]
    assert "95th percentile" in reason and " is 5," in reason


def test_a_few_long_outliers_do_not_stretch_the_sequence_length(tmp_path):
    # 4 texts in 100 are long: above the 95th percentile, so they are cut.
    short = [text_of(6, offset) for offset in range(96)]
    texts = short + [text_of(40)] * 4
    settings, _ = classifier_settings_from_data(
        ClassifierSettings(), texts, tokenizer_builder(tmp_path, texts)
    )
    assert settings.sequence_length == 8
    # With 6 long ones in 100, the 95th percentile is a long text.
    texts = short[:94] + [text_of(40)] * 6
    settings, _ = classifier_settings_from_data(
        ClassifierSettings(), texts, tokenizer_builder(tmp_path, texts)
    )
    assert settings.sequence_length == 40


def test_cls_pooling_adds_its_slot(tmp_path):
    texts = [text_of(8, offset) for offset in range(50)]
    settings, _ = classifier_settings_from_data(
        ClassifierSettings(pooling="cls"), texts, tokenizer_builder(tmp_path, texts)
    )
    assert settings.sequence_length == 16  # 8 WordPieces + [CLS] = 9, rounded up


def test_long_texts_are_capped_by_max_length(tmp_path):
    texts = [text_of(300, offset) for offset in range(40)]
    settings, choices = classifier_settings_from_data(
        ClassifierSettings(max_length=60), texts, tokenizer_builder(tmp_path, texts)
    )
    assert settings.sequence_length == 60  # not rounded up past the cap
    assert (
        "cap max_length 60" in {choice.name: choice.reason for choice in choices}["sequence_length"]
    )


def test_the_bag_of_ngrams_reads_nearly_whole_texts(tmp_path):
    # 3 long texts in 100: the Transformer's 95th percentile cuts them, the bag's 99th reads them.
    texts = [text_of(6, offset) for offset in range(97)] + [
        text_of(300, offset) for offset in range(3)
    ]
    settings, choices = classifier_settings_from_data(
        ClassifierSettings(), texts, tokenizer_builder(tmp_path, texts)
    )
    # 300 WordPieces, rounded up
    assert settings.sequence_length == 8 and settings.ngram_length == 304
    reason = {choice.name: choice.reason for choice in choices}["ngram_length"]
    assert "99th percentile" in reason and "the Transformer the first sequence_length" in reason
    # Short texts alone: the bag reads what the Transformer reads.
    short = texts[:97]
    settings, choices = classifier_settings_from_data(
        ClassifierSettings(), short, tokenizer_builder(tmp_path, short)
    )
    assert settings.ngram_length == settings.sequence_length == 8
    # Without a bag of n-grams nothing reads further.
    settings, choices = classifier_settings_from_data(
        ClassifierSettings(bag_of_ngrams=False), texts, tokenizer_builder(tmp_path, texts)
    )
    assert settings.ngram_length is None and "ngram_length" not in chosen_names(choices)


def test_the_bag_of_ngrams_reach_is_capped(tmp_path, monkeypatch):
    from keras_transformer.training.classifier import data_rules

    monkeypatch.setattr(data_rules, "NGRAM_MAX_LENGTH", 100)
    texts = [text_of(300, offset) for offset in range(10)]
    settings, _ = classifier_settings_from_data(
        ClassifierSettings(max_length=60), texts, tokenizer_builder(tmp_path, texts)
    )
    assert (settings.sequence_length, settings.ngram_length) == (60, 100)


def pairs_as_ids(pairs, repeats=1):
    """Token ids `[N, 4]`: each `(first, second)` pair as one text, then padding; `repeats`
    copies of every text."""
    rows = np.zeros((len(pairs) * repeats, 4), dtype="int32")
    rows[:, :2] = np.tile(np.asarray(pairs, dtype="int32"), (repeats, 1))
    return rows


@pytest.mark.parametrize(
    "pairs, buckets",
    [
        # 1,000 distinct bigrams: 2,000 rows, and 2,003 is the first prime from there.
        ([(i, j) for i in range(1, 41) for j in range(1, 26)], 2003),
        # A handful: the floor of the range.
        ([(1, 2), (2, 3), (3, 4)], 1009),
        # 200,000: capped at the largest, which every corpus got before.
        ([(i, j) for i in range(1, 501) for j in range(1, 401)], 262139),
    ],
)
def test_the_bag_of_ngrams_gets_prime_rows_for_twice_its_distinct_bigrams(pairs, buckets):
    # Each text three times, and padding after every pair: neither adds a bigram.
    settings, [choice] = classifier_settings_from_token_ids(
        ClassifierSettings(), pairs_as_ids(pairs, repeats=3)
    )
    assert settings.ngram_buckets == choice.value == buckets
    assert f"{len(pairs):,} distinct WordPiece bigrams" in choice.reason


def test_the_bag_of_ngrams_rows_are_left_alone_when_set_or_without_a_bag():
    ids = pairs_as_ids([(1, 2)])
    assert classifier_settings_from_token_ids(ClassifierSettings(ngram_buckets=7), ids) == (
        ClassifierSettings(ngram_buckets=7),
        [],
    )
    settings, choices = classifier_settings_from_token_ids(
        ClassifierSettings(bag_of_ngrams=False), ids
    )
    assert settings.ngram_buckets is None and choices == []


def test_set_values_win_and_are_not_reported_as_chosen(tmp_path):
    texts = [text_of(5, offset) for offset in range(100)]
    build = tokenizer_builder(tmp_path, texts)
    given = ClassifierSettings(
        sequence_length=40,
        vocabulary_size=300,
        batch_size=4,
        warmup_fraction=0.05,
        ngram_l2=0.25,
        ngram_length=64,
    )
    settings, choices = classifier_settings_from_data(given, texts, build)
    assert (
        settings.sequence_length,
        settings.vocabulary_size,
        settings.batch_size,
        settings.warmup_fraction,
        settings.ngram_l2,
        settings.ngram_length,
    ) == (40, 300, 4, 0.05, 0.25, 64)
    assert choices == []
    assert build.asked == [300]  # the vocabulary is built at the size that was set
    # nothing mutated
    assert given.sequence_length == 40 and ClassifierSettings().sequence_length is None


def test_vocabulary_size_counts_frequent_word_types_and_the_alphabet():
    # 2,000 words of 4 letters from "abcdefghij", each 5 times, and 500 more
    # seen 4 times (too rare to count). 10 letters: 7 reserved tokens + 2 x 10
    # characters (alone and as "##c") make an alphabet of 27.
    letters = "abcdefghij"
    words = [
        "".join(letters[(number // 10**place) % 10] for place in range(4)) for number in range(2500)
    ]
    texts = [" ".join(words[:2000])] * 5 + [" ".join(words[2000:])] * 4
    settings, choices = classifier_settings_from_data(
        ClassifierSettings(sequence_length=16, ngram_length=16), texts, no_tokenizer
    )
    assert settings.vocabulary_size == 2027
    assert "2,000 word types occur at least 5 times" in choices[0].reason


def test_vocabulary_size_for_texts_applies_the_same_rule():
    # The translation benchmark's peer gets its WordPiece budget from this: the
    # same 2,027 as the classifier's choice on the same texts (worked out above).
    letters = "abcdefghij"
    words = [
        "".join(letters[(number // 10**place) % 10] for place in range(4)) for number in range(2500)
    ]
    texts = [" ".join(words[:2000])] * 5 + [" ".join(words[2000:])] * 4
    size, reason = vocabulary_size_for(texts)
    assert size == 2027 and "in 9 texts" in reason


@pytest.mark.parametrize("count, expected", [(3, 1000), (9000, 8000)])
def test_vocabulary_size_stays_within_its_range(count, expected):
    # 3 words each 5 times: far below the floor. 9,000 words each 5 times: above the ceiling.
    letters = string.ascii_lowercase
    words = [
        "".join(letters[(number // 26**place) % 26] for place in range(3))
        for number in range(count)
    ]
    texts = [" ".join(words)] * 5
    settings, _ = classifier_settings_from_data(
        ClassifierSettings(sequence_length=16, ngram_length=16), texts, no_tokenizer
    )
    assert settings.vocabulary_size == expected


@pytest.mark.parametrize("num_texts, batch_size", [(3000, 32), (1000, 16), (300, 8)])
def test_small_corpora_get_smaller_batches(num_texts, batch_size):
    # 3000 / 32 = 94 steps an epoch; 1000 / 32 = 32 < 50 but 1000 / 16 = 63; 300 / 16 = 19.
    texts = [text_of(3, offset) for offset in range(num_texts)]
    settings, _ = classifier_settings_from_data(
        ClassifierSettings(sequence_length=8, ngram_length=8, vocabulary_size=100),
        texts,
        no_tokenizer,
    )
    assert settings.batch_size == batch_size


@pytest.mark.parametrize(
    "num_texts, epochs, fraction",
    [
        (1000, 12, 0.1),  # 63 steps x 12 = 756 planned: 10% is 75 steps, above 50
        (300, 12, 0.11),  # 38 x 12 = 456 planned: 50 steps is 11%
        (300, 2, 0.3),  # 76 planned: 50 steps would be 66%, held at 30%
    ],
)
def test_warmup_is_at_least_fifty_steps_within_ten_to_thirty_percent(num_texts, epochs, fraction):
    texts = [text_of(3, offset) for offset in range(num_texts)]
    settings, _ = classifier_settings_from_data(
        ClassifierSettings(epochs=epochs, sequence_length=8, ngram_length=8, vocabulary_size=100),
        texts,
        no_tokenizer,
    )
    assert settings.warmup_fraction == pytest.approx(fraction, abs=0.005)


def test_settings_left_to_the_data_pass_validation_until_built():
    ClassifierSettings().validate()  # the apps validate flags before loading the data
    TranslatorSettings().validate()
    with pytest.raises(ValueError, match="sequence_length"):
        ClassifierSettings(sequence_length=0).validate()
    with pytest.raises(ValueError, match="warmup_fraction"):
        ClassifierSettings(warmup_fraction=1.5).validate()
    with pytest.raises(ValueError, match="d_model, dropout"):
        check_chosen(TranslatorSettings(sequence_length=8), "sequence_length", "d_model", "dropout")


# --- translator ---------------------------------------------------------------------


def pairs(num_pairs, source_words, target_words):
    sources = [text_of(source_words, offset) for offset in range(num_pairs)]
    targets = [text_of(target_words, offset + 7) for offset in range(num_pairs)]
    return sources, targets


def translator_choices(settings, sources, targets):
    return translator_settings_from_data(settings, sources, targets, no_tokenizers)


@pytest.mark.parametrize(
    "num_pairs, target_words, tier",
    [
        (
            100,
            5,
            {
                "d_model": 128,
                "intermediate_dim": 512,
                "num_layers": 2,
                "dropout": 0.3,
                "source_word_dropout": 0.1,
                "label_smoothing": 0.2,
                "schedule": "inverse_sqrt",
                "patience": 3,
            },
        ),
        (
            2000,
            40,
            {
                "d_model": 256,
                "intermediate_dim": 1024,
                "num_layers": 2,
                "dropout": 0.3,
                "source_word_dropout": 0.1,
                "label_smoothing": 0.1,
                "schedule": "cosine",
                "patience": 0,
            },
        ),
        (
            3000,
            60,
            {
                "d_model": 256,
                "intermediate_dim": 1024,
                "num_layers": 2,
                "dropout": 0.3,
                "source_word_dropout": 0.1,
                "label_smoothing": 0.1,
                "schedule": "cosine",
                "patience": 0,
            },
        ),
        (
            5000,
            50,
            {
                "d_model": 256,
                "intermediate_dim": 1024,
                "num_layers": 3,
                "dropout": 0.2,
                "source_word_dropout": 0.0,
                "label_smoothing": 0.1,
                "schedule": "inverse_sqrt",
                "patience": 3,
            },
        ),
        (
            5000,
            80,
            {
                "d_model": 256,
                "intermediate_dim": 1024,
                "num_layers": 3,
                "dropout": 0.1,
                "source_word_dropout": 0.0,
                "label_smoothing": 0.1,
                "schedule": "inverse_sqrt",
                "patience": 3,
            },
        ),
    ],
)
def test_translator_size_and_regularization_follow_the_target_words(num_pairs, target_words, tier):
    # 500, 80,000, 180,000, 250,000 and 400,000 target words: tiny, small, small, medium and large
    # (the fixed defaults before they followed the data).
    sources, targets = pairs(num_pairs, 3, target_words)
    settings, choices = translator_choices(TranslatorSettings(sequence_length=8), sources, targets)
    assert {name: getattr(settings, name) for name in tier} == tier
    reasons = {c.name: c.reason for c in choices}
    assert f"{num_pairs * target_words:,} target-side words" in reasons["dropout"]
    assert f"{num_pairs * target_words:,} target-side words" in reasons["schedule"]
    assert ("no early stopping under the cosine" in reasons["patience"]) == (
        tier["schedule"] == "cosine"
    )


@pytest.mark.parametrize("schedule, patience", [("cosine", 0), ("inverse_sqrt", 3)])
def test_translator_patience_follows_a_schedule_the_user_set(schedule, patience):
    # A Bible-sized corpus would get the paper's schedule; the user's cosine still turns
    # early stopping off.
    sources, targets = pairs(5000, 3, 80)
    settings, choices = translator_choices(
        TranslatorSettings(sequence_length=8, schedule=schedule), sources, targets
    )
    assert (settings.schedule, settings.patience) == (schedule, patience)
    assert "schedule" not in chosen_names(choices) and "patience" in chosen_names(choices)


def test_translator_patience_the_user_set_wins_under_the_cosine():
    sources, targets = pairs(2000, 3, 40)  # a small corpus: the cosine
    settings, choices = translator_choices(
        TranslatorSettings(sequence_length=8, patience=5), sources, targets
    )
    assert (settings.schedule, settings.patience) == ("cosine", 5)
    assert "patience" not in chosen_names(choices)


def test_translator_set_values_win_over_the_tier():
    sources, targets = pairs(100, 3, 5)
    settings, choices = translator_choices(
        TranslatorSettings(sequence_length=8, d_model=64, dropout=0.0, warmup_steps=7),
        sources,
        targets,
    )
    assert (settings.d_model, settings.dropout, settings.warmup_steps) == (64, 0.0, 7)
    assert settings.intermediate_dim == 512  # still the tiny tier's
    assert not {"d_model", "dropout", "warmup_steps", "sequence_length"} & set(
        chosen_names(choices)
    )


def test_translator_warmup_is_a_tenth_of_the_planned_steps_within_100_to_500():
    # 64 pairs a batch, 20 epochs: 2,000 pairs plan 640 steps, 8,000 plan 2,500, 20,000 plan 6,260.
    found = [
        translator_choices(TranslatorSettings(sequence_length=8), *pairs(count, 3, 3))[
            0
        ].warmup_steps
        for count in (2000, 8000, 20000)
    ]
    assert found == [100, 250, 500]


def test_translator_vocabularies_are_chosen_per_side_unless_one_size_is_set():
    # Sources use 20 words, targets 5; each side's alphabet is its own letters.
    sources = [text_of(20, offset) for offset in range(50)]
    targets = [" ".join(["Yes", "no", "maybe", "so", "Ok"])] * 50
    settings, choices = translator_choices(TranslatorSettings(sequence_length=8), sources, targets)
    reasons = {choice.name: choice.reason for choice in choices}
    assert (
        "20 word types" in reasons["vocabulary_size"]
        and "5 word types" in reasons["target_vocabulary_size"]
    )
    set_one, choices = translator_choices(
        TranslatorSettings(sequence_length=8, vocabulary_size=500), sources, targets
    )
    assert set_one.target_vocabulary_size == 500
    assert (
        "vocabulary_size that was set"
        in {c.name: c.reason for c in choices}["target_vocabulary_size"]
    )


def test_translator_sequence_length_covers_the_longer_side_and_its_end_token(tmp_path):
    sources, targets = pairs(200, 5, 8)  # targets: 8 WordPieces + 1 = 9
    source_build = tokenizer_builder(tmp_path / "s", sources)
    target_build = tokenizer_builder(tmp_path / "t", targets, lower_case=False)
    settings, _ = translator_settings_from_data(
        TranslatorSettings(),
        sources,
        targets,
        lambda source_size, target_size: (source_build(source_size), target_build(target_size)),
    )
    assert settings.sequence_length == 16
    capped, _ = translator_settings_from_data(
        TranslatorSettings(max_length=8),
        sources,
        targets,
        lambda source_size, target_size: (source_build(source_size), target_build(target_size)),
    )
    assert capped.sequence_length == 8


# --- a run: printed, recorded, kept on --resume -------------------------------------------
# What the classifier app says and records of its choices is checked on the app run of
# tests/training/test_pretraining.py (`test_the_classifier_app_chooses_what_no_flag_set`),
# which pretrains under a time budget with these settings left to the data.


class StopAfterFirstEpoch(keras.callbacks.Callback):
    """Stands in for a crash after the first epoch's backup."""

    def on_epoch_end(self, epoch, logs=None):
        raise InterruptedError("stopped on purpose")


TINY_TRANSLATOR = {
    "epochs": 2,
    "num_layers": 1,
    "d_model": 16,
    "num_heads": 2,
    "intermediate_dim": 32,
    "batch_size": 16,
    # No greedy translation of validation pairs after each epoch: the choices are what is
    # checked, and each run would trace the decoding loop for it.
    "chrf_pairs": 0,
    "monitor": "val_loss",
}


def translation_data(tmp_path, name, target_words):
    from keras_transformer.data import load_translation_data

    path = tmp_path / name
    sources, targets = pairs(120, 4, target_words)
    path.write_text(
        "".join(f"{s}\t{t.capitalize()}.\n" for s, t in zip(sources, targets)), encoding="utf-8"
    )
    return load_translation_data(f"tsv:{path}", seed=1, validation_size=10, test_size=10)


def test_a_run_prints_records_and_resumes_with_its_choices(tmp_path, capsys):
    from keras_transformer.training.translator.pipeline import train_translator

    run_dir = str(tmp_path / "run")
    with pytest.raises(InterruptedError):
        train_translator(
            translation_data(tmp_path, "short.tsv", 4),
            TranslatorSettings(**TINY_TRANSLATOR),
            run_dir,
            verbose=2,
            num_samples=1,
            callbacks=[StopAfterFirstEpoch()],
        )
    printed = capsys.readouterr().out
    with open(os.path.join(run_dir, "settings.json")) as settings_file:
        saved = json.load(settings_file)
    chosen = saved["chosen_from_data"]
    # A learner this small splits some words into pieces, so the exact length
    # is its own; the 20-word targets below would need at least 21.
    length = chosen["sequence_length"]["value"]
    assert saved["settings"]["sequence_length"] == length < 21
    assert "99th percentile" in chosen["sequence_length"]["reason"]
    assert saved["settings"]["dropout"] == chosen["dropout"]["value"] == 0.3
    assert saved["settings"]["source_word_dropout"] == chosen["source_word_dropout"]["value"] == 0.1
    assert not {"d_model", "num_layers", "batch_size"} & set(chosen)  # set, not chosen
    assert (
        f"sequence_length {length}: {chosen['sequence_length']['reason']}" in printed.splitlines()
    )

    # Data that would choose otherwise (longer targets): --resume keeps what the run chose.
    resumed = train_translator(
        translation_data(tmp_path, "long.tsv", 20),
        TranslatorSettings(**TINY_TRANSLATOR),
        run_dir,
        resume=True,
        verbose=2,
        num_samples=1,
    )
    assert "sequence_length" not in capsys.readouterr().out
    assert (
        resumed.settings.sequence_length == length and resumed.model.sequence_length == length + 1
    )
    with open(os.path.join(run_dir, "settings.json")) as settings_file:
        assert json.load(settings_file)["chosen_from_data"] == chosen


def test_a_run_saved_before_source_word_dropout_resumes_without_it(tmp_path):
    from keras_transformer.training.translator.pipeline import train_translator

    run_dir = str(tmp_path / "run")
    data = translation_data(tmp_path, "short.tsv", 4)
    with pytest.raises(InterruptedError):
        train_translator(
            data,
            TranslatorSettings(**TINY_TRANSLATOR),
            run_dir,
            verbose=0,
            num_samples=1,
            callbacks=[StopAfterFirstEpoch()],
        )
    settings_path = os.path.join(run_dir, "settings.json")
    with open(settings_path) as settings_file:
        saved = json.load(settings_file)
    del saved["settings"]["source_word_dropout"]
    with open(settings_path, "w") as settings_file:
        json.dump(saved, settings_file)
    resumed = train_translator(
        data, TranslatorSettings(**TINY_TRANSLATOR), run_dir, resume=True, verbose=0, num_samples=1
    )
    assert resumed.settings.source_word_dropout == resumed.model.source_word_dropout == 0.0


@pytest.mark.parametrize(
    "app, flags",
    [
        (
            "train_classifier",
            (
                "--sequence-length",
                "--ngram-length",
                "--vocab-size",
                "--batch-size",
                "--warmup-fraction",
            ),
        ),
        (
            "train_translator",
            (
                "--sequence-length",
                "--vocab-size",
                "--d-model",
                "--dropout",
                "--source-word-dropout",
                "--label-smoothing",
                "--warmup-steps",
                "--num-layers",
                "--intermediate-dim",
            ),
        ),
    ],
)
def test_flags_left_to_the_data_say_so(app, flags):
    import importlib

    parser = importlib.import_module(f"keras_transformer.cli.{app}").build_parser()
    helps = {option: action.help for action in parser._actions for option in action.option_strings}
    for flag in flags:
        assert parser.get_default(flag.removeprefix("--").replace("-", "_")) is None, flag
        assert "default: from the data" in helps[flag], flag


def test_large_corpus_settings_are_the_sizes_of_a_large_corpus():
    # What benchmarks of speed and serving build without training data.
    translator = large_corpus_settings(TranslatorSettings(num_heads=8)).validate()
    assert (
        translator.vocabulary_size,
        translator.sequence_length,
        translator.num_layers,
        translator.d_model,
        translator.intermediate_dim,
        translator.dropout,
        translator.source_word_dropout,
        translator.label_smoothing,
        translator.warmup_steps,
    ) == (8000, 64, 3, 256, 1024, 0.1, 0.0, 0.1, 500)
    classifier = large_corpus_settings(ClassifierSettings(batch_size=16)).validate()
    assert (
        classifier.vocabulary_size,
        classifier.sequence_length,
        classifier.batch_size,
        classifier.warmup_fraction,
    ) == (8000, 512, 16, 0.1)


def test_the_bag_of_ngrams_penalty_is_a_logistic_regression_s_with_c_10():
    texts = [text_of(5, offset) for offset in range(100)]
    settings, choices = classifier_settings_from_data(
        ClassifierSettings(sequence_length=16, ngram_length=16), texts, no_tokenizer
    )
    assert settings.ngram_l2 == pytest.approx(1 / (2 * 10 * 100))
    assert [choice.name for choice in choices][-1] == "ngram_l2"
    without, choices = classifier_settings_from_data(
        ClassifierSettings(sequence_length=16, bag_of_ngrams=False), texts, no_tokenizer
    )
    assert without.ngram_l2 is None and "ngram_l2" not in [choice.name for choice in choices]
