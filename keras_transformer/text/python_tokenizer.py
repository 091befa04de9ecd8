"""The in-graph WordPiece tokenizers' ids in plain Python, where TensorFlow is not.

Exports that run on LiteRT or ONNX Runtime take token ids, not strings: their
users tokenize beside the model, with no tensorflow-text. A
`PythonWordPieceTokenizer` gives the ids that the SavedModel's tokenizer gives
for the same texts, rule for rule:

* `style="tensorflow_text"` is `WordPieceTokenizer`: tensorflow-text's BERT
  splitter (with `lower_case`, ICU's NFKC_Casefold, then NFD with the accents
  removed; without, `normalization_form`), control and format characters made
  spaces, words split at whitespace, punctuation and CJK characters, then
  WordPiece, where a word over 100 UTF-8 bytes is the unknown token.
* `style="hugging_face"` is `PretrainedTokenizer`: Hugging Face's
  `BertNormalizer` (control characters removed, whitespace made spaces,
  optional lower-casing and accent stripping), the same splitting, and
  WordPiece where a word over 100 characters is the unknown token.

Both cut a text first as `WordPieceTokenizer.tokenize` does: invalid UTF-8
replaced by U+FFFD, runs of ASCII whitespace made one space, then at most
`bytes_per_token` bytes per token kept.

Unicode: Python's `unicodedata` stands in for ICU and RE2 in TensorFlow. Where
their Unicode versions differ (characters Python's version does not assign
yet, a few case mappings TensorFlow's lower-casing lacks), `unicode_tables`
holds what TensorFlow does, so the ids agree for every character.

The vocabulary file and the settings travel as two files
(`write_tokenizer_files`, `read_tokenizer_files`) beside an exported model.
"""

import json
import os
import re

import numpy as np

from keras_transformer.data.checkpoint_files import read_vocabulary_lines
from keras_transformer.text import unicode_tables
from keras_transformer.text.vocabulary import CLS, END, PAD, RESERVED_TOKENS, SEP, START, UNK
from keras_transformer.text.vocabulary import detokenize as detokenize_ids

# `keras_transformer.text.wordpiece.BYTES_PER_TOKEN`: bytes kept per token wanted.
BYTES_PER_TOKEN = 16
# tensorflow-text's BERT tokenizer: a longer word (in UTF-8 bytes) is the unknown token.
TENSORFLOW_TEXT_MAX_WORD_BYTES = 100
# `keras_transformer.text.pretrained`: Hugging Face's `max_input_chars_per_word`, and
# the byte limit that lets every such word through tensorflow-text's WordPiece.
HUGGING_FACE_MAX_WORD_CHARACTERS = 100
HUGGING_FACE_MAX_WORD_BYTES = 400
STYLES = ("tensorflow_text", "hugging_face")
NORMALIZATION_FORMS = ("NFC", "NFKC", "NFD", "NFKD")

VOCABULARY_FILE = "vocabulary.txt"
SETTINGS_FILE = "tokenizer.json"
# What `tokenizer.json` says it is, so that a Hugging Face `tokenizer.json` is told apart.
FILE_FORMAT = "keras_transformer.PythonWordPieceTokenizer"
FILE_FORMAT_VERSION = 1

# RE2's `\s`, which `WordPieceTokenizer.tokenize` collapses and the splitter splits at:
# ASCII whitespace only (no vertical tab; no Unicode spaces).
_ASCII_WHITESPACE = "\t\n\f\r "
_ASCII_WHITESPACE_RUNS = re.compile(f"[{_ASCII_WHITESPACE}]+")
# tensorflow-text's BERT splitter: ASCII punctuation and symbols are words of their own.
_ASCII_PUNCTUATION = frozenset(
    chr(code)
    for first, last in (("!", "/"), (":", "@"), ("[", "`"), ("{", "~"))
    for code in range(ord(first), ord(last) + 1)
)
# ... and so is every CJK ideograph in these blocks.
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
# Words kept between calls: a corpus repeats its words, and WordPiece is the slow part.
_WORD_CACHE_SIZE = 100_000


