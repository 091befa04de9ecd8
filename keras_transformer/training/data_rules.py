"""Settings chosen from the training data when the user left them unset: what
both tasks share.

A settings field that can be chosen takes `None` for "choose from the data"
(its settings class lists it in `FROM_DATA`). Before training, each task's
rules (`classifier.data_rules`, `translator.data_rules`) look at the training
split, fill those Nones and return one `Choice` (name, value, reason) for
each, which the run prints and records in `settings.json`; `--resume` reads
the values back and never chooses again. A value the user set is never
changed.

The rules both tasks use, and why:

* Vocabulary size: the word types seen at least `FREQUENT_WORD_COUNT` times,
  plus room for the reserved tokens and every character (alone and as a `##`
  continuation), within `VOCABULARY_SIZE_RANGE`. A WordPiece seen only a few
  times gets an embedding trained on a few examples, i.e. noise; rarer words
  are better spelled from pieces that occur often.
* Sequence length: a percentile of the training texts' WordPiece lengths,
  rounded up to a multiple of `LENGTH_MULTIPLE`, capped by `max_length`; each
  task picks its percentile.
"""

import dataclasses
import math

import numpy as np

from keras_transformer.text.vocabulary import RESERVED_TOKENS

FREQUENT_WORD_COUNT = 5
VOCABULARY_SIZE_RANGE = (1000, 8000)
LENGTH_MULTIPLE = 8


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


def choices_from_record(record):
    """The `Choice`s of a `choices_record`, in its order."""
    return [Choice(name, chosen["value"], chosen["reason"]) for name, chosen in record.items()]


def check_chosen(settings, *names):
    """Raises ValueError naming those of `names` still None (to be chosen from
    the data), for code that builds a model from settings directly."""
    unset = [name for name in names if getattr(settings, name) is None]
    if unset:
        raise ValueError(
            f"{type(settings).__name__} leaves {', '.join(unset)} to be chosen from the training "
            "data, which only training does: set them (or take `large_corpus_settings`) to build "
            "a model without training it."
        )
    return settings


def large_corpus_settings(settings):
    """A copy of `settings` with its None fields as a large corpus fills them
    (the settings class' `LARGE_CORPUS`, `sequence_length` its `max_length`):
    for code that builds a model of the default sizes without training data
    (benchmarks of speed and serving)."""
    values = {**settings.LARGE_CORPUS, "sequence_length": settings.max_length}
    return dataclasses.replace(
        settings,
        **{name: values[name] for name in settings.FROM_DATA if getattr(settings, name) is None},
    )


def fill_from_data(settings, rules):
    """Applies `(name, rule)` pairs in order to the fields that are None; a rule
    gets the settings filled so far and returns `(value, reason)`.

    Returns:
        `(settings, choices)`: a filled copy and a `Choice` per filled field.
    """
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

    return vocabulary_size_from_counts(count_words(texts), f"{len(texts):,} texts")


def vocabulary_size_from_counts(word_counts, what):
    """`(size, reason)`: the vocabulary size rule for `word_counts` (`{word: count}`) of `what`."""
    frequent = sum(count >= FREQUENT_WORD_COUNT for count in word_counts.values())
    characters = {character for word in word_counts for character in word}
    alphabet = len(RESERVED_TOKENS) + 2 * len(characters)  # each character alone and as "##c"
    low, high = VOCABULARY_SIZE_RANGE
    value = min(max(frequent + alphabet, low), high)
    return value, (
        f"{frequent:,} word types occur at least {FREQUENT_WORD_COUNT} times in {what}, plus "
        f"{alphabet} reserved tokens and characters, kept within {low}-{high}"
    )


def wordpiece_lengths(tokenizer, texts, max_length, chunk=1024):
    """Each text's number of WordPieces, counted up to `max_length` (no text costs more)."""
    import tensorflow as tf

    lengths = [
        tokenizer.tokenize(tf.constant(texts[start : start + chunk]), max_tokens=max_length)
        .row_lengths()
        .numpy()
        for start in range(0, len(texts), chunk)
    ]
    return np.concatenate(lengths)


def length_percentile(lengths, percentile, max_length, what):
    """`(length, reason)`: the `percentile` of `lengths` (of `what`), rounded up to a
    multiple of `LENGTH_MULTIPLE`, at most `max_length`."""
    # "higher": a length some text really has, so that text still fits.
    observed = int(np.percentile(lengths, percentile, method="higher"))
    rounded = LENGTH_MULTIPLE * math.ceil(max(observed, 1) / LENGTH_MULTIPLE)
    value = min(rounded, max_length)
    return value, (
        f"the {percentile}th percentile of {what} is {observed}, rounded up to a multiple of "
        f"{LENGTH_MULTIPLE} (cap max_length {max_length})"
    )
