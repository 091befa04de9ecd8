"""The Transformer encoder block: self-attention and feed-forward, each residual."""

import keras

from keras_transformer.layers.block import TransformerBlock


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerEncoderBlock(TransformerBlock):
    """One encoder block: multi-head self-attention, then a feed-forward network.

    Each sub-layer is wrapped in dropout, a residual connection and layer
    normalization, after the sum as in the paper (`normalize_first=False`) or
    before the sub-layer (`normalize_first=True`, more stable for deep stacks).
    Heads have size `d_model // num_heads`.

    Args:
        num_heads: attention heads; must divide the input width.
        intermediate_dim: hidden width of the feed-forward network.
        dropout: rate for attention weights and both sub-layer outputs.
        activation: of the feed-forward network.
        layer_norm_epsilon: of both layer normalizations.
        normalize_first: pre-norm instead of the paper's post-norm.
        kernel_initializer, bias_initializer: of every dense projection
            (each gets its own copy, see `clone_initializer`).
        attention_class: `MultiHeadAttention` or a registered subclass of it
            (e.g. with another `compute_attention_logits`), for the
            self-attention.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        inputs: `[B, T, d_model]`.
        padding_mask: bool `[B, T]`, True at real tokens; defaults to the
            Keras mask of `inputs` (e.g. from `mask_zero=True`).
        attention_mask: bool `[B, T, T]`, True = may attend.
        training: whether dropout is active.
        return_attention_scores: also return the weights `[B, heads, T, T]`.

    Example:

    >>> import keras
    >>> from keras_transformer.layers import TokenAndPositionEmbedding, TransformerEncoderBlock
    >>> token_ids = keras.Input((None,), dtype="int32")
    >>> x = TokenAndPositionEmbedding(1000, 128, 64)(token_ids)
    >>> x = TransformerEncoderBlock(num_heads=4, intermediate_dim=128)(x)
    >>> model = keras.Model(token_ids, x)
    >>> tuple(model(keras.ops.ones((2, 10), "int32")).shape)
    (2, 10, 64)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.1.
        Xiong et al., "On Layer Normalization in the Transformer Architecture", 2020.
    """

    def build(self, inputs_shape):
        self.self_attention = self._build_attention("self_attention", inputs_shape, inputs_shape)
        self.self_attention_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.self_attention_norm = self._build_norm("self_attention_norm", inputs_shape)
        self.feed_forward = self._build_feed_forward(inputs_shape)
        self.feed_forward_norm = self._build_norm("feed_forward_norm", inputs_shape)

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        mask=None,
        inputs_mask=None,
    ):
        # Keras fills `mask` (when `inputs` is the only tensor argument) or
        # `inputs_mask` (when it is not) with the Keras mask of `inputs`.
        if padding_mask is None:
            padding_mask = mask if inputs_mask is None else inputs_mask

        def self_attention(x):
            # Scores only when asked: without them the attention may run fused.
            attended = self.self_attention(
                x,
                x,
                query_mask=padding_mask,
                value_mask=padding_mask,
                attention_mask=attention_mask,
                return_attention_scores=return_attention_scores,
                training=training,
            )
            output, scores = attended if return_attention_scores else (attended, None)
            return self.self_attention_dropout(output, training=training), scores

        x, scores = self._residual(self_attention, inputs, self.self_attention_norm)
        x, _ = self._residual(self._feed_forward_sublayer, x, self.feed_forward_norm, training)
        if return_attention_scores:
            return x, scores
        return x

    def compute_mask(self, inputs, mask=None, **kwargs):
        return mask

    def compute_output_shape(self, inputs_shape):
        return inputs_shape
