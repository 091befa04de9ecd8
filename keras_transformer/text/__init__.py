"""Text to token ids and back, with tensorflow-text ops that export with the model."""

from keras_transformer.text.padding import trim_shared_padding
from keras_transformer.text.wordpiece import RESERVED_TOKENS
from keras_transformer.text.wordpiece import WordPieceTokenizer
from keras_transformer.text.wordpiece import build_vocabulary
from keras_transformer.text.wordpiece import save_vocabulary

__all__ = ["RESERVED_TOKENS", "WordPieceTokenizer", "build_vocabulary", "save_vocabulary", "trim_shared_padding"]
