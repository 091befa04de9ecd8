"""WordPiece vocabularies and the tokenizer that goes inside our SavedModels.

Learning a vocabulary and tokenizing both use tensorflow-text's BERT pipeline
(Unicode normalization, optional lower-casing, punctuation splitting, then
WordPiece), so a vocabulary is always used with the splitting it was learned
with. The tokenizer is a `tf.Module`: its lookup table and vocabulary file are
tracked, so `keras.export.ExportArchive.track(tokenizer)` carries it into an
export that needs only `tensorflow` and `tensorflow_text` to load.
"""

import numbers
import os

import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

from keras_transformer.text.vocabulary import (
    CLS,
    END,
    PAD,
    PUNCTUATION_SPACING,
    RESERVED_TOKENS,
    SEP,
    START,
    UNK,
)

# Bytes kept per text before tokenizing: enough for every token of a full
# sequence (WordPiece tokens average well under 16 bytes), and it keeps a
# 1 MB request from costing a 1 MB normalization pass.
BYTES_PER_TOKEN = 16


def build_vocabulary(texts, vocabulary_size, lower_case=True, normalization_form="NFKC"):
    """Learns a WordPiece vocabulary from training texts.

    Args:
        texts: an iterable of strings, or a `tf.data.Dataset` of scalar strings.
            Pass only the training split: held-out text must not shape the
            vocabulary.
        vocabulary_size: the largest vocabulary wanted, reserved tokens
            included. The learner may return fewer on a small corpus.
        lower_case: lower-case and strip accents (BERT's uncased rule).
        normalization_form: Unicode normalization when not lower-casing
            (`"NFKC"`, `"NFC"`, ... or `None`).

    Returns:
        A list of tokens; `RESERVED_TOKENS` first, so `[PAD]` has id 0.
    """
    if not isinstance(vocabulary_size, numbers.Integral) or vocabulary_size <= len(RESERVED_TOKENS):
        raise ValueError(
            f"`vocabulary_size` must be an integer above {len(RESERVED_TOKENS)} "
            f"(the reserved tokens), got {vocabulary_size!r}."
        )
    word_counts = list(count_words(texts, lower_case, normalization_form).items())
    return _fit_to_size(_learn_wordpieces(word_counts, vocabulary_size), vocabulary_size)


def count_words(texts, lower_case=True, normalization_form="NFKC"):
    """How often each word occurs in `texts`, split as `build_vocabulary` splits them.

    Args:
        texts: an iterable of strings, or a `tf.data.Dataset` of scalar strings.
        lower_case, normalization_form: as for `build_vocabulary`.

    Returns:
        A `collections.Counter` of words (str) to counts; punctuation marks are words.
    """
    if isinstance(texts, tf.data.Dataset):
        dataset = texts
    else:
        texts = [_valid_utf8(text) for text in texts]
        if not texts:
            raise ValueError("Cannot build a vocabulary from no texts.")
        dataset = tf.data.Dataset.from_tensor_slices(texts)
    splitter = BasicTokenizer(**_bert_parameters(lower_case, normalization_form))
    words = dataset.batch(256).map(splitter.tokenize).prefetch(tf.data.AUTOTUNE)
    return learner.count_words(words)


def _fit_to_size(vocabulary, vocabulary_size):
    """Cuts a learned vocabulary to size without losing any character.

    The learner ends its list with every single character (and its `##`
    form), which spell any word; when the characters alone overflow the
    requested size it returns more tokens than asked. Cutting the tail would
    drop characters and turn whole words into `[UNK]`, so the cut falls on
    the multi-character pieces instead.
    """
    if len(vocabulary) <= vocabulary_size:
        return vocabulary
    reserved = [token for token in vocabulary if token in RESERVED_TOKENS]
    characters = [
        token
        for token in vocabulary
        if token not in RESERVED_TOKENS and len(token.removeprefix("##")) == 1
    ]
    pieces = [
        token
        for token in vocabulary
        if token not in RESERVED_TOKENS and len(token.removeprefix("##")) > 1
    ]
    room = vocabulary_size - len(reserved) - len(characters)
    if room < 0:
        raise ValueError(
            f"`vocabulary_size` {vocabulary_size} cannot hold the {len(reserved)} reserved tokens "
            f"and the {len(characters)} characters of this corpus: use at least "
            f"{len(reserved) + len(characters)}."
        )
    return reserved + pieces[:room] + characters


