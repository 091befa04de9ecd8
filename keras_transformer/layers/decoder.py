"""The Transformer decoder block, with a key/value cache for incremental decoding."""

import contextlib
import threading

import keras
from keras import ops

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.block import TransformerBlock
from keras_transformer.layers.masks import attention_bias, causal_mask, merge_masks


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
    cache gives the outputs of one full causal pass. A decoding loop also
    passes `compute_projection_matrices()`, computed once before the loop, so
    that no step reshapes the projection kernels.

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
            attentions; the full pass and the cached call both attend through
            it.
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
        projection_matrices: the dict of `compute_projection_matrices`, or
            None: the projections then read their layers' kernels.
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
    >>> # As a decoding loop runs it: the kernels as matrices, read once.
    >>> matrices = block.compute_projection_matrices()
    >>> step, cache = block(target[:, 1:2], cross_attention_cache=cross,
    ...                     self_attention_cache=cache,
    ...                     self_attention_cache_update_index=1,
    ...                     projection_matrices=matrices)
    >>> tuple(step.shape)
    (2, 1, 32)

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

    def compute_projection_matrices(self):
        """The attention projections as 2-D matrices, for a decoding loop to read once.

        A decoding loop calls the block once per token. Read from the layers,
        the kernels would be reshaped at every step and the query, key and
        value would take three products, where a step's attention over one
        query is itself small. Computed once before the loop and passed to
        every cached call as `projection_matrices`, they are plain matmul
        operands, the self-attention's query, key and value kernels fused
        into one.

        Returns:
            A dict of `(kernel [in, out], bias [out] or None)` pairs in the
            compute dtype: `"self_query_key_value"` (kernel `[d, 3 * d]`),
            `"self_output"`, and with cross-attention `"cross_query"` and
            `"cross_output"`. None when a projection is no plain matrix
            product (quantized, or the attention class overrides
            `project_query` & co.): the block then projects through its
            layers at every call, which it also does without this.
        """
        attentions = [self.self_attention]
        if self.cross_attention is not None:
            attentions.append(self.cross_attention)
        if not all(_projects_as_matrices(attention) for attention in attentions):
            return None
        query, key, value = (
            self.self_attention.projection_matrix(name) for name in ("query", "key", "value")
        )
        matrices = {
            "self_query_key_value": (
                ops.concatenate([query[0], key[0], value[0]], axis=1),
                None if query[1] is None else ops.concatenate([query[1], key[1], value[1]]),
            ),
            "self_output": self.self_attention.projection_matrix("output"),
        }
        if self.cross_attention is not None:
            matrices["cross_query"] = self.cross_attention.projection_matrix("query")
            matrices["cross_output"] = self.cross_attention.projection_matrix("output")
        return matrices

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        encoder_padding_mask=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        projection_matrices=None,
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
        matrices = projection_matrices or {}
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
                matrices,
            )
            return self._sublayer_dropout(output, training), new_cache

        def cross_attention(x):
            output, scores["cross_attention"] = self._cross_attention(
                x,
                encoder_sequence,
                cross_attention_cache,
                encoder_padding_mask,
                training,
                return_attention_scores,
                matrices,
            )
            return self._sublayer_dropout(output, training), None

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

    def _sublayer_dropout(self, output, training):
        # The identity unless training: without the layer call, a decoding
        # step on an eager backend saves the call's overhead twice per block.
        if not training or self.dropout == 0:
            return output
        return self.sublayer_dropout(output, training=training)

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

    def _cross_attention(
        self, x, encoder_sequence, cache, padding_mask, training, return_weights, matrices
    ):
        """Returns `(output, weights)`; keys and values from `cache` when given,
        else projected from `encoder_sequence`."""
        attention = self.cross_attention
        if cache is not None:
            key_heads, value_heads = cache[0], cache[1]
        else:
            key_heads = attention.project_key(encoder_sequence)
            value_heads = attention.project_value(encoder_sequence)
        if "cross_query" in matrices:
            query_heads = self._project_with_matrix(x, *matrices["cross_query"], parts=1)
        else:
            query_heads = attention.project_query(x)
        mask = merge_masks(ops.shape(x)[1], ops.shape(key_heads)[2], key_mask=padding_mask)
        attended, weights = attention.attend(
            query_heads,
            key_heads,
            value_heads,
            mask,
            training=training,
            return_attention_scores=return_weights,
        )
        return _project_output(attention, attended, matrices.get("cross_output")), weights

    def _self_attention(
        self,
        x,
        padding_mask,
        use_causal_mask,
        cache,
        cache_index,
        training,
        return_weights,
        matrices,
    ):
        """Returns `(output, weights, new_cache)`; `new_cache` is None without a cache,
        `weights` None when not `return_weights` and the attention ran fused."""
        attention = self.self_attention
        keys_and_values = None
        if "self_query_key_value" in matrices:
            # [3 (query, key, value), B, heads, T, head_dim]
            projected = self._project_with_matrix(x, *matrices["self_query_key_value"], parts=3)
            query_heads, key_heads, value_heads = projected[0], projected[1], projected[2]
            keys_and_values = projected[1:]
        else:
            query_heads = attention.project_query(x)
            key_heads, value_heads = attention.project_key(x), attention.project_value(x)
        length = ops.shape(x)[1]
        mask = query_mask = prepared_mask = None
        if cache is None:
            # The query mask goes to `compute_attention` on its own (a smaller bias).
            mask = merge_masks(
                length, length, key_mask=padding_mask, use_causal_mask=use_causal_mask
            )
            query_mask = padding_mask
        else:
            # Stacked only to write the cache: a training call would copy both for nothing.
            if keys_and_values is None:
                keys_and_values = ops.stack([key_heads, value_heads])
            cache = _write_cache(cache, keys_and_values, cache_index)
            key_heads, value_heads = cache[0], cache[1]
            # Cache slots past the current positions hold zeros; the causal
            # mask (offset by the cache index) keeps them out.
            causal = causal_mask(length, ops.shape(cache)[3], offset=cache_index)
            if padding_mask is None:
                # Every query attends at least its own position: no row to zero.
                prepared_mask = (attention_bias(causal), None)
            else:
                mask = merge_masks(
                    length, ops.shape(cache)[3], key_mask=padding_mask, attention_mask=causal
                )
        attended, weights = attention.attend(
            query_heads,
            key_heads,
            value_heads,
            mask,
            training=training,
            query_mask=query_mask,
            prepared_mask=prepared_mask,
            return_attention_scores=return_weights,
        )
        return _project_output(attention, attended, matrices.get("self_output")), weights, cache

    def _project_with_matrix(self, x, kernel, bias, parts):
        """`x` `[B, T, d]` times a `[d, parts * d]` matrix, as `parts` stacked
        heads `[parts, B, heads, T, head_dim]` (`[B, heads, T, head_dim]` for one)."""
        length = ops.shape(x)[1]
        if keras.backend.backend() == "tensorflow":
            # There a matmul of rank 3 is a `tensordot`, a dozen shape ops.
            x = ops.reshape(x, (-1, kernel.shape[0]))
        projected = _affine(x, kernel, bias)
        heads, head_dim = self.num_heads, self.head_dim
        if parts == 1 and isinstance(length, int) and length == 1:
            # One position: heads before length without a transpose.
            return ops.reshape(projected, (-1, heads, 1, head_dim))
        if parts == 1:
            projected = ops.reshape(projected, (-1, length, heads, head_dim))
            return ops.transpose(projected, (0, 2, 1, 3))
        projected = ops.reshape(projected, (-1, length, parts, heads, head_dim))
        return ops.transpose(projected, (2, 0, 3, 1, 4))

    def compute_mask(self, decoder_sequence, mask=None, **kwargs):
        # Keras hands the Keras mask of `decoder_sequence` as `mask`.
        return mask

    def compute_output_shape(self, decoder_sequence_shape, encoder_sequence_shape=None):
        return decoder_sequence_shape


