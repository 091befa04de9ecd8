"""Vocabulary files and ids back to text in plain Python, where TensorFlow is not.

`detokenize` returns what `WordPieceTokenizer.detokenize` (tensorflow-text's
WordPiece join, then `join_punctuation`) returns for the same ids, so a run
trained without TensorFlow (on JAX) scores `val_chrf` on the same text as a
TensorFlow run and as the export's `greedy` signature.
"""

import functools
import os
import re
import sys

PAD = "[PAD]"
UNK = "[UNK]"
CLS = "[CLS]"
SEP = "[SEP]"
START = "[START]"
END = "[END]"
MASK = "[MASK]"
# Order fixes the ids: [PAD] must be 0 so that `mask_zero=True` embeddings mask it.
RESERVED_TOKENS = (PAD, UNK, CLS, SEP, START, END, MASK)

# What `join_punctuation` replaces, (pattern, replacement) pairs in order, in
# RE2 syntax (TensorFlow's `regex_replace`). Digits first, so "3 : 16" stays
# one verse reference; apostrophes only between letters, so a closing quote
# keeps its space after.
PUNCTUATION_SPACING = (
    (r"(\d) ([:.,]) (\d)", r"\1\2\3"),
    (r"(\pL) ?(['’]) ?(\pL)", r"\1\2\3"),
    (r"(\pL) - (\pL)", r"\1-\2"),
    (r" ([.,;:!?%)\]}»”’…])", r"\1"),
    (r"([(\[{¿¡«“‘]) ", r"\1"),
)


def read_vocabulary(path):
    """The tokens of a vocabulary file (one per line, as `save_vocabulary` writes), id order.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not one of our vocabularies (`RESERVED_TOKENS` first).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Vocabulary file not found: {path}")
    with open(path, encoding="utf-8") as vocabulary_file:
        vocabulary = [line.rstrip("\n") for line in vocabulary_file]
    missing = [token for token in RESERVED_TOKENS if token not in vocabulary]
    if missing or vocabulary.index(PAD) != 0:
        raise ValueError(
            f"{path} is not one of our vocabularies: it must start with "
            f"{PAD} and contain {', '.join(RESERVED_TOKENS)}; missing {missing}."
        )
    return vocabulary


def detokenize(token_ids, vocabulary):
    """Id rows (`[B, T]`, any nested sequence or array of ints) to `B` strings.

    As `WordPieceTokenizer.detokenize`: reserved tokens (padding, `[END]`,
    `[UNK]`, ...) are dropped wherever they are, ids past the vocabulary read
    `[UNK]`, `##` continuations join the piece before them, and the spaces
    the splitter put around punctuation are taken out again.
    """
    reserved = len(RESERVED_TOKENS)
    texts = []
    for row in token_ids:
        tokens = [
            vocabulary[token_id] if token_id < len(vocabulary) else UNK
            for token_id in map(int, row)
            if token_id >= reserved
        ]
        # tensorflow-text also strips spaces at the ends: none, as no token is empty.
        text = " ".join(tokens).replace(" ##", "")
        texts.append(join_punctuation_text(text))
    return texts


def join_punctuation_text(text):
    """`join_punctuation` (RE2, in the exports) of one Python string."""
    for pattern, replacement in _python_punctuation_spacing():
        text = pattern.sub(replacement, text)
    return text


@functools.cache
def _python_punctuation_spacing():
    # RE2's \d is ASCII digits only; Python has no \pL, and its [^\W\d_] also
    # takes the numerals that are not decimal digits (², Ⅻ), left out here.
    numerals = "".join(
        character
        for character in map(chr, range(sys.maxunicode + 1))
        if character.isnumeric() and not character.isdecimal() and not character.isalpha()
    )
    letter = f"[^\\W\\d_{re.escape(numerals)}]"
    return tuple(
        (re.compile(pattern.replace(r"\d", "[0-9]").replace(r"\pL", letter)), replacement)
        for pattern, replacement in PUNCTUATION_SPACING
    )