def _learn_wordpieces(word_counts, vocabulary_size):
    """tensorflow-text's WordPiece learner, with a shortcut for small corpora.

    The learner binary-searches the word-count threshold that gives a
    vocabulary of about the requested size, learning a whole vocabulary at
    each of ~15 steps. A corpus of a few thousand texts cannot fill the
    requested size even at the lowest threshold, and the search only ends up
    there after every step (about a minute for BBC News). Trying the lowest
    threshold first answers those corpora with one step; the size only shrinks
    as the threshold rises, so nothing larger was to be found.
    """
    params = learner.Params(
        upper_thresh=int(1e7),
        lower_thresh=10,
        num_iterations=4,
        max_input_tokens=int(5e6),
        max_token_length=50,
        max_unique_chars=1000,
        vocab_size=vocabulary_size,
        slack_ratio=0.05,
        include_joiner_token=True,
        joiner="##",
        reserved_tokens=list(RESERVED_TOKENS),
    )
    upper, lower = learner.get_search_threshs(word_counts, params.upper_thresh, params.lower_thresh)
    counts = learner.get_input_words(word_counts, params.reserved_tokens, params.max_token_length)
    counts = learner.filter_input_words(
        counts, learner.get_allowed_chars(counts, params.max_unique_chars), params.max_input_tokens
    )
    largest = learner.learn_with_thresh(counts, lower, params)
    if len(largest) <= vocabulary_size:
        return largest
    return learner.learn_binary_search(counts, lower, upper, params)


