"""WordPiece vocabulary building and the WordPieceTokenizer (tensorflow-text).

Expected ids are read from the vocabulary (`vocabulary.index(word)`), never
from a previous run of the tokenizer.
"""

import os
import shutil
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.text import (
    RESERVED_TOKENS,
    WordPieceTokenizer,
    build_vocabulary,
    save_vocabulary,
)

# Topic words repeated well past the learner's frequency threshold (10), and a
# few rare words that can only be spelled with pieces.
BASE_TEXTS = [
    "The market rose as the government spoke about football.",
    "Football fans cheered while the market fell.",
    "The government said the market would recover.",
    "Music and football on the same night.",
    "A new government policy for the music market.",
]
RARE_TEXTS = ["Café owners joined.", "An unusual xylophone concert.", "Jazz quartet performs."]
CORPUS = BASE_TEXTS * 12 + RARE_TEXTS
FREQUENT_WORDS = ["the", "market", "football", "government", "music"]
VOCABULARY_SIZE = 200
PAD, UNK, CLS, SEP, START, END, MASK = RESERVED_TOKENS


@pytest.fixture(scope="module")
def vocabulary():
    return build_vocabulary(CORPUS, VOCABULARY_SIZE)


@pytest.fixture(scope="module")
def vocabulary_path(vocabulary, tmp_path_factory):
    return save_vocabulary(vocabulary, tmp_path_factory.mktemp("wordpiece") / "vocab.txt")


@pytest.fixture(scope="module")
def tokenizer(vocabulary_path):
    return WordPieceTokenizer(vocabulary_path)


def ids_of(vocabulary, words):
    return [vocabulary.index(word) for word in words]


def encode(tokenizer, texts, length, **kwargs):
    return tokenizer.encode(tf.constant(texts), length, **kwargs).numpy()


# --- build_vocabulary --------------------------------------------------------


def test_reserved_tokens_come_first(vocabulary):
    assert RESERVED_TOKENS[0] == "[PAD]"
    assert vocabulary[: len(RESERVED_TOKENS)] == list(RESERVED_TOKENS)
    assert vocabulary.index("[PAD]") == 0
    assert len(set(vocabulary)) == len(vocabulary), "duplicate tokens"


def test_saved_file_is_one_token_per_line(vocabulary, vocabulary_path):
    with open(vocabulary_path, encoding="utf-8") as vocabulary_file:
        assert vocabulary_file.read().split("\n") == [*vocabulary, ""]


@pytest.mark.parametrize("size", [70, VOCABULARY_SIZE])
def test_vocabulary_size_is_at_most_requested(size, vocabulary):
    built = vocabulary if size == VOCABULARY_SIZE else build_vocabulary(CORPUS, size)
    assert len(RESERVED_TOKENS) < len(built) <= size


@pytest.mark.parametrize("size", [0, 7, -1, 100.0, "100", None])
def test_too_small_or_non_integer_vocabulary_size_raises(size):
    with pytest.raises(ValueError, match="vocabulary_size"):
        build_vocabulary(CORPUS, size)


def test_no_texts_raises():
    with pytest.raises(ValueError):
        build_vocabulary([], 100)


def test_frequent_words_are_whole_tokens(vocabulary, tokenizer):
    for word in FREQUENT_WORDS:
        assert word in vocabulary
    ids = tokenizer.tokenize(tf.constant(["Market FOOTBALL government"])).to_list()
    assert ids == [ids_of(vocabulary, ["market", "football", "government"])]


def test_rare_words_are_spelled_with_continuation_pieces(vocabulary, tokenizer):
    assert "xylophone" not in vocabulary
    tokens = tokenizer.id_to_token(tokenizer.tokenize(tf.constant(["xylophone"]))).to_list()[0]
    tokens = [token.decode() for token in tokens]
    assert len(tokens) > 1 and UNK not in tokens
    assert all(token.startswith("##") for token in tokens[1:])
    assert tokens[0] + "".join(token[2:] for token in tokens[1:]) == "xylophone"


def test_dataset_and_list_give_the_same_vocabulary(vocabulary):
    dataset = tf.data.Dataset.from_tensor_slices(CORPUS)
    assert build_vocabulary(dataset, VOCABULARY_SIZE) == vocabulary


def test_invalid_utf8_in_training_texts_is_replaced_not_an_error():
    built = build_vocabulary([b"\xff\xfe market", *CORPUS], 100)
    assert built[: len(RESERVED_TOKENS)] == list(RESERVED_TOKENS)
    assert "market" in built


