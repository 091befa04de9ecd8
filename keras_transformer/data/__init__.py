"""Corpora behind one registry per task: a source name -> split, labelled data.

Nothing here downloads anything unless the source named is online (`tfds:`).
"""

from keras_transformer.data.classification import CLASSIFICATION_SOURCES
from keras_transformer.data.classification import ClassificationData
from keras_transformer.data.classification import TextSplit
from keras_transformer.data.classification import load_classification_data
from keras_transformer.data.errors import DataError

__all__ = [
    "CLASSIFICATION_SOURCES",
    "ClassificationData",
    "DataError",
    "TextSplit",
    "load_classification_data",
]
