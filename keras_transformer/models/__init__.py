"""Models built from `keras_transformer.layers`, and the optimizer that fine-tunes a pretrained one."""

from keras_transformer.models.classifier import TransformerClassifier
from keras_transformer.models.fine_tuning import FineTuningAdamW
from keras_transformer.models.masked_lm import MaskedLanguageModel
from keras_transformer.models.pretrained import PretrainedEncoder
from keras_transformer.models.pretrained_classifier import PretrainedClassifier
from keras_transformer.models.seq2seq import Seq2SeqTransformer

__all__ = [
    "FineTuningAdamW",
    "MaskedLanguageModel",
    "PretrainedClassifier",
    "PretrainedEncoder",
    "Seq2SeqTransformer",
    "TransformerClassifier",
]
