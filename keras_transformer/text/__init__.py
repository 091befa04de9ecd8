"""Text to token ids and back.

The tokenizer and the vocabulary learner are tensorflow-text ops that export
with the model; they are imported on first use, so that what needs no
TensorFlow (`vocabulary`: reading vocabularies, ids back to text; `padding`;
`python_tokenizer`: the tokenizers' ids in plain Python) imports where
TensorFlow is not installed.
"""

import importlib

from keras_transformer.text.padding import trim_shared_padding
from keras_transformer.text.vocabulary import RESERVED_TOKENS

# Name -> the module that defines it, imported when the name is first read.
_FROM_WORDPIECE = ("WordPieceTokenizer", "build_vocabulary", "save_vocabulary")
# Plain Python (no TensorFlow), lazy all the same: it builds Unicode tables on import.
_FROM_PYTHON_TOKENIZER = (
    "PythonWordPieceTokenizer",
    "read_tokenizer_files",
    "write_tokenizer_files",
)


def __getattr__(name):
    if name in _FROM_WORDPIECE:
        return getattr(importlib.import_module(f"{__name__}.wordpiece"), name)
    if name in _FROM_PYTHON_TOKENIZER:
        return getattr(importlib.import_module(f"{__name__}.python_tokenizer"), name)
    if name == "PretrainedTokenizer":
        return getattr(importlib.import_module(f"{__name__}.pretrained"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PretrainedTokenizer",
    "PythonWordPieceTokenizer",
    "RESERVED_TOKENS",
    "WordPieceTokenizer",
    "build_vocabulary",
    "read_tokenizer_files",
    "save_vocabulary",
    "trim_shared_padding",
    "write_tokenizer_files",
]