class PythonWordPieceTokenizer:
    """Raw strings to the ids of `WordPieceTokenizer` or `PretrainedTokenizer`, with no TensorFlow.

    Args:
        vocabulary: a list of tokens in id order, or the path of a vocabulary
            file (one token a line, as `save_vocabulary` writes). `[PAD]` must
            be id 0 and the unknown token must be in it.
        lower_case: lower-case (and, in the `"tensorflow_text"` style, strip
            accents), as when the vocabulary was built.
        normalization_form: `"tensorflow_text"` style without `lower_case`: the
            Unicode normalization (`"NFKC"`, `"NFC"`, `"NFD"`, `"NFKD"` or None).
            With `lower_case` it is not used (NFKC_Casefold then NFD are).
        style: `"tensorflow_text"` (as `WordPieceTokenizer`) or
            `"hugging_face"` (as `PretrainedTokenizer`).
        strip_accents: `"hugging_face"` style: remove accents; None follows
            `lower_case`, as in Hugging Face's tokenizers.
        max_word_bytes: a word of more UTF-8 bytes is the unknown token; None
            takes the style's (100 for `"tensorflow_text"`, 400 for `"hugging_face"`).
        max_word_characters: a word of more characters is the unknown token; None
            takes the style's (none for `"tensorflow_text"`, 100 for `"hugging_face"`).
        unknown_token: the token of a word WordPiece cannot spell.
        suffix_indicator: what starts a piece that continues a word.
        bytes_per_token: `encode` keeps at most this many UTF-8 bytes per token wanted.

    Raises:
        ValueError: a setting or the vocabulary is not one this tokenizer reads.
        FileNotFoundError: `vocabulary` names no file.

    Example:

    >>> tokenizer = PythonWordPieceTokenizer("vocabulary.txt")
    >>> token_ids = tokenizer.encode(["A short text."], 16, add_cls=True)
    """

    def __init__(
        self,
        vocabulary,
        lower_case=True,
        normalization_form="NFKC",
        style="tensorflow_text",
        strip_accents=None,
        max_word_bytes=None,
        max_word_characters=None,
        unknown_token=UNK,
        suffix_indicator="##",
        bytes_per_token=BYTES_PER_TOKEN,
    ):
        if style not in STYLES:
            raise ValueError(f"`style` must be one of {STYLES}, got {style!r}.")
        if normalization_form is not None and normalization_form not in NORMALIZATION_FORMS:
            raise ValueError(
                f"`normalization_form` must be one of {NORMALIZATION_FORMS} or None, "
                f"got {normalization_form!r}."
            )
        for name, value in (
            ("max_word_bytes", max_word_bytes),
            ("max_word_characters", max_word_characters),
        ):
            if value is not None and (not _is_integer(value) or value < 1):
                raise ValueError(f"`{name}` must be a positive integer or None, got {value!r}.")
        if not _is_integer(bytes_per_token) or bytes_per_token < 1:
            raise ValueError(
                f"`bytes_per_token` must be a positive integer, got {bytes_per_token!r}."
            )
        if not isinstance(suffix_indicator, str) or not suffix_indicator:
            raise ValueError(
                f"`suffix_indicator` must be a non-empty string, got {suffix_indicator!r}."
            )
        if isinstance(vocabulary, (str, os.PathLike)):
            vocabulary = _read_vocabulary_file(vocabulary)
        else:
            vocabulary = list(vocabulary)
        self.vocabulary = vocabulary
        # The first line of a token wins, as in the vocabulary's list order.
        self._token_ids = {}
        for index, token in enumerate(vocabulary):
            if not isinstance(token, str):
                raise ValueError(f"Vocabulary tokens must be strings; token {index} is {token!r}.")
            self._token_ids.setdefault(token, index)
        if self._token_ids.get(PAD) != 0:
            raise ValueError(f"The vocabulary must start with {PAD} (id 0, the padding).")
        if unknown_token not in self._token_ids:
            raise ValueError(f"The vocabulary lacks the unknown token {unknown_token!r}.")
        self.lower_case = bool(lower_case)
        self.normalization_form = normalization_form
        self.style = style
        hugging_face = style == "hugging_face"
        self.strip_accents = (
            (self.lower_case if strip_accents is None else bool(strip_accents))
            if hugging_face
            else None
        )
        if max_word_bytes is None:
            max_word_bytes = (
                HUGGING_FACE_MAX_WORD_BYTES if hugging_face else TENSORFLOW_TEXT_MAX_WORD_BYTES
            )
        if max_word_characters is None and hugging_face:
            max_word_characters = HUGGING_FACE_MAX_WORD_CHARACTERS
        self.max_word_bytes = int(max_word_bytes)
        self.max_word_characters = None if max_word_characters is None else int(max_word_characters)
        self.unknown_token = unknown_token
        self.suffix_indicator = suffix_indicator
        self.bytes_per_token = int(bytes_per_token)
        self._unknown_id = self._token_ids[unknown_token]
        self._longest_token = max(len(token) for token in self._token_ids)
        self._word_cache = {}

    @classmethod
    def from_tokenizer(cls, tokenizer):
        """The Python twin of a `WordPieceTokenizer` or `PretrainedTokenizer`.

        Reads the tokenizer's vocabulary file and settings; imports no TensorFlow
        (the tokenizer given has already).

        Args:
            tokenizer: a `keras_transformer.text.WordPieceTokenizer` or
                `PretrainedTokenizer` (or subclass).

        Returns:
            A `PythonWordPieceTokenizer` giving the same ids.

        Raises:
            ValueError: `tokenizer` is neither.
        """
        classes = {klass.__name__ for klass in type(tokenizer).__mro__}
        if "PretrainedTokenizer" in classes:
            return cls(
                tokenizer.vocabulary_path,
                lower_case=tokenizer.lower_case,
                normalization_form=None,
                style="hugging_face",
                strip_accents=tokenizer.strip_accents,
            )
        if "WordPieceTokenizer" in classes:
            return cls(
                tokenizer.vocabulary_path,
                lower_case=tokenizer.lower_case,
                normalization_form=tokenizer.normalization_form,
            )
        raise ValueError(
            f"Expected a WordPieceTokenizer or PretrainedTokenizer, got {type(tokenizer).__name__}."
        )

    @property
    def vocabulary_size(self):
        return len(self.vocabulary)

    def token_id(self, token):
        """The id of `token`; ValueError naming it when the vocabulary lacks it."""
        if token not in self._token_ids:
            raise ValueError(f"The vocabulary has no {token!r} token.")
        return self._token_ids[token]

    def get_config(self):
        """The settings (everything but the vocabulary), JSON-able; `from_config` reads them."""
        return {
            "lower_case": self.lower_case,
            "normalization_form": self.normalization_form,
            "style": self.style,
            "strip_accents": self.strip_accents,
            "max_word_bytes": self.max_word_bytes,
            "max_word_characters": self.max_word_characters,
            "unknown_token": self.unknown_token,
            "suffix_indicator": self.suffix_indicator,
            "bytes_per_token": self.bytes_per_token,
        }

    to_config = get_config

    @classmethod
    def from_config(cls, config):
        """A tokenizer from `get_config()`'s settings plus `"vocabulary"` (tokens or a path).

        Raises:
            ValueError: no `"vocabulary"`, or a setting this class does not take.
        """
        config = dict(config)
        if "vocabulary" not in config:
            raise ValueError(
                "The config has no 'vocabulary': add the tokens or the vocabulary file's path."
            )
        settings = _known_settings(config)
        unknown = sorted(set(config) - set(settings) - {"vocabulary"})
        if unknown:
            raise ValueError(f"Unknown tokenizer settings {unknown}.")
        return cls(config["vocabulary"], **settings)

    def tokenize(self, texts, max_tokens=None):
        """Texts to lists of ids, no special tokens (as `WordPieceTokenizer.tokenize`).

        Args:
            texts: a list (or tuple, or 1-D array) of `str` or UTF-8 `bytes`;
                invalid UTF-8 is replaced, never an error.
            max_tokens: cut each text to `max_tokens * bytes_per_token` bytes
                first, then its ids to `max_tokens`.

        Returns:
            A list of lists of ints, one per text.

        Raises:
            ValueError: `texts` is one string rather than a list of them, or
                holds something that is not text.
        """
        return [self._tokenize_one(text, max_tokens) for text in text_list(texts)]

    def encode(self, texts, sequence_length, add_cls=False, add_sep=False, add_start_end=False):
        """Texts to `[len(texts), sequence_length]` int32 ids, 0-padded, as `WordPieceTokenizer.encode`.

        Args:
            texts: a list of `str` or UTF-8 `bytes`.
            sequence_length: the length of every row; longer texts are cut.
            add_cls: put `[CLS]` first.
            add_sep: put `[SEP]` last (BERT's `[CLS] text [SEP]`).
            add_start_end: wrap in `[START]` ... `[END]` (decoder targets).

        Returns:
            A NumPy int32 array `[len(texts), sequence_length]`.

        Raises:
            ValueError: no room for tokens at this `sequence_length`, a special
                token the vocabulary lacks, or `texts` not a list of texts.
        """
        if not _is_integer(sequence_length):
            raise ValueError(f"`sequence_length` must be an integer, got {sequence_length!r}.")
        room = sequence_length - int(add_cls) - 2 * int(add_start_end) - int(add_sep)
        if room < 1:
            raise ValueError(f"`sequence_length` {sequence_length} leaves no room for tokens.")
        prefix, suffix = [], []
        if add_cls:
            prefix.append(self.token_id(CLS))
        if add_start_end:
            prefix.append(self.token_id(START))
            suffix.append(self.token_id(END))
        if add_sep:
            suffix.append(self.token_id(SEP))
        texts = text_list(texts)
        token_ids = np.zeros((len(texts), sequence_length), dtype=np.int32)
        for row, text in enumerate(texts):
            ids = prefix + self._tokenize_one(text, room) + suffix
            token_ids[row, : len(ids)] = ids
        return token_ids

    def decode(self, token_ids):
        """One row of ids to text, as `WordPieceTokenizer.detokenize` (`vocabulary.detokenize`).

        Reserved and special tokens are dropped, `##` pieces joined to the word
        before them, and the splitter's spaces around punctuation taken out.
        """
        special = {self._token_ids[token] for token in self._special_tokens()}
        # detokenize drops ids below len(RESERVED_TOKENS); a checkpoint's vocabulary
        # has its special tokens elsewhere, so they are sent to [PAD] (id 0) first.
        row = [0 if int(token_id) in special else int(token_id) for token_id in token_ids]
        return detokenize_ids([row], self.vocabulary)[0]

    def _special_tokens(self):
        names = (PAD, UNK, CLS, SEP, "[MASK]") if self.style == "hugging_face" else RESERVED_TOKENS
        return [token for token in names if token in self._token_ids]

    # --- the pipeline --------------------------------------------------------

    def _tokenize_one(self, text, max_tokens):
        if isinstance(text, str):
            # Lone surrogates cannot reach TensorFlow either; as bytes they are invalid UTF-8.
            text = text.encode("utf-8", "surrogatepass")
        text = text.decode("utf-8", "replace")
        if max_tokens is not None:
            text = _ASCII_WHITESPACE_RUNS.sub(" ", text)
            kept = text.encode("utf-8")[: max_tokens * self.bytes_per_token]
            text = kept.decode("utf-8", "replace")
        token_ids = []
        for word in self._words(text):
            token_ids.extend(self._word_ids(word))
            if max_tokens is not None and len(token_ids) >= max_tokens:
                return token_ids[:max_tokens]
        return token_ids

    def _words(self, text):
        """A valid text to its words, as the style's normalization and splitter make them."""
        if self.style == "hugging_face":
            text = _hugging_face_normalize(text, self.lower_case, self.strip_accents)
        elif self.lower_case:
            text = _strip_marks(unicode_tables.normalize("NFD", unicode_tables.nfkc_casefold(text)))
        elif self.normalization_form is not None:
            text = unicode_tables.normalize(self.normalization_form, text)
        return _split(text)

    def _word_ids(self, word):
        ids = self._word_cache.get(word)
        if ids is None:
            ids = self._word_pieces(word)
            if len(self._word_cache) >= _WORD_CACHE_SIZE:
                self._word_cache.clear()
            self._word_cache[word] = ids
        return ids

    def _word_pieces(self, word):
        """tensorflow-text's WordPiece: greedy longest match, by characters, from the left."""
        if self.max_word_characters is not None and len(word) > self.max_word_characters:
            return [self._unknown_id]
        if len(word.encode("utf-8")) > self.max_word_bytes:
            return [self._unknown_id]
        ids = []
        start = 0
        while start < len(word):
            prefix = self.suffix_indicator if start > 0 else ""
            # No token is longer than the longest one in the vocabulary.
            end = min(len(word), start + self._longest_token)
            while end > start:
                token_id = self._token_ids.get(prefix + word[start:end])
                if token_id is not None:
                    break
                end -= 1
            else:
                return [self._unknown_id]
            ids.append(token_id)
            start = end
        return ids


