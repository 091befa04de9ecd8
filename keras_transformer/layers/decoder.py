"""The Transformer decoder block, with a key/value cache for incremental decoding."""

import keras
from keras import ops

from keras_transformer.layers.block import TransformerBlock
from keras_transformer.layers.masks import keras_mask
from keras_transformer.layers.masks import merge_masks


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerDecoderBlock(TransformerBlock):
    """One decoder block: causal self-attention, cross-attention, feed-forward.

    Called with an `encoder_sequence` it is the paper's decoder block;
    without one it is a decoder-only (GPT-style) block with no cross-attention.
    Whether it has cross-attention is fixed by the first call (its build).

    For incremental decoding, the self-attention keys and values of earlier
    positions are kept in a cache `[B, 2, heads, max_length, head_dim]`
    (keys, then values) that each step writes at `self_attention_cache_update_index`,
    and the cross-attention keys and values are computed once per source with
    `compute_cross_attention_cache`. Decoding one token at a time with the
    cache gives the outputs of one full causal pass.

    Args:
        num_heads: attention heads; must divide the input width.
        intermediate_dim: hidden width of the feed-forward network.
        dropout: rate for attention weights and the sub-layer outputs.
        activation: of the feed-forward network.
        layer_norm_epsilon: of the layer normalizations.
        normalize_first: pre-norm instead of the paper's post-norm.
        kernel_initializer, bias_initializer: of every dense projection.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        decoder_sequence: `[B, T, d_model]`.
        encoder_sequence: `[B, S, d_enc]`, or None for a decoder-only block.
        decoder_padding_mask: bool `[B, T]` (with a cache: `[B, max_length]`),
            True at real tokens; defaults to the Keras mask of `decoder_sequence`.
        encoder_padding_mask: bool `[B, S]`; defaults to the Keras mask of
            `encoder_sequence`. Pass it explicitly with `cross_attention_cache`.
        self_attention_cache: `[B, 2, heads, max_length, head_dim]` from
            `initialize_self_attention_cache`, or None for a full pass.
        self_attention_cache_update_index: position of `decoder_sequence[:, 0]`
            in the sequence being decoded (int or scalar tensor).
        cross_attention_cache: `[B, 2, heads, S, head_dim]` from
            `compute_cross_attention_cache`, used instead of `encoder_sequence`.
        use_causal_mask: whether position `i` only attends positions `<= i`.
        training: whether dropout is active.
        return_attention_scores: also return a dict with `"self_attention"`
            and `"cross_attention"` weights `[B, heads, T, ...]`.

    Returns:
        `outputs [B, T, d_model]`, followed by the updated self-attention cache
        when one was given, followed by the scores dict when asked.

    Example:

    >>> block = TransformerDecoderBlock(num_heads=4, intermediate_dim=64)
    >>> source = keras.random.normal((2, 7, 32))
    >>> target = keras.random.normal((2, 5, 32))
    >>> block(target, source).shape
    (2, 5, 32)
    >>> # Incremental decoding: one position per call.
    >>> cache = block.initialize_self_attention_cache(batch_size=2, max_length=5)
    >>> cross = block.compute_cross_attention_cache(source)
    >>> step, cache = block(target[:, :1], cross_attention_cache=cross,
    ...                     self_attention_cache=cache,
    ...                     self_attention_cache_update_index=0)

    References:
        Vaswani et al., "Attention Is All You Need", 2017, section 3.1.
    """

    def __init__(self, num_heads, intermediate_dim, **kwargs):
        super().__init__(num_heads, intermediate_dim, **kwargs)
        self.cross_attention = None

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        self.head_dim = self._head_dim(decoder_sequence_shape[-1])
        self.self_attention = self._build_attention(
            "self_attention", decoder_sequence_shape, decoder_sequence_shape
        )
        self.self_attention_norm = self._build_norm("self_attention_norm", decoder_sequence_shape)
        if encoder_sequence_shape is not None:
            self.cross_attention = self._build_attention(
                "cross_attention", decoder_sequence_shape, encoder_sequence_shape
            )
            self.cross_attention_norm = self._build_norm("cross_attention_norm", decoder_sequence_shape)
        self.feed_forward = self._build_feed_forward(decoder_sequence_shape)
        self.feed_forward_norm = self._build_norm("feed_forward_norm", decoder_sequence_shape)
        self.sublayer_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    def initialize_self_attention_cache(self, batch_size, max_length):
        """Zeros `[B, 2, heads, max_length, head_dim]` to decode up to `max_length` tokens."""
        return ops.zeros(
            (batch_size, 2, self.num_heads, max_length, self.head_dim), dtype=self.compute_dtype
        )

    def compute_cross_attention_cache(self, encoder_sequence):
        """Projected keys and values of one source, `[B, 2, heads, S, head_dim]`."""
        if self.cross_attention is None:
            raise ValueError("This decoder block has no cross-attention (it was built without an encoder sequence).")
        encoder_sequence = ops.cast(encoder_sequence, self.compute_dtype)
        return ops.stack(
            [
                self.cross_attention.project_key(encoder_sequence),
                self.cross_attention.project_value(encoder_sequence),
            ],
            axis=1,
        )

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        encoder_padding_mask=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        use_causal_mask=True,
        training=None,
        return_attention_scores=False,
    ):
        has_source = encoder_sequence is not None or cross_attention_cache is not None
        if has_source and self.cross_attention is None:
            raise ValueError(
                "This decoder block was built without cross-attention; it cannot attend to an encoder sequence."
            )
        if not has_source and self.cross_attention is not None:
            raise ValueError(
                "This decoder block has cross-attention: pass `encoder_sequence` or `cross_attention_cache`."
            )
        if self_attention_cache is not None and self_attention_cache_update_index is None:
            raise ValueError("`self_attention_cache_update_index` is required with `self_attention_cache`.")
        if decoder_padding_mask is None and self_attention_cache is None:
            decoder_padding_mask = keras_mask(decoder_sequence)
        if encoder_padding_mask is None and encoder_sequence is not None:
            encoder_padding_mask = keras_mask(encoder_sequence)
        scores = {}

        def self_attention(x):
            output, scores["self_attention"], new_cache = self._self_attention(
                x, decoder_padding_mask, use_causal_mask,
                self_attention_cache, self_attention_cache_update_index, training,
            )
            return self.sublayer_dropout(output, training=training), new_cache

        def cross_attention(x):
            attention = self.cross_attention
            if cross_attention_cache is not None:
                key_heads, value_heads = cross_attention_cache[:, 0], cross_attention_cache[:, 1]
            else:
                key_heads = attention.project_key(encoder_sequence)
                value_heads = attention.project_value(encoder_sequence)
            mask = merge_masks(
                ops.shape(x)[1], ops.shape(key_heads)[2], key_mask=encoder_padding_mask
            )
            attended, scores["cross_attention"] = attention.compute_attention(
                attention.project_query(x), key_heads, value_heads, mask, training=training
            )
            output = attention.project_output(attended)
            return self.sublayer_dropout(output, training=training), None

        def feed_forward(x):
            return self.feed_forward(x, training=training), None

        x, new_cache = self._residual(self_attention, decoder_sequence, self.self_attention_norm)
        if has_source:
            x, _ = self._residual(cross_attention, x, self.cross_attention_norm)
        x, _ = self._residual(feed_forward, x, self.feed_forward_norm)

        outputs = (x,)
        if self_attention_cache is not None:
            outputs += (new_cache,)
        if return_attention_scores:
            outputs += (scores,)
        return outputs[0] if len(outputs) == 1 else outputs

    def _self_attention(self, x, padding_mask, use_causal_mask, cache, cache_index, training):
        """Returns `(output, weights, new_cache)`; `new_cache` is None without a cache."""
        attention = self.self_attention
        query_heads = attention.project_query(x)
        key_heads = attention.project_key(x)
        value_heads = attention.project_value(x)
        length = ops.shape(x)[1]
        query_mask = None
        if cache is None:
            # The query mask goes to `compute_attention` on its own (a smaller bias).
            mask = merge_masks(length, length, key_mask=padding_mask, use_causal_mask=use_causal_mask)
            query_mask = padding_mask
        else:
            cache = _write_cache(cache, ops.stack([key_heads, value_heads], axis=1), cache_index)
            key_heads, value_heads = cache[:, 0], cache[:, 1]
            # Cache slots past the current positions hold zeros; the causal
            # mask (offset by the cache index) keeps them out.
            mask = merge_masks(
                length,
                ops.shape(key_heads)[2],
                key_mask=padding_mask,
                use_causal_mask=True,
                causal_offset=cache_index,
            )
        attended, weights = attention.compute_attention(
            query_heads, key_heads, value_heads, mask, training=training, query_mask=query_mask
        )
        return attention.project_output(attended), weights, cache

    def compute_mask(self, decoder_sequence, encoder_sequence=None, **kwargs):
        return keras_mask(decoder_sequence)


def _write_cache(cache, entries, index):
    """`cache` `[B, 2, heads, max_length, dim]` with `entries` `[B, 2, heads, T, dim]`
    written at positions `index .. index + T - 1`.

    A scatter of the new rows rather than `ops.slice_update`: on the
    TensorFlow backend that is an XLA dynamic-update-slice compiled and
    launched on its own at every call, and a `where` over the whole cache is a
    slow broadcasting select; either cost a decoding step more than its
    attention.
    """
    batch_size, _, num_heads, steps, dim = ops.shape(entries)
    positions = ops.arange(steps, dtype="int32") + ops.cast(index, "int32")
    grid = ops.meshgrid(
        ops.arange(batch_size, dtype="int32"), ops.arange(2, dtype="int32"),
        ops.arange(num_heads, dtype="int32"), positions, indexing="ij",
    )
    indices = ops.reshape(ops.stack(grid, axis=-1), (-1, 4))
    return ops.scatter_update(cache, indices, ops.reshape(entries, (-1, dim)))
