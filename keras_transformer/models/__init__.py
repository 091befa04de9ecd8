"""Models built from `keras_transformer.layers`."""

from keras_transformer.models.classifier import TransformerClassifier

__all__ = ["TransformerClassifier"]