def write_tokenizer_files(tokenizer, folder):
    """Writes `vocabulary.txt` (one token a line) and `tokenizer.json` (its settings) into `folder`.

    What an export ships beside its `.tflite` or `.onnx` file; `read_tokenizer_files`
    reads them back.

    Args:
        tokenizer: a `PythonWordPieceTokenizer`, or a `WordPieceTokenizer` /
            `PretrainedTokenizer` (turned into one with `from_tokenizer`).
        folder: where to write; made if missing.

    Returns:
        The folder's path (str).
    """
    if not isinstance(tokenizer, PythonWordPieceTokenizer):
        tokenizer = PythonWordPieceTokenizer.from_tokenizer(tokenizer)
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, VOCABULARY_FILE), "w", encoding="utf-8") as vocabulary_file:
        vocabulary_file.writelines(token + "\n" for token in tokenizer.vocabulary)
    settings = {"format": FILE_FORMAT, "format_version": FILE_FORMAT_VERSION}
    settings.update(tokenizer.get_config())
    with open(os.path.join(folder, SETTINGS_FILE), "w", encoding="utf-8") as settings_file:
        json.dump(settings, settings_file, indent=2, ensure_ascii=False)
        settings_file.write("\n")
    return folder


def read_tokenizer_files(folder):
    """The tokenizer that `write_tokenizer_files` wrote into `folder`.

    Raises:
        FileNotFoundError: `folder` lacks `vocabulary.txt` or `tokenizer.json`.
        ValueError: `tokenizer.json` is not one `write_tokenizer_files` wrote.
    """
    folder = os.fspath(folder)
    settings_path = os.path.join(folder, SETTINGS_FILE)
    if not os.path.isfile(settings_path):
        raise FileNotFoundError(
            f"No {SETTINGS_FILE} in {folder}: write it with write_tokenizer_files."
        )
    with open(settings_path, encoding="utf-8") as settings_file:
        try:
            settings = json.load(settings_file)
        except json.JSONDecodeError as error:
            raise ValueError(f"{settings_path} is not JSON: {error}.") from error
    if not isinstance(settings, dict) or settings.get("format") != FILE_FORMAT:
        raise ValueError(
            f"{settings_path} is not a {FILE_FORMAT} settings file (a Hugging Face "
            "tokenizer.json is read by PretrainedTokenizer.from_pretrained)."
        )
    if settings.get("format_version") != FILE_FORMAT_VERSION:
        raise ValueError(
            f"{settings_path} has format_version {settings.get('format_version')!r}; "
            f"this version reads {FILE_FORMAT_VERSION}."
        )
    config = {
        key: value for key, value in settings.items() if key not in ("format", "format_version")
    }
    config["vocabulary"] = os.path.join(folder, VOCABULARY_FILE)
    return PythonWordPieceTokenizer.from_config(config)


