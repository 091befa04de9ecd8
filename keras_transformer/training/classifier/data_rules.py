"""The classifier's settings chosen from the training texts when the user left them unset.

The shared machinery and the vocabulary size rule are in
`keras_transformer.training.data_rules`. The classifier's rules, and why:

* Sequence length: the 95th percentile of the training texts' WordPiece
  lengths (a truncated text keeps its label), rounded up to a multiple of 8,
  capped by `max_length`.
* The bag of n-grams' length: the 99th percentile, up to `NGRAM_MAX_LENGTH`:
  long texts are classified by words the Transformer's first
  `sequence_length` pieces do not reach.
* Batch size and warmup: see `_batch_size` and `_warmup_fraction`.
* The bag of n-grams' L2 penalty: see `_ngram_l2`; its hashed rows: see
  `ngram_buckets_for`.
* Fine-tuning a pretrained checkpoint: its vocabulary and encoder sizes, and
  the sequence length from the texts within its positions
  (`classifier_tokenization_for_checkpoint`).
"""

import dataclasses
import functools
import math

import numpy as np

# The settings a pretrained checkpoint fixes (a token folder records them too).
from keras_transformer.data.tokens import CHECKPOINT_SIZES
from keras_transformer.training.data_rules import (
    VOCABULARY_SIZE_RANGE,
    Choice,
    fill_from_data,
    length_percentile,
    vocabulary_size_from_counts,
    wordpiece_lengths,
)

CLASSIFIER_LENGTH_PERCENTILE = 95
NGRAM_LENGTH_PERCENTILE = 99
NGRAM_MAX_LENGTH = 4096
CLASSIFIER_BATCH_SIZES = (32, 16, 8)  # the first that gives an epoch enough steps
MIN_STEPS_PER_EPOCH = 50
MIN_WARMUP_STEPS = 50
WARMUP_FRACTION_RANGE = (0.1, 0.3)
# The C of scikit-learn's LogisticRegression that `_ngram_l2` matches.
NGRAM_INVERSE_REGULARIZATION = 10.0
# The bag of n-grams' hashed rows per family (`ngram_buckets_for`): primes, so that the
# bigram keys `first * V + second` spread over every row.
NGRAM_BUCKETS_RANGE = (1009, 262139)
NGRAM_BUCKETS_PER_BIGRAM = 2

# What a large corpus (BBC News) gets; `sequence_length` is `max_length`.
LARGE_CORPUS = {
    "vocabulary_size": VOCABULARY_SIZE_RANGE[1],
    "batch_size": CLASSIFIER_BATCH_SIZES[0],
    "warmup_fraction": WARMUP_FRACTION_RANGE[0],
    "ngram_length": None,  # the bag of n-grams reads what the Transformer reads
    "ngram_l2": 1.0 / (2 * NGRAM_INVERSE_REGULARIZATION * 2000),  # BBC News' number of texts
    "ngram_buckets": NGRAM_BUCKETS_RANGE[1],  # BBC News has 254,671 distinct bigrams
}


def classifier_settings_from_data(settings, texts, build_tokenizer):
    """Fills the None fields of a `ClassifierSettings` from the training texts.

    Args:
        settings: a `ClassifierSettings`; not changed.
        texts: the training texts.
        build_tokenizer: `vocabulary_size -> WordPieceTokenizer`, which builds
            the run's vocabulary; lengths are measured in its WordPieces.

    Returns:
        `(settings, choices)`: a filled copy and a `Choice` per filled field.
    """
    settings, choices = classifier_tokenization_from_data(settings, texts, build_tokenizer)
    settings, more_choices = classifier_settings_from_counts(settings, len(texts))
    return settings, choices + more_choices


def classifier_tokenization_from_data(settings, texts, build_tokenizer):
    """`classifier_settings_from_data` for the fields tokenization fixes
    (`vocabulary_size`, `sequence_length`, and `ngram_length` with
    `bag_of_ngrams`) alone."""
    from keras_transformer.text.wordpiece import count_words  # needs TensorFlow

    settings, choices = fill_from_data(
        settings,
        [
            (
                "vocabulary_size",
                lambda current: vocabulary_size_from_counts(
                    count_words(texts), f"{len(texts):,} training texts"
                ),
            ),
        ],
    )
    tokenizer = build_tokenizer(settings.vocabulary_size)
    # Counted once, and only if a rule needs them.
    lengths = functools.cache(functools.partial(_text_lengths, settings, tokenizer, texts))
    more_settings, more_choices = fill_from_data(settings, _length_rules(settings, lengths))
    return more_settings, choices + more_choices


