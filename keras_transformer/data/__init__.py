"""Corpora behind one registry per task: a source name -> split, labelled data.

Nothing here downloads anything unless the source named is online (`tfds:`).
"""

from keras_transformer.data.classification import (
    CLASSIFICATION_SOURCES,
    ClassificationData,
    TextSplit,
    load_classification_data,
)
from keras_transformer.data.errors import DataError
from keras_transformer.data.translation import (
    TRANSLATION_SOURCES,
    PairSplit,
    TranslationData,
    load_translation_data,
)

__all__ = [
    "CLASSIFICATION_SOURCES",
    "ClassificationData",
    "DataError",
    "PairSplit",
    "TRANSLATION_SOURCES",
    "TextSplit",
    "TranslationData",
    "load_classification_data",
    "load_translation_data",
]