def _known_settings(config):
    names = (
        "lower_case",
        "normalization_form",
        "style",
        "strip_accents",
        "max_word_bytes",
        "max_word_characters",
        "unknown_token",
        "suffix_indicator",
        "bytes_per_token",
    )
    return {name: config[name] for name in names if name in config}


def _read_vocabulary_file(path):
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Vocabulary file not found: {path}")
    return read_vocabulary_lines(path)


def _is_integer(value):
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def text_list(texts):
    """`texts` as a list of `str` or `bytes`, or a ValueError naming what it is instead."""
    if isinstance(texts, (str, bytes)):
        raise ValueError("`texts` must be a list of texts, got one text: wrap it in a list.")
    if isinstance(texts, np.ndarray) and texts.ndim != 1:
        raise ValueError(f"`texts` must be one-dimensional, got shape {texts.shape}.")
    texts = list(texts)
    for index, text in enumerate(texts):
        if not isinstance(text, (str, bytes)):
            raise ValueError(
                f"`texts` must hold str or bytes; item {index} is {type(text).__name__}."
            )
    return texts


def _hugging_face_normalize(text, lower_case, strip_accents):
    """`PretrainedTokenizer.normalize` of one valid text."""
    text = text.translate(_HUGGING_FACE_CLEANING)
    if lower_case:
        text = unicode_tables.lower(text.replace("Σ", "σ"))
    if strip_accents:
        text = _strip_marks(unicode_tables.normalize("NFD", text))
    return text


