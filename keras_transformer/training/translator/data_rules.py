"""The translator's settings chosen from the training pairs when the user left them unset.

The shared machinery and the vocabulary size rule are in
`keras_transformer.training.data_rules`. The translator's rules, and why:

* Sequence length: the 99th percentile of the pairs' WordPiece lengths,
  rounded up to a multiple of 8, capped by `max_length`: a truncated pair
  teaches the model to end a sentence early (its target still ends with
  `[END]`) or to translate words it never saw.
* Size, regularization and learning-rate schedule: by the number of
  target-side words (a pair of 5 words teaches less than a verse of 25),
  from `TRANSLATOR_TIERS`; early stopping's patience and the last epochs
  averaged at the end by the schedule.
* Warmup steps: see `_warmup_steps`.
"""

import math

import numpy as np

from keras_transformer.training.data_rules import (
    VOCABULARY_SIZE_RANGE,
    fill_from_data,
    length_percentile,
    vocabulary_size_from_counts,
    wordpiece_lengths,
)

TRANSLATOR_LENGTH_PERCENTILE = 99
TRANSLATOR_WARMUP_FRACTION = 0.1
TRANSLATOR_WARMUP_RANGE = (100, 500)

# (fewest target-side training words, name, values), largest corpora first.
# The large tier keeps the values tuned on the Bible corpora; smaller corpora
# overfit sooner, so they get more dropout, source word dropout (the decoder
# cannot lean on any one source word) and, when tiny, a smaller model
# (fewer, narrower blocks) and more label smoothing. The small tier (ding's
# 15k everyday sentences) trains best with fewer, faster blocks whose learning
# rate a cosine brings to 0: more epochs fit a time budget, and its last
# epochs, at the lowest rates, are the best (benchmarks/BENCHMARKS.md).
TRANSLATOR_TIERS = (
    (
        400_000,
        "large",
        {
            "d_model": 256,
            "intermediate_dim": 1024,
            "num_layers": 3,
            "dropout": 0.1,
            "source_word_dropout": 0.0,
            "label_smoothing": 0.1,
            "schedule": "inverse_sqrt",
        },
    ),
    (
        200_000,
        "medium",
        {
            "d_model": 256,
            "intermediate_dim": 1024,
            "num_layers": 3,
            "dropout": 0.2,
            "source_word_dropout": 0.0,
            "label_smoothing": 0.1,
            "schedule": "inverse_sqrt",
        },
    ),
    (
        60_000,
        "small",
        {
            "d_model": 256,
            "intermediate_dim": 1024,
            "num_layers": 2,
            "dropout": 0.3,
            "source_word_dropout": 0.1,
            "label_smoothing": 0.1,
            "schedule": "cosine",
        },
    ),
    (
        0,
        "tiny",
        {
            "d_model": 128,
            "intermediate_dim": 512,
            "num_layers": 2,
            "dropout": 0.3,
            "source_word_dropout": 0.1,
            "label_smoothing": 0.2,
            "schedule": "inverse_sqrt",
        },
    ),
)
# Early stopping's patience by schedule: the cosine's best epochs come last,
# where early stopping on a noisy validation metric would have cut it off.
TRANSLATOR_PATIENCE = {"inverse_sqrt": 3, "cosine": 0}
# The last epochs averaged at the end (kept only where they validate better), by schedule:
# under 1/sqrt(step) the rate is still high when training ends, so the last epochs' weights
# scatter around a better point; under the cosine they barely differ (benchmarks/BENCHMARKS.md).
TRANSLATOR_AVERAGED_EPOCHS = {"inverse_sqrt": 5, "cosine": 0}

# What a large corpus (the Bible corpora) gets; `sequence_length` is `max_length`.
LARGE_CORPUS = {
    "vocabulary_size": VOCABULARY_SIZE_RANGE[1],
    "target_vocabulary_size": VOCABULARY_SIZE_RANGE[1],
    "warmup_steps": TRANSLATOR_WARMUP_RANGE[1],
    **TRANSLATOR_TIERS[0][2],
    "patience": TRANSLATOR_PATIENCE[TRANSLATOR_TIERS[0][2]["schedule"]],
    "average_epochs": TRANSLATOR_AVERAGED_EPOCHS[TRANSLATOR_TIERS[0][2]["schedule"]],
}


def translator_settings_from_data(settings, sources, targets, build_tokenizers):
    """Fills the None fields of a `TranslatorSettings` from the training pairs.

    Args:
        settings: a `TranslatorSettings`; not changed.
        sources, targets: the training pairs' two sides.
        build_tokenizers: `(source_vocabulary_size, target_vocabulary_size) ->
            (source_tokenizer, target_tokenizer)`, which builds the run's
            vocabularies; lengths are measured in their WordPieces.

    Returns:
        `(settings, choices)`: a filled copy and a `Choice` per filled field.
    """
    settings, choices = translator_tokenization_from_data(
        settings, sources, targets, build_tokenizers
    )
    settings, more_choices = translator_settings_from_counts(
        settings, len(sources), target_word_count(targets)
    )
    return settings, choices + more_choices