def corpus_characters():
    """The distinct characters of CORPUS as the uncased splitter sees them:
    lower-cased, accents stripped, whitespace dropped."""
    text = unicodedata.normalize("NFD", " ".join(CORPUS).lower())
    return {char for char in text if unicodedata.category(char) != "Mn" and not char.isspace()}


# Every character twice (word-initial and "##" form) after the reserved tokens:
# the fewest tokens that spell every word of CORPUS.
SMALLEST_SPELLING_SIZE = len(RESERVED_TOKENS) + 2 * len(corpus_characters())


def test_a_vocabulary_too_small_for_the_characters_is_refused_naming_the_smallest_size():
    with pytest.raises(ValueError, match=rf"use at least {SMALLEST_SPELLING_SIZE}\b"):
        build_vocabulary(CORPUS, SMALLEST_SPELLING_SIZE - 1)
    with pytest.raises(ValueError, match="`vocabulary_size` 50 cannot hold"):
        build_vocabulary(CORPUS, 50)


@pytest.mark.parametrize("extra", [0, 6])
def test_a_small_vocabulary_still_spells_every_corpus_word(tmp_path, extra):
    size = SMALLEST_SPELLING_SIZE + extra
    built = build_vocabulary(CORPUS, size)
    assert len(built) <= size
    assert built[: len(RESERVED_TOKENS)] == list(RESERVED_TOKENS)
    assert len(set(built)) == len(built)
    for char in corpus_characters():
        assert char in built and "##" + char in built, char
    small = WordPieceTokenizer(save_vocabulary(built, tmp_path / "vocab.txt"))
    tokens = small.tokenize(tf.constant(CORPUS))
    ids = tokens.flat_values.numpy()
    assert small.token_id(UNK) not in ids
    # And the pieces spell the words back.
    assert [
        text.decode()
        for text in small.detokenize(small.encode(tf.constant(RARE_TEXTS), 32)).numpy()
    ] == [text.lower().replace("é", "e") for text in RARE_TEXTS]


# --- encode ------------------------------------------------------------------


def test_encode_shape_dtype_and_zero_padding(tokenizer, vocabulary):
    ids = encode(tokenizer, ["the market", "music and football on the same night"], 6)
    assert ids.shape == (2, 6) and ids.dtype == np.int32
    np.testing.assert_array_equal(ids[0], ids_of(vocabulary, ["the", "market"]) + [0, 0, 0, 0])
    # Truncated to the first 6 tokens.
    np.testing.assert_array_equal(
        ids[1], ids_of(vocabulary, "music and football on the same".split())
    )


def test_encode_truncates_long_texts(tokenizer, vocabulary):
    words = ("the market fell while football fans cheered " * 50).split()
    ids = encode(tokenizer, [" ".join(words)], 16)
    assert ids.shape == (1, 16)
    np.testing.assert_array_equal(ids[0], ids_of(vocabulary, words[:16]))


def test_add_cls_puts_cls_first(tokenizer, vocabulary):
    ids = encode(
        tokenizer, ["the market", "the market fell while football fans cheered"], 5, add_cls=True
    )
    cls = vocabulary.index(CLS)
    np.testing.assert_array_equal(ids[0], [cls, *ids_of(vocabulary, ["the", "market"]), 0, 0])
    np.testing.assert_array_equal(
        ids[1], [cls, *ids_of(vocabulary, ["the", "market", "fell", "while"])]
    )


def test_add_start_end_wraps_even_when_truncated(tokenizer, vocabulary):
    start, end = vocabulary.index(START), vocabulary.index(END)
    ids = encode(
        tokenizer,
        ["the market", "the market fell while football fans cheered"],
        6,
        add_start_end=True,
    )
    np.testing.assert_array_equal(
        ids[0], [start, *ids_of(vocabulary, ["the", "market"]), end, 0, 0]
    )
    # Truncated: [END] is still the last real token, after 4 text tokens.
    np.testing.assert_array_equal(
        ids[1], [start, *ids_of(vocabulary, ["the", "market", "fell", "while"]), end]
    )
    both = encode(
        tokenizer, ["the market fell while football"], 6, add_cls=True, add_start_end=True
    )
    cls = vocabulary.index(CLS)
    np.testing.assert_array_equal(
        both[0], [cls, start, *ids_of(vocabulary, ["the", "market", "fell"]), end]
    )