def classifier_tokenization_for_checkpoint(settings, config, tokenizer, texts):
    """`classifier_tokenization_from_data` for a run that fine-tunes a
    checkpoint: the encoder's sizes and vocabulary are the checkpoint's
    (`config`, its `config.json`), `max_length` at most its positions, and
    `sequence_length`, where None, the usual percentile of the texts' lengths
    in its WordPieces, `[CLS]` and `[SEP]` counted.

    Raises:
        ValueError: `settings.vocabulary_size` is set and not the checkpoint's.
    """
    if settings.vocabulary_size not in (None, config["vocab_size"]):
        raise ValueError(
            f"`vocabulary_size` {settings.vocabulary_size}: the checkpoint "
            f"{settings.pretrained} has {config['vocab_size']} tokens; leave it unset."
        )
    if tokenizer.vocabulary_size != config["vocab_size"]:
        raise ValueError(
            f"{tokenizer.vocabulary_path} has {tokenizer.vocabulary_size} tokens, but "
            f"{settings.pretrained}'s config.json says vocab_size {config['vocab_size']}."
        )
    choices = [
        Choice(name, config[key], f"the checkpoint's {key}")
        for name, key in CHECKPOINT_SIZES.items()
    ]
    positions = config.get("max_position_embeddings", 512)
    if settings.max_length > positions:
        choices.append(Choice("max_length", positions, "the checkpoint's max_position_embeddings"))
    settings = dataclasses.replace(settings, **{choice.name: choice.value for choice in choices})
    if settings.sequence_length is not None and settings.sequence_length > settings.max_length:
        raise ValueError(
            f"`sequence_length` {settings.sequence_length} is more than the checkpoint's "
            f"{positions} positions."
        )
    lengths = functools.cache(functools.partial(_text_lengths, settings, tokenizer, texts))
    settings, more_choices = fill_from_data(settings, _length_rules(settings, lengths))
    return settings, choices + more_choices


def _length_rules(settings, lengths):
    """The `fill_from_data` rules of `sequence_length`, and of `ngram_length` with
    `bag_of_ngrams`, from `lengths()` (the training texts' lengths)."""
    rules = [("sequence_length", lambda current: _sequence_length(current, lengths()))]
    if settings.bag_of_ngrams is not False:
        rules.append(("ngram_length", lambda current: _ngram_length(current, lengths())))
    return rules


def classifier_settings_from_counts(settings, num_examples):
    """`classifier_settings_from_data` for the fields chosen from the number
    of training texts alone (`batch_size`, `warmup_fraction`, and `ngram_l2`
    with `bag_of_ngrams`): what training from a token folder still chooses."""
    return fill_from_data(
        settings,
        [
            ("batch_size", lambda current: _batch_size(num_examples)),
            (
                "warmup_fraction",
                lambda current: _warmup_fraction(num_examples, current.batch_size, current.epochs),
            ),
            *(
                [("ngram_l2", lambda current: _ngram_l2(num_examples))]
                if settings.bag_of_ngrams is not False
                else []
            ),
        ],
    )


def classifier_settings_from_token_ids(settings, train_token_ids):
    """`classifier_settings_from_data` for the fields chosen from the training texts'
    token ids (`ngram_buckets` with `bag_of_ngrams`): for raw texts and token folders alike,
    once the texts are encoded."""
    if settings.bag_of_ngrams is False:
        return settings, []
    return fill_from_data(
        settings, [("ngram_buckets", lambda current: ngram_buckets_for(train_token_ids))]
    )


def ngram_buckets_for(token_ids):
    """The rows each hashed family of the bag of n-grams gets (piece bigrams; words and word
    bigrams): twice the distinct WordPiece bigrams of the training texts, the next prime,
    within `NGRAM_BUCKETS_RANGE`. A row is a weight per class in every export, and at
    twice as many rows as keys about a fifth of the keys share a row with another (a shared
    row mixes two features' evidence); a larger corpus is capped, as when every corpus got
    the maximum."""
    token_ids = np.asarray(token_ids, dtype=np.int64)
    first, second = token_ids[:, :-1], token_ids[:, 1:]
    keys = (first * (int(token_ids.max(initial=0)) + 1) + second)[(first > 0) & (second > 0)]
    distinct = len(np.unique(keys))
    low, high = NGRAM_BUCKETS_RANGE
    value = min(max(_next_prime(NGRAM_BUCKETS_PER_BIGRAM * distinct), low), high)
    return value, (
        f"{distinct:,} distinct WordPiece bigrams in the training texts, times "
        f"{NGRAM_BUCKETS_PER_BIGRAM}, the next prime, within {low:,}-{high:,}: the rows the bag "
        "of n-grams hashes bigrams into, and as many for words"
    )


