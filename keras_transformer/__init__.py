"""keras_transformer: Transformer layers for Keras 3, and applications built from them."""

__version__ = "0.1.0"