# Whether the TensorFlow backend writes the cache with `ops.slice_update` (set only
# inside `portable_cache_writes`).
_portable_cache_writes = threading.local()


@contextlib.contextmanager
def portable_cache_writes():
    """Within it, the decoder blocks traced on TensorFlow write their key/value cache with
    `keras.ops.slice_update` (an XLA dynamic-update-slice) instead of a strided-slice update.

    The strided-slice update is TensorFlow's fastest; other runtimes have no kernel for
    it, while LiteRT's and ONNX's converters turn a dynamic-update-slice into their own
    builtin op. The exports for those runtimes trace their decoding loop inside this.
    Either way the same positions are written.

    Example:

    >>> with portable_cache_writes():  # doctest: +SKIP
    ...     concrete = tf.function(greedy).get_concrete_function(source_spec)
    """
    previous = getattr(_portable_cache_writes, "on", False)
    _portable_cache_writes.on = True
    try:
        yield
    finally:
        _portable_cache_writes.on = previous


def _write_cache(cache, entries, index):
    """`cache` `[2, B, heads, max_length, dim]` with `entries` `[2, B, heads, T, dim]`
    written at positions `index .. index + T - 1`.

    On TensorFlow, a strided-slice update, a core op: `ops.slice_update`
    there is an XLA dynamic-update-slice, compiled and launched on its own at
    every call, and a scatter of the rows is several times slower than this
    update (benchmarks/BENCHMARKS.md). `portable_cache_writes` chooses
    `ops.slice_update` for runtimes other than TensorFlow's.
    """
    if keras.backend.backend() != "tensorflow" or getattr(_portable_cache_writes, "on", False):
        return ops.slice_update(cache, (0, 0, 0, index, 0), ops.cast(entries, cache.dtype))
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


def _project_output(attention, attended, matrix):
    """`attention.project_output(attended)`, `[B, heads, T, dim]` -> `[B, T, d]`, with
    `matrix` (a `(kernel, bias)` pair of `compute_projection_matrices`) when given."""
    if matrix is None:
        return attention.project_output(attended)
    kernel, bias = matrix
    length = ops.shape(attended)[2]
    # With one position, [B, heads, 1, dim] is already in [B, T, heads, dim]'s order.
    if not (isinstance(length, int) and length == 1):
        attended = ops.transpose(attended, (0, 2, 1, 3))
    if keras.backend.backend() != "tensorflow":
        return _affine(ops.reshape(attended, (-1, length, kernel.shape[0])), kernel, bias)
    # A 2-D product: on TensorFlow one of rank 3 is a `tensordot`.
    output = _affine(ops.reshape(attended, (-1, kernel.shape[0])), kernel, bias)
    return ops.reshape(output, (-1, length, kernel.shape[1]))


def _projects_as_matrices(attention):
    """Whether every projection of `attention` is the plain matrix product
    `projection_matrix` gives: not quantized, no activation, and not
    overridden by the attention class."""
    overridden = any(
        getattr(type(attention), name) is not getattr(MultiHeadAttention, name)
        for name in ("project_query", "project_key", "project_value", "project_output")
    )
    dense_layers = [attention.query_dense, attention.key_dense, attention.value_dense]
    return (
        not overridden
        and not attention.use_gate
        and all(attention._as_matmul(dense) for dense in [*dense_layers, attention.output_dense])
    )


def _affine(x, kernel, bias):
    x = ops.matmul(x, kernel)
    return x if bias is None else x + bias