def _next_prime(number):
    """The smallest prime at least `number`."""
    candidate = max(number, 2)
    while any(candidate % divisor == 0 for divisor in range(2, math.isqrt(candidate) + 1)):
        candidate += 1
    return candidate


def _text_lengths(settings, tokenizer, texts):
    """Each text's WordPiece length as the model sees it ([CLS] counted), up to the
    longest either length rule may choose."""
    longest = max(
        settings.max_length, NGRAM_MAX_LENGTH if settings.bag_of_ngrams is not False else 0
    )
    return wordpiece_lengths(tokenizer, texts, longest) + _added_tokens(settings)


def _added_tokens(settings):
    """The tokens around each text: `[CLS]` and `[SEP]` for a checkpoint, `[CLS]` for cls
    pooling."""
    return 2 if settings.pretrained is not None else int(settings.pooling == "cls")


def _lengths_described(settings):
    added = {0: "", 1: " (+1 for [CLS])", 2: " (+2 for [CLS] and [SEP])"}[_added_tokens(settings)]
    return f"the training texts' WordPiece lengths{added}"


def _sequence_length(settings, lengths):
    return length_percentile(
        np.minimum(lengths, settings.max_length),
        CLASSIFIER_LENGTH_PERCENTILE,
        settings.max_length,
        _lengths_described(settings),
    )


def _ngram_length(settings, lengths):
    """The bag of n-grams' length: at least the Transformer's `sequence_length`."""
    value, reason = length_percentile(
        np.minimum(lengths, NGRAM_MAX_LENGTH),
        NGRAM_LENGTH_PERCENTILE,
        NGRAM_MAX_LENGTH,
        _lengths_described(settings),
    )
    reason = reason.replace(f"(cap max_length {NGRAM_MAX_LENGTH})", f"(cap {NGRAM_MAX_LENGTH})")
    if value <= settings.sequence_length:
        return (
            settings.sequence_length,
            f"{reason}: the bag of n-grams reads what the Transformer reads",
        )
    return (
        value,
        f"{reason}: the bag of n-grams reads that far, the Transformer the first sequence_length",
    )


def _batch_size(num_examples):
    """Small corpora get smaller batches, so that a run still makes enough
    optimizer updates: the first of `CLASSIFIER_BATCH_SIZES` that gives an
    epoch `MIN_STEPS_PER_EPOCH` steps, else the smallest."""
    for batch_size in CLASSIFIER_BATCH_SIZES:
        if math.ceil(num_examples / batch_size) >= MIN_STEPS_PER_EPOCH:
            break
    steps = math.ceil(num_examples / batch_size)
    sizes = ", ".join(map(str, CLASSIFIER_BATCH_SIZES))
    return batch_size, (
        f"an epoch of the {num_examples:,} training texts takes {steps} steps; the largest of "
        f"{sizes} that gives at least {MIN_STEPS_PER_EPOCH} steps (else the smallest)"
    )


def _warmup_fraction(num_examples, batch_size, epochs):
    """10% of the planned steps, but at least `MIN_WARMUP_STEPS` (AdamW's
    moment estimates are noisy for its first steps), and at most 30%."""
    planned = epochs * math.ceil(num_examples / batch_size)
    low, high = WARMUP_FRACTION_RANGE
    value = round(min(max(low, MIN_WARMUP_STEPS / planned), high), 3)
    return value, (
        f"{math.floor(value * planned)} warmup steps of the {planned} planned ({epochs} epochs of "
        f"{math.ceil(num_examples / batch_size)}): at least {MIN_WARMUP_STEPS} steps, within "
        f"{low:.0%}-{high:.0%}"
    )


def _ngram_l2(num_examples):
    """The penalty of scikit-learn's `LogisticRegression(C)` on `n` texts,
    `||w||**2 / (2 C n)` against the mean loss, which Keras' per-batch mean
    loss plus `l2 * ||w||**2` equals at `l2 = 1 / (2 C n)`: a bag of n-grams
    regularized as the TF-IDF baseline it competes with."""
    value = float(f"{1.0 / (2 * NGRAM_INVERSE_REGULARIZATION * num_examples):.3g}")
    return value, (
        f"1 / (2 C n) for the {num_examples:,} training texts: the penalty of a logistic "
        f"regression with C = {NGRAM_INVERSE_REGULARIZATION:g}"
    )
