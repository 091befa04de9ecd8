"""The plain-Python `detokenize` returns what `WordPieceTokenizer.detokenize` returns.

On real sentences (Bible verses, Spanish sources lower-cased, English
targets cased: verse numbers, apostrophes, hyphens, quotes, brackets) and on
ids no tokenizer writes: `[UNK]`, ids after `[END]`, ids past the vocabulary.
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data import load_translation_data
from keras_transformer.text import WordPieceTokenizer, build_vocabulary, save_vocabulary
from keras_transformer.text.vocabulary import detokenize, join_punctuation_text, read_vocabulary

SENTENCES = 300


@pytest.fixture(scope="module")
def bible(tmp_path_factory):
    data = load_translation_data("bible:es-en")
    sources, targets = data.train.sources[:2000], data.train.targets[:2000]
    folder = tmp_path_factory.mktemp("vocabularies")
    save_vocabulary(build_vocabulary(sources, 1500), folder / "source.txt")
    save_vocabulary(build_vocabulary(targets, 1500, lower_case=False), folder / "target.txt")
    return {
        "source": (
            WordPieceTokenizer(folder / "source.txt"),
            sources[-SENTENCES:],
            folder / "source.txt",
        ),
        "target": (
            WordPieceTokenizer(folder / "target.txt", lower_case=False),
            targets[-SENTENCES:],
            folder / "target.txt",
        ),
    }


def tensorflow_texts(tokenizer, token_ids):
    return [text.decode("utf-8") for text in tokenizer.detokenize(tf.constant(token_ids)).numpy()]


@pytest.mark.parametrize("side", ["source", "target"])
def test_detokenize_is_the_tokenizers_on_bible_verses(bible, side):
    tokenizer, texts, path = bible[side]
    vocabulary = read_vocabulary(path)
    assert vocabulary == tokenizer.vocabulary
    token_ids = tokenizer.encode(tf.constant(texts), 96, add_start_end=True).numpy()
    expected = tensorflow_texts(tokenizer, token_ids)
    assert detokenize(token_ids, vocabulary) == expected
    # The verses have what join_punctuation joins, so this compares more than word pieces.
    assert sum("'" in text or ":" in text or "-" in text for text in expected) > 10


def test_detokenize_of_ids_no_tokenizer_writes(bible):
    tokenizer, _, path = bible["target"]
    vocabulary = read_vocabulary(path)
    rng = np.random.default_rng(0)
    size = len(vocabulary)
    # reserved ids, [UNK], past the vocabulary
    token_ids = rng.integers(0, size + 5, size=(200, 24))
    token_ids[:, 10] = vocabulary.index("[END]")  # more ids after [END]
    token_ids[:50, 0] = [index for index, token in enumerate(vocabulary) if token.startswith("##")][
        :50
    ]
    token_ids[50:60, 5:] = 0  # padding inside a row, then ids again
    assert detokenize(token_ids, vocabulary) == tensorflow_texts(tokenizer, token_ids)


@pytest.mark.parametrize(
    "text",
    [
        "In the beginning , God said : 3 : 16 is the Lord ' s house .",
        "( a ) [ b ] ¿ qué ? ¡ sí ! « c » “ d ” ‘ e ’ well - known x - 2 ½ - ² 5 , 000 ...",
        "Ⅻ ' s Ⅻ - Ⅻ 一 - 二 ß ' Ω",
    ],
)
def test_join_punctuation_text_is_the_tensorflow_one(text):
    from keras_transformer.text.wordpiece import join_punctuation

    expected = join_punctuation(tf.constant([text])).numpy()[0].decode("utf-8")
    assert join_punctuation_text(text) == expected


def test_read_vocabulary_names_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        read_vocabulary(tmp_path / "missing.txt")
    (tmp_path / "bad.txt").write_text("a\nb\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"not one of our vocabularies.*\[PAD\]"):
        read_vocabulary(tmp_path / "bad.txt")