@pytest.mark.parametrize(
    "flags", [{"add_cls": True, "add_start_end": True}, {"add_start_end": True}]
)
def test_sequence_length_without_room_for_tokens_raises(tokenizer, flags):
    length = int(flags.get("add_cls", False)) + 2
    with pytest.raises(ValueError, match="sequence_length"):
        tokenizer.encode(tf.constant(["the market"]), length, **flags)


def test_lower_casing_and_accent_stripping(tokenizer, vocabulary):
    ids = encode(tokenizer, ["Café", "cafe", "CAFÉ", "café", "CAFE"], 8)
    for row in ids[1:]:
        np.testing.assert_array_equal(row, ids[0])
    assert vocabulary.index(UNK) not in ids[0] and ids[0][0] != 0
    np.testing.assert_array_equal(
        encode(tokenizer, ["MARKET Government"], 4)[0],
        ids_of(vocabulary, ["market", "government"]) + [0, 0],
    )


def test_empty_whitespace_and_invalid_utf8_encode_without_error(tokenizer, vocabulary):
    texts = [b"", b"   \t\n ", b"\xff\xfe", b"market \xff\xfe football"]
    ids = tokenizer.encode(tf.constant(texts), 8).numpy()
    assert ids.shape == (4, 8)
    np.testing.assert_array_equal(ids[:2], 0)
    unk = vocabulary.index(UNK)
    np.testing.assert_array_equal(ids[2], [unk] + [0] * 7)
    np.testing.assert_array_equal(
        ids[3], [vocabulary.index("market"), unk, vocabulary.index("football")] + [0] * 5
    )


@pytest.mark.parametrize(
    "text",
    [("the market " * 100_000), "a" * 1_000_000, "é" * 500_000 + "x"],
    ids=["words", "one_long_word", "multibyte"],
)
def test_one_megabyte_text_encodes(tokenizer, vocabulary, text):
    assert len(text.encode("utf-8")) >= 1_000_000
    ids = encode(tokenizer, [text, "music"], 16, add_cls=True)
    assert ids.shape == (2, 16)
    np.testing.assert_array_equal(ids[1, :2], [vocabulary.index(CLS), vocabulary.index("music")])
    if text.startswith("the market"):
        np.testing.assert_array_equal(
            ids[0, 1:], ids_of(vocabulary, ["the", "market"] * 7 + ["the"])
        )
    else:
        assert ids[0, 1] != 0  # at least one token, [UNK] or pieces


def test_leading_whitespace_does_not_hide_the_words(tokenizer, vocabulary):
    ids = encode(tokenizer, ["\n" * 300 + "the market"], 16)
    np.testing.assert_array_equal(ids[0, :2], ids_of(vocabulary, ["the", "market"]))


def test_unknown_words_map_to_unk(tokenizer, vocabulary):
    unk = vocabulary.index(UNK)
    ids = encode(tokenizer, ["the λόγος market", "🙂"], 5)
    np.testing.assert_array_equal(
        ids[0], [vocabulary.index("the"), unk, vocabulary.index("market"), 0, 0]
    )
    np.testing.assert_array_equal(ids[1], [unk, 0, 0, 0, 0])


def test_user_text_cannot_produce_special_tokens(tokenizer, vocabulary):
    specials = [vocabulary.index(token) for token in (PAD, CLS, SEP, START, END, MASK)]
    text = "[PAD] [CLS] [SEP] [START] [END] [MASK]"
    ids = tokenizer.tokenize(tf.constant([text])).flat_values.numpy()
    assert len(ids) >= 6
    assert not set(ids.tolist()) & set(specials)


def test_detokenize_recovers_lower_cased_words(tokenizer):
    texts = ["The Market rose as the Government spoke", "An unusual XYLOPHONE concert", "Café"]
    for flags in ({}, {"add_cls": True}, {"add_start_end": True}):
        ids = tokenizer.encode(tf.constant(texts), 40, **flags)
        words = [text.decode() for text in tokenizer.detokenize(ids).numpy()]
        assert words == [
            "the market rose as the government spoke",
            "an unusual xylophone concert",
            "cafe",
        ]
    ragged = tokenizer.tokenize(tf.constant(texts))
    assert tokenizer.detokenize(ragged).numpy()[1] == b"an unusual xylophone concert"


def test_id_to_token(tokenizer, vocabulary):
    ids = np.array(
        [[vocabulary.index("market"), 0], [vocabulary.index(CLS), vocabulary.index(UNK)]]
    )
    tokens = tokenizer.id_to_token(ids).numpy()
    assert tokens.shape == (2, 2)
    assert tokens.tolist() == [[b"market", b"[PAD]"], [b"[CLS]", b"[UNK]"]]
    assert tokenizer.vocabulary_size == len(vocabulary)


