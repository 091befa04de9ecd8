"""The tokenizer of a pretrained BERT-family checkpoint, in TensorFlow ops.

Hugging Face's BERT tokenization (`BertTokenizer`, its `BertNormalizer`),
rule for rule, so that a checkpoint sees the ids it was trained on:
control characters removed, whitespace made spaces, optional lower-casing
and accent stripping, splitting on whitespace, punctuation and CJK
characters, then WordPiece, where a word over 100 characters is `[UNK]`.
tensorflow-text's own BERT splitter differs on several of these (it case-folds,
turns control characters into spaces, counts a word's length in bytes), so
the normalization is done here before its splitter sees the text.
"""

import json
import os
import shutil
import tempfile

import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer

from keras_transformer.data.checkpoint_files import (
    CASING_FILE,
    FAST_TOKENIZER_FILE,
    VOCABULARY_NAME,
    accents_stripped,
    casing_rules,
    fast_vocabulary,
    read_json,
)
from keras_transformer.text.vocabulary import CLS, MASK, PAD, SEP, UNK
from keras_transformer.text.wordpiece import WordPieceTokenizer

# Hugging Face's `max_input_chars_per_word`: a longer word is one `[UNK]`.
MAX_WORD_CHARACTERS = 100
# The most UTF-8 bytes of a character: tensorflow-text's word limit is in bytes.
MAX_CHARACTER_BYTES = 4


class PretrainedTokenizer(WordPieceTokenizer):
    """Raw strings to the ids of a BERT-family checkpoint's vocabulary.

    Args:
        vocabulary_path: the checkpoint's `vocab.txt` (one token per line,
            `[PAD]` first, with `[UNK]`, `[CLS]`, `[SEP]` and `[MASK]`).
        lower_case: the checkpoint's `do_lower_case`.
        strip_accents: the checkpoint's `strip_accents`; None follows
            `lower_case`, as in Hugging Face's tokenizers.

    Example:

    >>> tokenizer = PretrainedTokenizer.from_pretrained("path/to/all-MiniLM-L6-v2")
    >>> token_ids = tokenizer.encode(
    ...     tf.constant(["A short text."]), sequence_length=16, add_cls=True, add_sep=True)
    """

    special_tokens = (PAD, UNK, CLS, SEP, MASK)

    def __init__(self, vocabulary_path, lower_case=True, strip_accents=None, name=None):
        super().__init__(vocabulary_path, lower_case=False, normalization_form=None, name=name)
        self.lower_case = lower_case
        self.strip_accents = accents_stripped(lower_case, strip_accents)
        self._splitter = BasicTokenizer(lower_case=False, normalization_form=None)
        self._word_piece = tf_text.WordpieceTokenizer(
            self._table,
            max_bytes_per_word=MAX_WORD_CHARACTERS * MAX_CHARACTER_BYTES,
            token_out_type=tf.int64,
            unknown_token=UNK,
        )

    @classmethod
    def from_pretrained(cls, path, vocabulary_name=VOCABULARY_NAME):
        """The tokenizer of a Hugging Face checkpoint folder: its `vocab.txt`
        (or the WordPiece vocabulary of its `tokenizer.json`) and its casing
        rules (`tokenizer.json`'s normalizer, else `tokenizer_config.json`,
        else BERT's defaults: lower-casing with accents stripped).

        Args:
            path: the folder (a checkpoint's, or one `save` wrote).
            vocabulary_name: the vocabulary's file name in it.
        """
        path = os.fspath(path)
        if not os.path.isdir(path):
            raise ValueError(f"{path} is not a folder: give a Hugging Face checkpoint folder.")
        fast = read_json(os.path.join(path, FAST_TOKENIZER_FILE))
        settings = casing_rules(path, fast)
        vocabulary_path = os.path.join(path, vocabulary_name)
        if not os.path.isfile(vocabulary_path):
            if fast is None:
                raise ValueError(
                    f"{path} has neither {vocabulary_name} nor tokenizer.json: a BERT-family "
                    "checkpoint's tokenizer needs one of them."
                )
            vocabulary_path = _write_fast_vocabulary(
                fast_vocabulary(fast, os.path.join(path, FAST_TOKENIZER_FILE))
            )
        return cls(vocabulary_path, **settings)

    def save(self, folder, vocabulary_name=VOCABULARY_NAME):
        """Writes the vocabulary (`folder/vocabulary_name`) and the casing rules
        (`tokenizer_config.json`, as Hugging Face names them), which
        `from_pretrained(folder, vocabulary_name)` reads back."""
        os.makedirs(folder, exist_ok=True)
        target = os.path.join(folder, vocabulary_name)
        if os.path.abspath(target) != os.path.abspath(self.vocabulary_path):
            shutil.copyfile(self.vocabulary_path, target)
        with open(os.path.join(folder, CASING_FILE), "w", encoding="utf-8") as config_file:
            json.dump(
                {"do_lower_case": self.lower_case, "strip_accents": self.strip_accents},
                config_file,
                indent=2,
            )

    def normalize(self, texts):
        """Valid UTF-8 strings `[B]` as Hugging Face's `BertNormalizer` leaves them."""
        # Control characters (Unicode's C, but tab and line ends) and U+FFFD go.
        texts = tf.strings.regex_replace(texts, r"[^\P{C}\t\n\r]|\x{FFFD}", "")
        texts = tf.strings.regex_replace(texts, r"[\t\n\r\p{Zs}]", " ")
        if self.lower_case:
            # Hugging Face lower-cases character by character; ICU's lower-casing
            # makes a word-final capital sigma the final form (ς), Hugging Face σ.
            texts = tf.strings.lower(tf.strings.regex_replace(texts, "Σ", "σ"), encoding="utf-8")
        if self.strip_accents:
            texts = tf.strings.regex_replace(tf_text.normalize_utf8(texts, "NFD"), r"\p{Mn}", "")
        return texts

    def _word_pieces(self, texts):
        words = self._splitter.tokenize(self.normalize(texts))
        too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > MAX_WORD_CHARACTERS
        # [UNK] is in the vocabulary, so WordPiece gives such a word its id.
        words = words.with_flat_values(tf.where(too_long, UNK, words.flat_values))
        return self._word_piece.tokenize(words).merge_dims(-2, -1)


def _write_fast_vocabulary(tokens):
    """A `tokenizer.json`'s vocabulary (`fast_vocabulary`), written one token per line."""
    # The table reads a file, which then travels with every export as an asset.
    folder = tempfile.mkdtemp(prefix="pretrained_vocabulary_")
    vocabulary_path = os.path.join(folder, VOCABULARY_NAME)
    with open(vocabulary_path, "w", encoding="utf-8") as vocabulary_file:
        for token in tokens:
            vocabulary_file.write(token + "\n")
    return vocabulary_path
