"""The KerasHub encoder-decoder that `apps.train_translator` is measured against: for
quality (translation_quality.py's peer arm) and for speed per training step
(train_throughput.py's `translator` family).

What a KerasHub user builds from KerasHub's public API with the short-budget recipe:
`TokenAndPositionEmbedding` (learned positions) on each side, pre-norm
`TransformerEncoder` / `TransformerDecoder` blocks (`normalize_first=True`) with a final
layer norm after each stack, dropout before a dense output layer. The same
architecture as our app's pre-norm `Seq2SeqTransformer`, but for the position tables
(ours are sinusoidal).

keras-hub is imported only when a model is built: the tests lack it.
"""

import keras

ENCODER_INPUTS, DECODER_INPUTS = "encoder_inputs", "decoder_inputs"


class UnmaskedDense(keras.layers.Dense):
    """The peer's output layer, without the Keras mask: the loss masks padding itself,
    and Keras would otherwise weight the loss by the mask a second time."""

    def compute_mask(self, inputs, previous_mask=None):
        return None


def build_peer_translator(
    source_vocabulary_size,
    target_vocabulary_size,
    max_length,
    num_layers,
    d_model,
    intermediate_dim,
    num_heads,
    dropout,
    kernel_initializer="glorot_uniform",
):
    """A functional `keras.Model` from `{ENCODER_INPUTS: [B, S], DECODER_INPUTS: [B, T]}`
    int32 ids (0 is padding) to logits `[B, T, target_vocabulary_size]`.

    Args:
        source_vocabulary_size, target_vocabulary_size: rows of each token table.
        max_length: rows of each position table: the longest `S` and `T` it reads.
        num_layers: blocks on each side.
        d_model, intermediate_dim, num_heads, dropout: of every block.
        kernel_initializer: of every block's kernels (KerasHub's default Glorot
            uniform counts each attention projection's fans per matrix).
    """
    import keras_hub

    encoder_inputs = keras.Input(shape=(None,), dtype="int32", name=ENCODER_INPUTS)
    decoder_inputs = keras.Input(shape=(None,), dtype="int32", name=DECODER_INPUTS)
    x = keras_hub.layers.TokenAndPositionEmbedding(
        source_vocabulary_size, max_length, d_model, mask_zero=True
    )(encoder_inputs)
    for _ in range(num_layers):
        x = keras_hub.layers.TransformerEncoder(
            intermediate_dim,
            num_heads,
            dropout=dropout,
            normalize_first=True,
            kernel_initializer=kernel_initializer,
        )(x)
    encoder_outputs = keras.layers.LayerNormalization(epsilon=1e-5)(x)
    y = keras_hub.layers.TokenAndPositionEmbedding(
        target_vocabulary_size, max_length, d_model, mask_zero=True
    )(decoder_inputs)
    for _ in range(num_layers):
        y = keras_hub.layers.TransformerDecoder(
            intermediate_dim,
            num_heads,
            dropout=dropout,
            normalize_first=True,
            kernel_initializer=kernel_initializer,
        )(y, encoder_outputs)
    y = keras.layers.LayerNormalization(epsilon=1e-5)(y)
    y = keras.layers.Dropout(dropout)(y)
    logits = UnmaskedDense(target_vocabulary_size)(y)
    return keras.Model([encoder_inputs, decoder_inputs], logits)