# --- loading a vocabulary ----------------------------------------------------


def test_vocabulary_missing_reserved_tokens_raises(tmp_path):
    tokens = [token for token in RESERVED_TOKENS if token not in (START, MASK)] + ["market", "##s"]
    path = save_vocabulary(tokens, tmp_path / "vocab.txt")
    with pytest.raises(ValueError) as error:
        WordPieceTokenizer(path)
    assert "[START]" in str(error.value).split("missing")[-1]
    assert "[MASK]" in str(error.value).split("missing")[-1]


def test_vocabulary_with_pad_not_first_raises(tmp_path):
    tokens = ["market", *RESERVED_TOKENS]
    with pytest.raises(ValueError, match=r"\[PAD\]"):
        WordPieceTokenizer(save_vocabulary(tokens, tmp_path / "vocab.txt"))


def test_missing_vocabulary_file_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.txt"):
        WordPieceTokenizer(tmp_path / "nowhere.txt")


# --- graphs and SavedModels --------------------------------------------------


def test_encode_in_tf_function_with_string_signature(tokenizer):
    texts = ["the market fell", "", "Café football fans cheered while the market rose"]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def encode_graph(text):
        return tokenizer.encode(text, 8, add_cls=True)

    concrete = encode_graph.get_concrete_function()
    assert concrete.structured_outputs.shape.as_list() == [None, 8]
    assert concrete.structured_outputs.dtype == tf.int32
    np.testing.assert_array_equal(
        encode_graph(tf.constant(texts)), encode(tokenizer, texts, 8, add_cls=True)
    )
    np.testing.assert_array_equal(
        encode_graph(tf.constant(texts[:1])), encode(tokenizer, texts[:1], 8, add_cls=True)
    )


def test_saved_tokenizer_carries_its_vocabulary(vocabulary_path, tmp_path):
    # The vocabulary must travel as an asset: the original file is gone at load time.
    copy = shutil.copy(vocabulary_path, tmp_path / "vocab_copy.txt")
    module = tf.Module()
    module.tokenizer = WordPieceTokenizer(copy)
    module.encode = tf.function(
        lambda text: module.tokenizer.encode(text, 8, add_cls=True),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    texts = tf.constant(["The market fell", "xylophone λόγος"])
    expected = module.encode(texts).numpy()
    tf.saved_model.save(module, str(tmp_path / "saved"))
    os.remove(copy)
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    np.testing.assert_array_equal(loaded.encode(texts).numpy(), expected)


# --- punctuation spacing ------------------------------------------------------

# Sentences written the way people write them; a cased vocabulary learned from
# them must give them back character for character.
PUNCTUATED_TEXTS = [
    "Jesus said, “Don't be afraid.”",
    "(See John 3:16, verse 2.)",
    "¿Dónde está? ¡Aquí!",
    "The Lord’s house is well-known; it was 10,000 cubits...",
    '"Yes," she said: "go."',
]


@pytest.fixture(scope="module")
def cased_tokenizer(tmp_path_factory):
    vocabulary = build_vocabulary(PUNCTUATED_TEXTS * 12, 300, lower_case=False)
    path = save_vocabulary(vocabulary, tmp_path_factory.mktemp("cased") / "vocab.txt")
    return WordPieceTokenizer(path, lower_case=False)


def test_detokenize_rejoins_punctuation_the_splitter_separated(cased_tokenizer):
    ids = cased_tokenizer.tokenize(tf.constant(PUNCTUATED_TEXTS[:4]))
    # The splitter really separated them: the words joined by spaces differ.
    spaced = tf.strings.reduce_join(
        cased_tokenizer._tokenizer.detokenize(ids), separator=" ", axis=-1
    )
    assert all(b" ," in text or b" ." in text or b" ?" in text for text in spaced.numpy())
    texts = [text.decode() for text in cased_tokenizer.detokenize(ids).numpy()]
    assert texts == PUNCTUATED_TEXTS[:4]


def test_straight_double_quotes_keep_their_spaces(cased_tokenizer):
    # An opening and a closing '"' look alike; only the other marks are rejoined.
    ids = cased_tokenizer.tokenize(tf.constant(PUNCTUATED_TEXTS[4:]))
    assert cased_tokenizer.detokenize(ids).numpy()[0].decode() == '" Yes, " she said: " go. "'
