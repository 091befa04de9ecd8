"""Models built from `keras_transformer.layers`."""

from keras_transformer.models.classifier import TransformerClassifier
from keras_transformer.models.masked_lm import MaskedLanguageModel
from keras_transformer.models.pretrained import PretrainedEncoder
from keras_transformer.models.pretrained_classifier import PretrainedClassifier
from keras_transformer.models.seq2seq import Seq2SeqTransformer

__all__ = [
    "MaskedLanguageModel",
    "PretrainedClassifier",
    "PretrainedEncoder",
    "Seq2SeqTransformer",
    "TransformerClassifier",
]
