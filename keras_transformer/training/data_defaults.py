"""Settings chosen from the training data when the user left them unset.

A settings field that can be chosen takes `None` for "choose from the data".
Before training, `classifier_settings_from_data` and
`translator_settings_from_data` look at the training split, fill those Nones
and return one `Choice` (name, value, reason) for each, which the run prints
and records in `settings.json`; `--resume` reads the values back and never
chooses again. A value the user set is never changed.

The rules, and why:

* Vocabulary size: the word types seen at least `FREQUENT_WORD_COUNT` times,
  plus room for the reserved tokens and every character (alone and as a `##`
  continuation), within `VOCABULARY_SIZE_RANGE`. A WordPiece seen only a few
  times gets an embedding trained on a few examples, i.e. noise; rarer words
  are better spelled from pieces that occur often.
* Sequence length: a percentile of the training texts' WordPiece lengths,
  rounded up to a multiple of 8, capped by `max_length`. The classifier takes
  the 95th: a truncated text keeps its label. The translator takes the 99th:
  a truncated pair teaches the model to end a sentence early (its target
  still ends with `[END]`) or to translate words it never saw.
* Classifier batch size and warmup: see `_batch_size` and `_warmup_fraction`.
* The bag of n-grams' L2 penalty: see `_ngram_l2`.
* Translator size, regularization and learning-rate schedule: by the number
  of target-side words (a pair of 5 words teaches less than a verse of 25),
  from `TRANSLATOR_TIERS`; early stopping's patience by the schedule.
"""

import dataclasses
import math

import numpy as np

from keras_transformer.text.vocabulary import RESERVED_TOKENS

FREQUENT_WORD_COUNT = 5
VOCABULARY_SIZE_RANGE = (1000, 8000)
LENGTH_MULTIPLE = 8
CLASSIFIER_LENGTH_PERCENTILE = 95
# The bag of n-grams reads nearly whole texts: long ones are classified by words
# the Transformer's first `sequence_length` pieces do not reach.
NGRAM_LENGTH_PERCENTILE = 99
NGRAM_MAX_LENGTH = 4096
TRANSLATOR_LENGTH_PERCENTILE = 99
CLASSIFIER_BATCH_SIZES = (32, 16, 8)  # the first that gives an epoch enough steps
MIN_STEPS_PER_EPOCH = 50
MIN_WARMUP_STEPS = 50
WARMUP_FRACTION_RANGE = (0.1, 0.3)
NGRAM_INVERSE_REGULARIZATION = (
    10.0  # the C of scikit-learn's LogisticRegression that `_ngram_l2` matches
)
TRANSLATOR_WARMUP_FRACTION = 0.1
TRANSLATOR_WARMUP_RANGE = (100, 500)

# (fewest target-side training words, name, values), largest corpora first.
# The large tier keeps the values tuned on the Bible corpora; smaller corpora
# overfit sooner, so they get more dropout and, when tiny, a smaller model
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
            "label_smoothing": 0.2,
            "schedule": "inverse_sqrt",
        },
    ),
)
# Early stopping's patience by schedule: the cosine's best epochs come last,
# where early stopping on a noisy validation metric would have cut it off.
TRANSLATOR_PATIENCE = {"inverse_sqrt": 3, "cosine": 0}


# What a large corpus (BBC News, the Bible corpora) gets; `sequence_length` is `max_length`.
LARGE_CORPUS = {
    "vocabulary_size": VOCABULARY_SIZE_RANGE[1],
    "target_vocabulary_size": VOCABULARY_SIZE_RANGE[1],
    "batch_size": CLASSIFIER_BATCH_SIZES[0],
    "warmup_fraction": WARMUP_FRACTION_RANGE[0],
    "ngram_length": None,  # the bag of n-grams reads what the Transformer reads
    "ngram_l2": 1.0 / (2 * NGRAM_INVERSE_REGULARIZATION * 2000),  # BBC News' number of texts
    "warmup_steps": TRANSLATOR_WARMUP_RANGE[1],
    **TRANSLATOR_TIERS[0][2],
    "patience": TRANSLATOR_PATIENCE[TRANSLATOR_TIERS[0][2]["schedule"]],
}


@dataclasses.dataclass(frozen=True)
class Choice:
    """One setting chosen from the data, and why."""

    name: str
    value: object
    reason: str

    def line(self):
        return f"{self.name} {self.value}: {self.reason}"


def choices_record(choices):
    """`{name: {"value", "reason"}}`, as `settings.json` keeps the choices."""
    return {choice.name: {"value": choice.value, "reason": choice.reason} for choice in choices}


def check_chosen(settings, *names):
    """Raises ValueError naming those of `names` still None (to be chosen from
    the data), for code that builds a model from settings directly."""
    unset = [name for name in names if getattr(settings, name) is None]
    if unset:
        raise ValueError(
            f"{type(settings).__name__} leaves {', '.join(unset)} to be chosen from the training data, "
            "which only training does: set them (or take `large_corpus_settings`) to build a model without training it."
        )
    return settings


