"""Corpora behind one registry per task: a source name -> split, labelled data.

Nothing here downloads anything unless the source named is online (`tfds:`).
"""

from keras_transformer.data.classification import CLASSIFICATION_SOURCES
from keras_transformer.data.classification import ClassificationData
from keras_transformer.data.classification import TextSplit
from keras_transformer.data.classification import load_classification_data
from keras_transformer.data.errors import DataError
from keras_transformer.data.translation import TRANSLATION_SOURCES
from keras_transformer.data.translation import PairSplit
from keras_transformer.data.translation import TranslationData
from keras_transformer.data.translation import load_translation_data

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