def target_word_count(targets):
    """The number of words in `targets`, which chooses the translator's size tier."""
    from keras_transformer.text.wordpiece import count_words  # needs TensorFlow

    return sum(count_words(targets, lower_case=False).values())


def translator_tokenization_from_data(settings, sources, targets, build_tokenizers):
    """`translator_settings_from_data` for the fields tokenization fixes
    (the vocabulary sizes, `sequence_length`) alone."""
    vocabulary_size_set = settings.vocabulary_size is not None
    settings, choices = fill_from_data(
        settings,
        [
            ("vocabulary_size", lambda current: _vocabulary_size(current, sources, targets)),
            (
                "target_vocabulary_size",
                lambda current: _target_vocabulary_size(
                    current, targets, len(sources), vocabulary_size_set
                ),
            ),
        ],
    )
    tokenizers = build_tokenizers(settings.vocabulary_size, settings.target_vocabulary_size)
    more_settings, more_choices = fill_from_data(
        settings,
        [
            (
                "sequence_length",
                lambda current: _sequence_length(current, tokenizers, sources, targets),
            )
        ],
    )
    return more_settings, choices + more_choices


def translator_settings_from_counts(settings, num_pairs, target_words):
    """`translator_settings_from_data` for the fields chosen from counts alone
    (the size tier by `target_words`, `warmup_steps` by `num_pairs`): what
    training from a token folder still chooses."""
    floor, tier, values = next(tier for tier in TRANSLATOR_TIERS if target_words >= tier[0])
    size = (
        f"{target_words:,} target-side words in the {num_pairs:,} training pairs: a {tier} corpus"
        + (
            f" (at least {floor:,} words)"
            if floor
            else f" (under {TRANSLATOR_TIERS[-2][0]:,} words)"
        )
    )
    return fill_from_data(
        settings,
        [
            *[(name, lambda current, value=value: (value, size)) for name, value in values.items()],
            ("patience", _patience),
            ("average_epochs", _average_epochs),
            (
                "warmup_steps",
                lambda current: _warmup_steps(num_pairs, current.batch_size, current.epochs),
            ),
        ],
    )


def _pairs(num_pairs):
    return f"{num_pairs:,} training pairs"


def _vocabulary_size(settings, sources, targets):
    from keras_transformer.text.wordpiece import count_words  # needs TensorFlow

    pairs = _pairs(len(sources))
    if settings.shared_vocabulary:
        # One cased vocabulary spells both sides.
        return vocabulary_size_from_counts(
            count_words([*sources, *targets], lower_case=False), f"both sides of the {pairs}"
        )
    return vocabulary_size_from_counts(count_words(sources), f"the sources of the {pairs}")


def _target_vocabulary_size(settings, targets, num_pairs, vocabulary_size_set):
    from keras_transformer.text.wordpiece import count_words  # needs TensorFlow

    if settings.shared_vocabulary:
        return settings.vocabulary_size, "the shared vocabulary's size"
    if vocabulary_size_set:
        return (
            settings.vocabulary_size,
            "the same as the vocabulary_size that was set, for both sides",
        )
    return vocabulary_size_from_counts(
        count_words(targets, lower_case=False), f"the targets of the {_pairs(num_pairs)}"
    )


def _sequence_length(settings, tokenizers, sources, targets):
    # Sources fill `sequence_length` tokens; targets `sequence_length - 1`
    # (the model's inputs and labels are one longer, with [START] and [END]).
    source_tokenizer, target_tokenizer = tokenizers
    lengths = np.maximum(
        wordpiece_lengths(source_tokenizer, sources, settings.max_length),
        wordpiece_lengths(target_tokenizer, targets, settings.max_length) + 1,
    )
    return length_percentile(
        lengths,
        TRANSLATOR_LENGTH_PERCENTILE,
        settings.max_length,
        "the training pairs' WordPiece lengths (the longer side; a target +1)",
    )


def _patience(settings):
    return TRANSLATOR_PATIENCE[settings.schedule], (
        "no early stopping under the cosine: its last epochs, at the lowest rates, are its best"
        if settings.schedule == "cosine"
        else f"epochs without a better {settings.monitor}"
    )


def _average_epochs(settings):
    return TRANSLATOR_AVERAGED_EPOCHS[settings.schedule], (
        "the cosine's last epochs, at rates near 0, barely differ: nothing to average"
        if settings.schedule == "cosine"
        else "under 1/sqrt(step) the last epochs' weights still move; their average is kept "
        "where it translates the validation split better"
    )


def _warmup_steps(num_examples, batch_size, epochs):
    planned = epochs * math.ceil(num_examples / batch_size)
    low, high = TRANSLATOR_WARMUP_RANGE
    value = min(max(low, round(TRANSLATOR_WARMUP_FRACTION * planned)), high)
    return value, (
        f"{TRANSLATOR_WARMUP_FRACTION:.0%} of the {planned} planned steps ({epochs} epochs of "
        f"{math.ceil(num_examples / batch_size)}), kept within {low}-{high}"
    )
