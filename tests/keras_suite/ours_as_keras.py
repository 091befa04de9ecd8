"""A pytest plugin: Keras' own test files see our `MultiHeadAttention` as
`keras.layers.MultiHeadAttention` (`-p tests.keras_suite.ours_as_keras`).

Keras' test modules import `layers` from `keras.src`, so the class is put
there, and on the public `keras.layers`, before they are collected.
"""

import keras
import keras.src.layers

from keras_transformer.layers import MultiHeadAttention

keras.src.layers.MultiHeadAttention = MultiHeadAttention
keras.layers.MultiHeadAttention = MultiHeadAttention