class WordPieceTokenizer(tf.Module):
    """Raw strings to WordPiece ids and back, with TensorFlow ops only.

    Args:
        vocabulary_path: a vocabulary file, one token per line, with
            `RESERVED_TOKENS` first (as written by `save_vocabulary`).
        lower_case: as when the vocabulary was built.
        normalization_form: as when the vocabulary was built.

    Example:

    >>> tokenizer = WordPieceTokenizer("vocab.txt")
    >>> token_ids = tokenizer.encode(
    ...     tf.constant(["A short text."]), sequence_length=16, add_cls=True)
    """

    # The tokens a vocabulary must hold ([PAD] first): they are never text.
    special_tokens = RESERVED_TOKENS

    def __init__(self, vocabulary_path, lower_case=True, normalization_form="NFKC", name=None):
        super().__init__(name=name)
        vocabulary_path = os.fspath(vocabulary_path)
        if not os.path.isfile(vocabulary_path):
            raise FileNotFoundError(f"Vocabulary file not found: {vocabulary_path}")
        with open(vocabulary_path, encoding="utf-8") as vocabulary_file:
            self.vocabulary = [line.rstrip("\n") for line in vocabulary_file]
        missing = [token for token in self.special_tokens if token not in self.vocabulary]
        if missing or self.vocabulary.index(PAD) != 0:
            raise ValueError(
                f"{vocabulary_path} is not a vocabulary this tokenizer reads: it must start with "
                f"{PAD} and contain {', '.join(self.special_tokens)}; missing {missing}."
            )
        self.vocabulary_path = vocabulary_path
        self.lower_case = lower_case
        self.normalization_form = normalization_form
        # A file-backed table: the vocabulary travels as a SavedModel asset.
        # Unknown words map to [UNK] inside WordPiece, so no OOV buckets are needed.
        self._table = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(
                vocabulary_path,
                key_dtype=tf.string,
                key_index=tf.lookup.TextFileIndex.WHOLE_LINE,
                value_dtype=tf.int64,
                value_index=tf.lookup.TextFileIndex.LINE_NUMBER,
            ),
            default_value=self.vocabulary.index(UNK),
        )
        self._tokenizer = tf_text.BertTokenizer(
            self._table,
            token_out_type=tf.int64,
            unknown_token=UNK,
            **_bert_parameters(lower_case, normalization_form),
        )
        self._id_to_token = tf.constant(self.vocabulary)

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    def token_id(self, token):
        return self.vocabulary.index(token)

    def tokenize(self, texts, max_tokens=None):
        """Strings `[B]` to ragged int64 ids `[B, None]` (no special tokens).

        Invalid UTF-8 is replaced, never an error. With `max_tokens`, each text
        is first cut to `max_tokens * BYTES_PER_TOKEN` bytes, then to
        `max_tokens` tokens.
        """
        texts = _valid_utf8_tensor(tf.convert_to_tensor(texts, dtype=tf.string))
        if max_tokens is not None:
            # Runs of whitespace would otherwise eat the byte allowance.
            texts = tf.strings.regex_replace(texts, r"\s+", " ")
            texts = tf.strings.substr(texts, 0, max_tokens * BYTES_PER_TOKEN)
            # A byte-level cut can split a character; repair it.
            texts = _valid_utf8_tensor(texts)
        token_ids = self._word_pieces(texts)
        if max_tokens is not None:
            token_ids = token_ids[:, :max_tokens]
        return token_ids

    def _word_pieces(self, texts):
        """Valid UTF-8 strings `[B]` to ragged int64 ids `[B, None]`."""
        return self._tokenizer.tokenize(texts).merge_dims(-2, -1)

    def encode(self, texts, sequence_length, add_cls=False, add_start_end=False, add_sep=False):
        """Strings `[B]` to dense int32 ids `[B, sequence_length]`, 0-padded.

        Args:
            texts: string tensor `[B]`.
            sequence_length: the fixed output length; longer texts are truncated.
            add_cls: prepend `[CLS]` (for `[CLS]` pooling).
            add_start_end: wrap in `[START]` ... `[END]` (decoder targets).
            add_sep: append `[SEP]` (BERT's `[CLS] text [SEP]`).
        """
        room = sequence_length - int(add_cls) - 2 * int(add_start_end) - int(add_sep)
        if room < 1:
            raise ValueError(f"`sequence_length` {sequence_length} leaves no room for tokens.")
        token_ids = self.tokenize(texts, max_tokens=room)
        batch_size = token_ids.nrows()
        prefix, suffix = [], []
        if add_cls:
            prefix.append(self.token_id(CLS))
        if add_start_end:
            prefix.append(self.token_id(START))
            suffix.append(self.token_id(END))
        if add_sep:
            suffix.append(self.token_id(SEP))
        pieces = []
        if prefix:
            pieces.append(tf.tile(tf.constant([prefix], tf.int64), [batch_size, 1]))
        pieces.append(token_ids)
        if suffix:
            pieces.append(tf.tile(tf.constant([suffix], tf.int64), [batch_size, 1]))
        token_ids = tf.concat(pieces, axis=1) if len(pieces) > 1 else token_ids
        dense = token_ids.to_tensor(default_value=0, shape=[None, sequence_length])
        return tf.cast(dense, tf.int32)

    def id_to_token(self, token_ids):
        """Ids (any shape) to their token strings."""
        return tf.gather(self._id_to_token, tf.cast(token_ids, tf.int32))

    def detokenize(self, token_ids):
        """Ids `[B, T]` (dense, 0-padded, or ragged) to strings `[B]`.

        Reserved tokens are dropped; WordPiece continuations (`##`) are joined
        to the word before them, and the spaces the splitter put around
        punctuation are taken out again (`"the Lord ' s house ."` reads
        `"the Lord's house."`), so output reads, and scores BLEU, like text.
        """
        if not isinstance(token_ids, tf.RaggedTensor):
            token_ids = tf.RaggedTensor.from_tensor(tf.cast(token_ids, tf.int64), padding=0)
        token_ids = tf.cast(token_ids, tf.int64)
        special_ids = tf.constant([self.token_id(token) for token in self.special_tokens], tf.int64)
        special = tf.ragged.map_flat_values(
            lambda ids: tf.reduce_any(tf.equal(ids[:, None], special_ids), axis=-1), token_ids
        )
        token_ids = tf.ragged.boolean_mask(token_ids, tf.logical_not(special))
        words = self._tokenizer.detokenize(token_ids)
        return join_punctuation(tf.strings.reduce_join(words, separator=" ", axis=-1))


def join_punctuation(texts):
    """Undoes the BERT splitter's spaces around punctuation in strings `[B]`.

    Only regular expressions (RE2, a core TensorFlow op), so it runs inside a
    SavedModel. Straight double quotes are left alone: whether one opens or
    closes is not decidable locally.
    """
    for pattern, replacement in PUNCTUATION_SPACING:
        texts = tf.strings.regex_replace(texts, pattern, replacement)
    return texts


def save_vocabulary(vocabulary, path):
    """Writes one token per line (the format `WordPieceTokenizer` reads)."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as vocabulary_file:
        for token in vocabulary:
            vocabulary_file.write(token + "\n")
    return path


def _bert_parameters(lower_case, normalization_form):
    # BERT's lower_case already applies NFD and strips accents; a second
    # normalization form is only meaningful for cased vocabularies.
    return {
        "lower_case": lower_case,
        "normalization_form": None if lower_case else normalization_form,
    }


def _valid_utf8_tensor(texts):
    return tf.strings.unicode_transcode(
        texts, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
    )


def _valid_utf8(text):
    if isinstance(text, bytes):
        return text.decode("utf-8", errors="replace")
    return str(text)