def large_corpus_settings(settings):
    """A copy of `settings` with its None fields as a large corpus fills them:
    for code that builds a model of the default sizes without training data
    (benchmarks of speed and serving)."""
    values = {**LARGE_CORPUS, "sequence_length": settings.max_length}
    return dataclasses.replace(
        settings,
        **{name: values[name] for name in settings.FROM_DATA if getattr(settings, name) is None},
    )


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

    settings, choices = _fill(
        settings,
        [
            (
                "vocabulary_size",
                lambda current: _vocabulary_size(
                    count_words(texts), f"{len(texts):,} training texts"
                ),
            ),
        ],
    )
    tokenizer = build_tokenizer(settings.vocabulary_size)
    add_cls = settings.pooling == "cls"
    what = "the training texts' WordPiece lengths" + (" (+1 for [CLS])" if add_cls else "")
    lengths = []  # counted once, up to the longest either rule may choose

    def lengths_up_to(length):
        if not lengths:
            longest = max(
                settings.max_length, NGRAM_MAX_LENGTH if settings.bag_of_ngrams is not False else 0
            )
            lengths.append(_wordpiece_lengths(tokenizer, texts, longest) + int(add_cls))
        return np.minimum(lengths[0], length)

    def sequence_length(current):
        return _sequence_length(
            lengths_up_to(current.max_length),
            CLASSIFIER_LENGTH_PERCENTILE,
            current.max_length,
            what,
        )

    def ngram_length(current):
        value, reason = _sequence_length(
            lengths_up_to(NGRAM_MAX_LENGTH), NGRAM_LENGTH_PERCENTILE, NGRAM_MAX_LENGTH, what
        )
        reason = reason.replace(f"(cap max_length {NGRAM_MAX_LENGTH})", f"(cap {NGRAM_MAX_LENGTH})")
        if value <= current.sequence_length:
            return (
                current.sequence_length,
                f"{reason}: the bag of n-grams reads what the Transformer reads",
            )
        return (
            value,
            f"{reason}: the bag of n-grams reads that far, the Transformer the first sequence_length",
        )

    more_settings, more_choices = _fill(
        settings,
        [
            ("sequence_length", sequence_length),
            *([("ngram_length", ngram_length)] if settings.bag_of_ngrams is not False else []),
        ],
    )
    return more_settings, choices + more_choices


