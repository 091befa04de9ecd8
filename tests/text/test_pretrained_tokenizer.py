"""`PretrainedTokenizer`: a BERT-family checkpoint's tokenization in
TensorFlow ops, checked id for id against Hugging Face's `BertTokenizer`
(transformers' default, on the `tokenizers` library) on the same vocabulary."""

import json
import unicodedata

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.text import PretrainedTokenizer

transformers = pytest.importorskip("transformers")

# Each one aimed at a rule of BERT's tokenization.
BATTERY = [
    "Hello, World! How's it going?",
    "Café naïve résumé Ångström façade",
    "ÉCOLE Über STRASSE straße",
    "ΣΟΦΟΣ σοφός Ὀδυσσεύς",
    "İstanbul ǅemal ﬁne",
    "我爱北京天安门 and 日本語のテキスト",
    "한국어 텍스트",
    "I ❤️ pizza 🍕, flags 🇫🇷",
    "family 👨‍👩‍👧 ok",
    "«quoted» — dash… ¿qué? ¡sí!",
    "a.b,c;d:e (x) [y] {z} <w>",
    "$100 & 50% off #tag @user ~tilde^ `tick` |pipe| back\\slash",
    "see https://example.com/path?q=1&r=two#frag now",
    "mail someone@example.org or 192.168.0.1:8080",
    "a" * 150,
    "x" * 100 + " " + "y" * 101,
    "é" * 101,
    "é" * 60 + " " + "я" * 70,
    "supercalifragilisticexpialidocious",
    "null\u0000byte bell\u0007 zero\u200bwidth soft\u00adhyphen",
    "nbsp\u00a0space ideographic\u3000space em\u2003space",
    "tab\there new\nline carriage\rreturn form\x0cfeed",
    "replacement \ufffd char",
    "combining e\u0301 and \u212b sign",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ",
    "snowman ☃ and unknown ꙮ",
    "3.14159 1,000,000 ½ ²",
    "",
    "   ",
]
SPECIAL = ["[PAD]"] + [f"[unused{i}]" for i in range(5)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["hello", "world", "how", "it", "going", "cafe", "naive", "the", "space", "new"]
PIECES = ["##s", "##ing", "##ed", "##llo", "##ace"]
# Left out of the vocabulary, so that their words come out as [UNK].
UNKNOWN = {"☃", "ꙮ", "🍕"}


def vocabulary_for(lower_case):
    """Special tokens first (as BERT's), whole words, pieces, and every
    character of the battery (normalized as BERT would) in both forms."""
    characters = set()
    for text in BATTERY:
        if lower_case:
            text = "".join(
                c
                for c in unicodedata.normalize("NFD", text.lower())
                if unicodedata.category(c) != "Mn"
            )
        characters.update(c for c in text if not c.isspace())
    characters -= UNKNOWN
    singles = sorted(characters)
    tokens = SPECIAL + WORDS + PIECES + singles + ["##" + c for c in singles]
    return list(dict.fromkeys(tokens))


def write_vocabulary(folder, lower_case):
    path = folder / "vocab.txt"
    path.write_text("".join(token + "\n" for token in vocabulary_for(lower_case)), encoding="utf-8")
    return path


def reference_tokenizer(vocabulary_path, lower_case=True):
    """Hugging Face's `BertTokenizer` (built on the `tokenizers` library) of a vocab.txt."""
    tokens = vocabulary_path.read_text(encoding="utf-8").splitlines()
    vocabulary = {token: index for index, token in enumerate(tokens)}
    return transformers.BertTokenizer(vocab=vocabulary, do_lower_case=lower_case)


def reference_ids(vocabulary_path, lower_case, texts=BATTERY):
    reference = reference_tokenizer(vocabulary_path, lower_case)
    return [reference.encode(text, add_special_tokens=False) for text in texts]


def our_ids(tokenizer, texts=BATTERY):
    return [row.tolist() for row in tokenizer.tokenize(tf.constant(texts)).numpy()]


@pytest.mark.parametrize("lower_case", [True, False], ids=["uncased", "cased"])
def test_token_ids_equal_hugging_faces_on_the_battery(tmp_path, lower_case):
    vocabulary_path = write_vocabulary(tmp_path, lower_case)
    expected = reference_ids(vocabulary_path, lower_case)
    got = our_ids(PretrainedTokenizer(vocabulary_path, lower_case=lower_case))
    unknown_id = vocabulary_for(lower_case).index("[UNK]")
    assert any(unknown_id in row for row in expected)  # the battery reaches [UNK]
    assert sum(len(row) for row in expected) > 300
    mismatched = [(text, e, g) for text, e, g in zip(BATTERY, expected, got, strict=True) if e != g]
    assert not mismatched, mismatched


def test_encode_wraps_in_cls_and_sep_and_pads_with_pad(tmp_path):
    vocabulary_path = write_vocabulary(tmp_path, True)
    tokenizer = PretrainedTokenizer(vocabulary_path)
    reference = reference_tokenizer(vocabulary_path)
    texts = ["Hello, World! How's it going?", "naive"]
    encoded = tokenizer.encode(tf.constant(texts), 8, add_cls=True, add_sep=True).numpy()
    expected = reference(texts, max_length=8, truncation=True, padding="max_length")["input_ids"]
    np.testing.assert_array_equal(encoded, np.array(expected))


def test_from_pretrained_reads_the_casing_of_the_folder(tmp_path):
    (tmp_path / "cased").mkdir()
    vocabulary_path = write_vocabulary(tmp_path / "cased", False)
    (tmp_path / "cased" / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    tokenizer = PretrainedTokenizer.from_pretrained(tmp_path / "cased")
    assert tokenizer.lower_case is False and tokenizer.strip_accents is False
    assert our_ids(tokenizer) == reference_ids(vocabulary_path, False)


def test_from_pretrained_reads_a_fast_tokenizer_json_alone(tmp_path):
    vocabulary_path = write_vocabulary(tmp_path, True)
    reference_tokenizer(vocabulary_path).save_pretrained(tmp_path / "fast")
    for name in ("vocab.txt", "tokenizer_config.json"):
        (tmp_path / "fast" / name).unlink(missing_ok=True)
    assert (tmp_path / "fast" / "tokenizer.json").is_file()
    tokenizer = PretrainedTokenizer.from_pretrained(tmp_path / "fast")
    assert tokenizer.vocabulary == vocabulary_for(True)
    assert our_ids(tokenizer) == reference_ids(vocabulary_path, True)


def test_a_folder_without_a_vocabulary_is_named(tmp_path):
    with pytest.raises(ValueError, match="has neither vocab.txt nor tokenizer.json"):
        PretrainedTokenizer.from_pretrained(tmp_path)


def test_a_vocabulary_without_berts_special_tokens_is_named(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\nhello\n")
    with pytest.raises(ValueError, match=r"missing \['\[CLS\]', '\[SEP\]', '\[MASK\]'\]"):
        PretrainedTokenizer(path)
