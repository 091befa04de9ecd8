"""The Transformer decoder block, with a key/value cache for incremental decoding."""

import keras
from keras import ops

from keras_transformer.layers.block import TransformerBlock
from keras_transformer.layers.masks import attention_bias, merge_masks


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerDecoderBlock(TransformerBlock):
    """One decoder block: causal self-attention, cross-attention, feed-forward.

    Called with an `encoder_sequence` it is the paper's decoder block;
    without one it is a decoder-only (GPT-style) block with no cross-attention.
    Whether it has cross-attention is fixed by the first call (its build).

    For incremental decoding, the self-attention keys and values of earlier
    positions are kept in a cache `[2, B, heads, max_length, head_dim]`
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
        kernel_initializer, bias_initializer: of every dense projection
            (each gets its own copy, see `clone_initializer`).
        attention_class: `MultiHeadAttention` or a registered subclass of it
            (e.g. with another `compute_attention_logits`), for both
            attentions; the full pass, the cached call and `decode_token` all
            attend through it.
        **kwargs: base `keras.layers.Layer` arguments.

    Call arguments:
        decoder_sequence: `[B, T, d_model]`.
        encoder_sequence: `[B, S, d_enc]`, or None for a decoder-only block.
        decoder_padding_mask: bool `[B, T]` (with a cache: `[B, max_length]`),
            True at real tokens; defaults to the Keras mask of `decoder_sequence`.
        encoder_padding_mask: bool `[B, S]`; defaults to the Keras mask of
            `encoder_sequence`. Pass it explicitly with `cross_attention_cache`.
        self_attention_cache: `[2, B, heads, max_length, head_dim]` from
            `initialize_self_attention_cache`, or None for a full pass.
        self_attention_cache_update_index: position of `decoder_sequence[:, 0]`
            in the sequence being decoded (int or scalar tensor).
        cross_attention_cache: `[2, B, heads, S, head_dim]` from
            `compute_cross_attention_cache`, used instead of `encoder_sequence`.
        use_causal_mask: whether position `i` only attends positions `<= i`.
        training: whether dropout is active.
        return_attention_scores: also return a dict with `"self_attention"`
            and `"cross_attention"` weights `[B, heads, T, ...]`.

    Returns:
        `outputs [B, T, d_model]`, followed by the updated self-attention cache
        when one was given, followed by the scores dict when asked.

    Example:

    >>> import keras
    >>> from keras_transformer.layers import TransformerDecoderBlock
    >>> block = TransformerDecoderBlock(num_heads=4, intermediate_dim=64)
    >>> source = keras.random.normal((2, 7, 32))
    >>> target = keras.random.normal((2, 5, 32))
    >>> tuple(block(target, source).shape)
    (2, 5, 32)
    >>> # Incremental decoding: one position per call.
    >>> cache = block.initialize_self_attention_cache(batch_size=2, max_length=5)
    >>> cross = block.compute_cross_attention_cache(source)
    >>> step, cache = block(target[:, :1], cross_attention_cache=cross,
    ...                     self_attention_cache=cache,
    ...                     self_attention_cache_update_index=0)
    >>> tuple(step.shape), tuple(cache.shape)
    ((2, 1, 32), (2, 2, 4, 5, 8))
    >>> # The same step in the fast one-token form, as a decoding loop runs it.
    >>> constants = block.prepare_token_decoding(source)
    >>> cache = block.initialize_self_attention_cache(batch_size=2, max_length=5)
    >>> step, cache = block.decode_token(target[:, 0], 0, cache, constants)
    >>> tuple(step.shape)
    (2, 32)

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
            self.cross_attention_norm = self._build_norm(
                "cross_attention_norm", decoder_sequence_shape
            )
        self.feed_forward = self._build_feed_forward(decoder_sequence_shape)
        self.feed_forward_norm = self._build_norm("feed_forward_norm", decoder_sequence_shape)
        self.sublayer_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    def initialize_self_attention_cache(self, batch_size, max_length):
        """Zeros `[2, B, heads, max_length, head_dim]` (keys, then values) to
        decode up to `max_length` tokens.

        Keys and values on the first axis so that taking either is a view,
        not a copy: a `[B, 2, ...]` slice cost each decoding step two copies of
        every cache.
        """
        return ops.zeros(
            (2, batch_size, self.num_heads, max_length, self.head_dim), dtype=self.compute_dtype
        )

    def compute_cross_attention_cache(self, encoder_sequence):
        """Projected keys and values of one source, `[2, B, heads, S, head_dim]`."""
        if self.cross_attention is None:
            raise ValueError(
                "This decoder block has no cross-attention "
                "(it was built without an encoder sequence)."
            )
        encoder_sequence = ops.cast(encoder_sequence, self.compute_dtype)
        return ops.stack(
            [
                self.cross_attention.project_key(encoder_sequence),
                self.cross_attention.project_value(encoder_sequence),
            ],
            axis=0,
        )

    def prepare_token_decoding(self, encoder_sequence=None, encoder_padding_mask=None):
        """What `decode_token` reads at every step but never changes, computed once.

        The cross-attention keys and values of `encoder_sequence` (as
        `compute_cross_attention_cache`) and the mask its
        `encoder_padding_mask` (bool `[B, S]`, None: no padding) makes, in
        `MultiHeadAttention.prepare_attention_mask`'s form; every projection
        kernel in the layout of one 2-D matmul, the self-attention's query,
        key and value fused into one `[d, 3 * d]` matrix. Done inside the
        decoding loop, this reshaping and fusing costs more than a step's
        attention.

        Returns a dict of tensors, to pass to `decode_token` unchanged.
        """
        if (encoder_sequence is None) != (self.cross_attention is None):
            raise ValueError(
                "Pass `encoder_sequence` exactly when the block has cross-attention "
                f"(this one {'has' if self.cross_attention is not None else 'has none'})."
            )
        attention = self.self_attention
        matrices = [attention.projection_matrix(name) for name in ("query", "key", "value")]
        constants = {
            "qkv_kernel": ops.concatenate([kernel for kernel, _ in matrices], axis=1),
            "qkv_bias": None
            if matrices[0][1] is None
            else ops.concatenate([bias for _, bias in matrices], axis=0),
        }
        constants["self_output_kernel"], constants["self_output_bias"] = (
            attention.projection_matrix("output")
        )
        if self.cross_attention is not None:
            cross = self.compute_cross_attention_cache(encoder_sequence)
            constants["cross_keys"], constants["cross_values"] = cross[0], cross[1]
            if encoder_padding_mask is not None:
                constants["cross_bias"], constants["cross_rows"] = (
                    self.cross_attention.prepare_attention_mask(
                        merge_masks(
                            1, ops.shape(encoder_padding_mask)[1], key_mask=encoder_padding_mask
                        )
                    )
                )
            constants["cross_query_kernel"], constants["cross_query_bias"] = (
                self.cross_attention.projection_matrix("query")
            )
            constants["cross_output_kernel"], constants["cross_output_bias"] = (
                self.cross_attention.projection_matrix("output")
            )
        return {name: value for name, value in constants.items() if value is not None}

    def decode_token(self, x, index, self_attention_cache, constants):
        """One decoding step for one token per sequence, at inference.

        The same result as calling the block on `x[:, None]` with
        `self_attention_cache` and `cross_attention_cache`, in fewer and
        smaller ops: `[B, d]` rows and 2-D matmuls for the projections, the
        loop-invariant work done beforehand by `prepare_token_decoding`, and
        attention through the attention layers' own `attend` with one query
        per head (fused unless the attention class overrides the scoring).
        The projections are read as matrices
        (`MultiHeadAttention.projection_matrix`), so a subclass that
        overrides `project_query` & co. (rather than the attention hooks)
        decodes with the plain projections here.

        Args:
            x: `[B, d_model]`, the token at position `index`.
            index: its position (scalar int tensor or int).
            self_attention_cache: `[2, B, heads, max_length, head_dim]`.
            constants: from `prepare_token_decoding`.

        Returns:
            `(outputs [B, d_model], updated self_attention_cache)`.
        """
        x = ops.cast(x, self.compute_dtype)
        max_length = ops.shape(self_attention_cache)[3]
        # Cache slots past `index` hold zeros; this bias keeps them out. The
        # query attends at least itself, so no row needs zeroing.
        causal_mask = (
            attention_bias(ops.arange(max_length, dtype="int32") <= ops.cast(index, "int32")),
            None,
        )
        x, cache = self._residual(
            self._decode_self_attention,
            x,
            self.self_attention_norm,
            index,
            self_attention_cache,
            causal_mask,
            constants,
        )
        if self.cross_attention is not None:
            x, _ = self._residual(
                self._decode_cross_attention, x, self.cross_attention_norm, constants
            )
        x, _ = self._residual(self._feed_forward_sublayer, x, self.feed_forward_norm)
        return x, cache

    def _decode_self_attention(self, y, index, cache, causal_mask, constants):
        """`decode_token`'s self-attention: `(output [B, d], updated cache)`."""
        heads, head_dim = self.num_heads, self.head_dim
        qkv = _affine(y, constants["qkv_kernel"], constants.get("qkv_bias"))
        # [B, 3 * d] -> [3 (query, key, value), B, heads, 1, head_dim]
        qkv = ops.moveaxis(ops.reshape(qkv, (-1, 3, heads, 1, head_dim)), 1, 0)
        cache = _write_cache(cache, qkv[1:], index)
        attended, _ = self.self_attention.attend(
            qkv[0], cache[0], cache[1], training=False, prepared_mask=causal_mask
        )
        # [B, heads, 1, head_dim] -> [B, d]: with one position, no transpose.
        attended = ops.reshape(attended, (-1, heads * head_dim))
        output = _affine(
            attended, constants["self_output_kernel"], constants.get("self_output_bias")
        )
        return output, cache

    def _decode_cross_attention(self, y, constants):
        """`decode_token`'s cross-attention: `(output [B, d], None)`."""
        heads, head_dim = self.num_heads, self.head_dim
        query = _affine(y, constants["cross_query_kernel"], constants.get("cross_query_bias"))
        query = ops.reshape(query, (-1, heads, 1, head_dim))
        attended, _ = self.cross_attention.attend(
            query,
            constants["cross_keys"],
            constants["cross_values"],
            training=False,
            prepared_mask=(constants.get("cross_bias"), constants.get("cross_rows")),
        )
        attended = ops.reshape(attended, (-1, heads * head_dim))
        output = _affine(
            attended, constants["cross_output_kernel"], constants.get("cross_output_bias")
        )
        return output, None

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
        mask=None,
        decoder_sequence_mask=None,
        encoder_sequence_mask=None,
    ):
        has_source = encoder_sequence is not None or cross_attention_cache is not None
        self._check_call_arguments(
            has_source, self_attention_cache, self_attention_cache_update_index
        )
        # Keras fills `mask` (when `decoder_sequence` is the only tensor
        # argument) or `decoder_sequence_mask` and `encoder_sequence_mask`
        # (when there are more) with the inputs' Keras masks.
        if decoder_padding_mask is None and self_attention_cache is None:
            decoder_padding_mask = mask if decoder_sequence_mask is None else decoder_sequence_mask
        if encoder_padding_mask is None and encoder_sequence is not None:
            encoder_padding_mask = encoder_sequence_mask
        scores = {}

        def self_attention(x):
            output, scores["self_attention"], new_cache = self._self_attention(
                x,
                decoder_padding_mask,
                use_causal_mask,
                self_attention_cache,
                self_attention_cache_update_index,
                training,
                return_attention_scores,
            )
            return self.sublayer_dropout(output, training=training), new_cache

        def cross_attention(x):
            output, scores["cross_attention"] = self._cross_attention(
                x,
                encoder_sequence,
                cross_attention_cache,
                encoder_padding_mask,
                training,
                return_attention_scores,
            )
            return self.sublayer_dropout(output, training=training), None

        x, new_cache = self._residual(self_attention, decoder_sequence, self.self_attention_norm)
        if has_source:
            x, _ = self._residual(cross_attention, x, self.cross_attention_norm)
        x, _ = self._residual(self._feed_forward_sublayer, x, self.feed_forward_norm, training)

        outputs = (x,)
        if self_attention_cache is not None:
            outputs += (new_cache,)
        if return_attention_scores:
            outputs += (scores,)
        return outputs[0] if len(outputs) == 1 else outputs

    def _check_call_arguments(self, has_source, cache, cache_index):
        if has_source and self.cross_attention is None:
            raise ValueError(
                "This decoder block was built without cross-attention; "
                "it cannot attend to an encoder sequence."
            )
        if not has_source and self.cross_attention is not None:
            raise ValueError(
                "This decoder block has cross-attention: "
                "pass `encoder_sequence` or `cross_attention_cache`."
            )
        if cache is not None and cache_index is None:
            raise ValueError(
                "`self_attention_cache_update_index` is required with `self_attention_cache`."
            )

    def _cross_attention(self, x, encoder_sequence, cache, padding_mask, training, return_weights):
        """Returns `(output, weights)`; keys and values from `cache` when given,
        else projected from `encoder_sequence`."""
        attention = self.cross_attention
        if cache is not None:
            key_heads, value_heads = cache[0], cache[1]
        else:
            key_heads = attention.project_key(encoder_sequence)
            value_heads = attention.project_value(encoder_sequence)
        mask = merge_masks(ops.shape(x)[1], ops.shape(key_heads)[2], key_mask=padding_mask)
        attended, weights = attention.attend(
            attention.project_query(x),
            key_heads,
            value_heads,
            mask,
            training=training,
            return_attention_scores=return_weights,
        )
        return attention.project_output(attended), weights

    def _self_attention(
        self, x, padding_mask, use_causal_mask, cache, cache_index, training, return_weights
    ):
        """Returns `(output, weights, new_cache)`; `new_cache` is None without a cache,
        `weights` None when not `return_weights` and the attention ran fused."""
        attention = self.self_attention
        query_heads = attention.project_query(x)
        key_heads = attention.project_key(x)
        value_heads = attention.project_value(x)
        length = ops.shape(x)[1]
        query_mask = None
        if cache is None:
            # The query mask goes to `compute_attention` on its own (a smaller bias).
            mask = merge_masks(
                length, length, key_mask=padding_mask, use_causal_mask=use_causal_mask
            )
            query_mask = padding_mask
        else:
            cache = _write_cache(cache, ops.stack([key_heads, value_heads], axis=0), cache_index)
            key_heads, value_heads = cache[0], cache[1]
            # Cache slots past the current positions hold zeros; the causal
            # mask (offset by the cache index) keeps them out.
            mask = merge_masks(
                length,
                ops.shape(key_heads)[2],
                key_mask=padding_mask,
                use_causal_mask=True,
                causal_offset=cache_index,
            )
        attended, weights = attention.attend(
            query_heads,
            key_heads,
            value_heads,
            mask,
            training=training,
            query_mask=query_mask,
            return_attention_scores=return_weights,
        )
        return attention.project_output(attended), weights, cache

    def compute_mask(self, decoder_sequence, mask=None, **kwargs):
        # Keras hands the Keras mask of `decoder_sequence` as `mask`.
        return mask

    def compute_output_shape(self, decoder_sequence_shape, encoder_sequence_shape=None):
        return decoder_sequence_shape


def _write_cache(cache, entries, index):
    """`cache` `[2, B, heads, max_length, dim]` with `entries` `[2, B, heads, T, dim]`
    written at positions `index .. index + T - 1`.

    On TensorFlow, a strided-slice update, a core op: `ops.slice_update`
    there is an XLA dynamic-update-slice, compiled and launched on its own at
    every call, and a scatter of the rows is several times slower than this
    update (benchmarks/BENCHMARKS.md).
    """
    if keras.backend.backend() != "tensorflow":
        return ops.slice_update(cache, (0, 0, 0, index, 0), entries)
    import tensorflow as tf

    start = tf.cast(index, tf.int32)
    stop = start + tf.shape(entries)[3]
    every = 0b10111  # all of every axis but the fourth (positions)
    return tf.raw_ops.TensorStridedSliceUpdate(
        input=cache,
        begin=tf.stack([0, 0, 0, start, 0]),
        end=tf.stack([0, 0, 0, stop, 0]),
        strides=tf.ones([5], tf.int32),
        value=entries,
        begin_mask=every,
        end_mask=every,
    )


def _affine(x, kernel, bias):
    x = ops.matmul(x, kernel)
    return x if bias is None else x + bias