def classifier_settings_from_counts(settings, num_examples):
    """`classifier_settings_from_data` for the fields chosen from the number
    of training texts alone (`batch_size`, `warmup_fraction`, and `ngram_l2`
    with `bag_of_ngrams`): what training from a token folder still chooses."""
    return _fill(
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
    from keras_transformer.text.wordpiece import count_words  # needs TensorFlow

    pairs = f"{len(sources):,} training pairs"

    def target_vocabulary_size(current):
        if current.shared_vocabulary:
            return current.vocabulary_size, "the shared vocabulary's size"
        if settings.vocabulary_size is not None:
            return (
                current.vocabulary_size,
                "the same as the vocabulary_size that was set, for both sides",
            )
        return _vocabulary_size(
            count_words(targets, lower_case=False), f"the targets of the {pairs}"
        )

    def vocabulary_size(current):
        if current.shared_vocabulary:
            # One cased vocabulary spells both sides.
            return _vocabulary_size(
                count_words([*sources, *targets], lower_case=False), f"both sides of the {pairs}"
            )
        return _vocabulary_size(count_words(sources), f"the sources of the {pairs}")

    settings, choices = _fill(
        settings,
        [
            ("vocabulary_size", vocabulary_size),
            ("target_vocabulary_size", target_vocabulary_size),
        ],
    )
    source_tokenizer, target_tokenizer = build_tokenizers(
        settings.vocabulary_size, settings.target_vocabulary_size
    )

    def sequence_length(current):
        # Sources fill `sequence_length` tokens; targets `sequence_length - 1`
        # (the model's inputs and labels are one longer, with [START] and [END]).
        lengths = np.maximum(
            _wordpiece_lengths(source_tokenizer, sources, current.max_length),
            _wordpiece_lengths(target_tokenizer, targets, current.max_length) + 1,
        )
        return _sequence_length(
            lengths,
            TRANSLATOR_LENGTH_PERCENTILE,
            current.max_length,
            "the training pairs' WordPiece lengths (the longer side; a target +1)",
        )

    more_settings, more_choices = _fill(settings, [("sequence_length", sequence_length)])
    return more_settings, choices + more_choices


def translator_settings_from_counts(settings, num_pairs, target_words):
    """`translator_settings_from_data` for the fields chosen from counts alone
    (the size tier by `target_words`, `warmup_steps` by `num_pairs`): what
    training from a token folder still chooses."""
    pairs = f"{num_pairs:,} training pairs"
    floor, tier, values = next(tier for tier in TRANSLATOR_TIERS if target_words >= tier[0])
    size = f"{target_words:,} target-side words in the {pairs}: a {tier} corpus" + (
        f" (at least {floor:,} words)" if floor else f" (under {TRANSLATOR_TIERS[-2][0]:,} words)"
    )

    def from_tier(name):
        return lambda current: (values[name], size)

    def patience(current):
        return TRANSLATOR_PATIENCE[current.schedule], (
            "no early stopping under the cosine: its last epochs, at the lowest rates, are its best"
            if current.schedule == "cosine"
            else f"epochs without a better {current.monitor}"
        )

    return _fill(
        settings,
        [
            *[(name, from_tier(name)) for name in values],
            ("patience", patience),
            (
                "warmup_steps",
                lambda current: _warmup_steps(num_pairs, current.batch_size, current.epochs),
            ),
        ],
    )


def choices_from_record(record):
    """The `Choice`s of a `choices_record`, in its order."""
    return [Choice(name, chosen["value"], chosen["reason"]) for name, chosen in record.items()]


def _fill(settings, rules):
    """Applies `(name, rule)` pairs in order to the fields that are None; a rule
    gets the settings filled so far and returns `(value, reason)`."""
    choices = []
    for name, rule in rules:
        if getattr(settings, name) is None:
            value, reason = rule(settings)
            settings = dataclasses.replace(settings, **{name: value})
            choices.append(Choice(name, value, reason))
    return settings, choices


def vocabulary_size_for(texts):
    """The WordPiece vocabulary size the rule above picks for `texts`, with its reason."""
    from keras_transformer.text.wordpiece import count_words  # needs TensorFlow

    return _vocabulary_size(count_words(texts), f"{len(texts):,} texts")


def _vocabulary_size(word_counts, what):
    frequent = sum(count >= FREQUENT_WORD_COUNT for count in word_counts.values())
    characters = {character for word in word_counts for character in word}
    alphabet = len(RESERVED_TOKENS) + 2 * len(characters)  # each character alone and as "##c"
    low, high = VOCABULARY_SIZE_RANGE
    value = min(max(frequent + alphabet, low), high)
    return value, (
        f"{frequent:,} word types occur at least {FREQUENT_WORD_COUNT} times in {what}, plus {alphabet} "
        f"reserved tokens and characters, kept within {low}-{high}"
    )


def _wordpiece_lengths(tokenizer, texts, max_length, chunk=1024):
    """Each text's number of WordPieces, counted up to `max_length` (no text costs more)."""
    import tensorflow as tf

    lengths = [
        tokenizer.tokenize(tf.constant(texts[start : start + chunk]), max_tokens=max_length)
        .row_lengths()
        .numpy()
        for start in range(0, len(texts), chunk)
    ]
    return np.concatenate(lengths)


def _sequence_length(lengths, percentile, max_length, what):
    # "higher": a length some text really has, so that text still fits.
    observed = int(np.percentile(lengths, percentile, method="higher"))
    rounded = LENGTH_MULTIPLE * math.ceil(max(observed, 1) / LENGTH_MULTIPLE)
    value = min(rounded, max_length)
    return value, (
        f"the {percentile}th percentile of {what} is {observed}, rounded up to a multiple of "
        f"{LENGTH_MULTIPLE} (cap max_length {max_length})"
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
        f"an epoch of the {num_examples:,} training texts takes {steps} steps; the largest of {sizes} "
        f"that gives at least {MIN_STEPS_PER_EPOCH} steps (else the smallest)"
    )


def _warmup_fraction(num_examples, batch_size, epochs):
    """10% of the planned steps, but at least `MIN_WARMUP_STEPS` (AdamW's
    moment estimates are noisy for its first steps), and at most 30%."""
    planned = epochs * math.ceil(num_examples / batch_size)
    low, high = WARMUP_FRACTION_RANGE
    value = round(min(max(low, MIN_WARMUP_STEPS / planned), high), 3)
    return value, (
        f"{math.floor(value * planned)} warmup steps of the {planned} planned ({epochs} epochs of "
        f"{math.ceil(num_examples / batch_size)}): at least {MIN_WARMUP_STEPS} steps, within {low:.0%}-{high:.0%}"
    )


def _ngram_l2(num_examples):
    """The penalty of scikit-learn's `LogisticRegression(C)` on `n` texts,
    `||w||**2 / (2 C n)` against the mean loss, which Keras' per-batch mean
    loss plus `l2 * ||w||**2` equals at `l2 = 1 / (2 C n)`: a bag of n-grams
    regularized as the TF-IDF baseline it competes with."""
    value = float(f"{1.0 / (2 * NGRAM_INVERSE_REGULARIZATION * num_examples):.3g}")
    return value, (
        f"1 / (2 C n) for the {num_examples:,} training texts: the penalty of a logistic regression "
        f"with C = {NGRAM_INVERSE_REGULARIZATION:g}"
    )


def _warmup_steps(num_examples, batch_size, epochs):
    planned = epochs * math.ceil(num_examples / batch_size)
    low, high = TRANSLATOR_WARMUP_RANGE
    value = min(max(low, round(TRANSLATOR_WARMUP_FRACTION * planned)), high)
    return value, (
        f"{TRANSLATOR_WARMUP_FRACTION:.0%} of the {planned} planned steps ({epochs} epochs of "
        f"{math.ceil(num_examples / batch_size)}), kept within {low}-{high}"
    )