def _strip_marks(text):
    return text.translate(_MARKS_REMOVED)


def _split(text):
    """tensorflow-text's BERT splitter on normalized text: control and format
    characters are spaces; words end at ASCII whitespace; punctuation and CJK
    ideographs are words of their own."""
    return [word for word in text.translate(_SPLITTING).split(" ") if word]


class _CharacterTable(dict):
    """A `str.translate` table that works out each character's entry on first sight."""

    def __init__(self, rule):
        super().__init__()
        self._rule = rule

    def __missing__(self, code):
        self[code] = entry = self._rule(chr(code))
        return entry


def _cleaning_rule(character):
    # RE2's `\p{C}` (Cc, Cf, Co, Cs; not Cn) and U+FFFD go, but for tab and line ends;
    # those and the space separators (Zs) become spaces.
    if character in "\t\n\r" or unicode_tables.category(character) == "Zs":
        return " "
    if character == "\ufffd" or unicode_tables.category(character) in ("Cc", "Cf", "Co", "Cs"):
        return None
    return character


def _marks_rule(character):
    return None if unicode_tables.category(character) == "Mn" else character


def _splitting_rule(character):
    # " " ends a word; a punctuation mark or ideograph is a word between two of them.
    category = unicode_tables.category(character)
    if character in _ASCII_WHITESPACE or category in ("Cc", "Cf"):
        return " "
    code = ord(character)
    if (
        character in _ASCII_PUNCTUATION
        or category.startswith("P")
        or any(first <= code <= last for first, last in _CJK_RANGES)
    ):
        return f" {character} "
    return character


_HUGGING_FACE_CLEANING = _CharacterTable(_cleaning_rule)
_MARKS_REMOVED = _CharacterTable(_marks_rule)
_SPLITTING = _CharacterTable(_splitting_rule)
