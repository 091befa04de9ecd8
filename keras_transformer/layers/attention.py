"""Scaled dot-product attention and multi-head attention (Vaswani et al., 2017)."""

import math

import keras
from keras import ops

from keras_transformer.layers.initializers import clone_initializer
from keras_transformer.layers.masks import MASKED_LOGIT, attention_bias, masked_value, merge_masks

# The pieces every attention computation of the project is made of: the
# default scoring of `MultiHeadAttention.compute_attention_logits`, its
# float32 softmax and its masking, and `scaled_dot_product_attention`, are
# these functions, so there is one implementation to keep right.


def scaled_dot_product_logits(query, key):
    """`Q K^T / sqrt(d_k)`: query `[..., T, d_k]`, key `[..., S, d_k]` -> `[..., T, S]`.

    A batched matmul against the swapped key rather than an einsum: on the
    TensorFlow backend the einsum kernel's own bookkeeping outweighs the
    arithmetic when decoding one query, and the swap folds into the matmul.
    The scale multiplies the product, not the query: with the query scaled,
    TensorFlow's oneDNN graph rewrite of matmul + bias add inside a decoding
    `tf.while_loop` made the whole `tf.function` return an empty tensor
    (tests/models/test_models_attention_class.py decodes in a `tf.function`).
    """
    scale = ops.cast(1.0 / math.sqrt(query.shape[-1]), query.dtype)
    return ops.matmul(query, ops.swapaxes(key, -1, -2)) * scale


def softmax_with_bias(logits, bias=None):
    """float32 softmax over the last axis of `logits + bias`.

    `bias` is float32, additive, broadcastable to `logits` (0 = may attend,
    `MASKED_LOGIT` = may not; see `attention_bias`), or None. Adding a bias in
    the mask's own small shape, rather than selecting on `[B, heads, T, S]`,
    keeps the selects off the big tensor and out of the backward pass. A row
    with no allowed position comes out uniform: callers zero it (see
    `attending_rows`).
    """
    logits = ops.cast(logits, "float32")
    if bias is not None:
        logits = logits + bias
    return ops.softmax(logits, axis=-1)


def attending_rows(mask):
    """`[..., T, 1]` bool, False for a query row with no allowed key; None without a mask."""
    if mask is None:
        return None
    return ops.any(ops.cast(mask, "bool"), axis=-1, keepdims=True)


def masked_softmax(logits, mask=None):
    """Softmax over the last axis, computed in float32.

    Masked positions (mask False) get weight 0. A row with no allowed position
    gets all-zero weights, never NaN, so a padded query contributes nothing.
    Returns float32 weights; callers cast to their compute dtype.
    """
    if mask is None:
        return softmax_with_bias(logits)
    weights = softmax_with_bias(logits, attention_bias(mask))
    return weights * ops.cast(attending_rows(mask), "float32")


def scaled_dot_product_attention(query, key, value, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V, with a boolean mask (True = may attend).

    The default scoring and softmax of `MultiHeadAttention`, without heads,
    projections or dropout.

    Args:
        query: `[..., T, d_k]`.
        key: `[..., S, d_k]`.
        value: `[..., S, d_v]`.
        mask: bool, broadcastable to `[..., T, S]`; True = may attend. A query
            row with no allowed key gets zero weights and a zero output.

    Returns:
        `(output, weights)`: output `[..., T, d_v]` in the dtype of `value`,
        weights `[..., T, S]` (float32 softmax, cast to the dtype of `value`).

    Example:

    >>> import keras
    >>> from keras_transformer.layers import scaled_dot_product_attention
    >>> q = keras.random.normal((2, 4, 8))
    >>> kv = keras.random.normal((2, 6, 8))
    >>> output, weights = scaled_dot_product_attention(q, kv, kv)
    >>> tuple(output.shape), tuple(weights.shape)
    ((2, 4, 8), (2, 4, 6))
    """
    logits = scaled_dot_product_logits(query, key)
    weights = ops.cast(masked_softmax(logits, mask), value.dtype)
    return ops.matmul(weights, value), weights


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention, a drop-in for `keras.layers.MultiHeadAttention`.

    Queries, keys and values are projected per head, attended with
    scaled dot-product attention (scale `1/sqrt(key_dim)`), concatenated and
    projected back. The projections are `keras.layers.EinsumDense` sublayers
    named as Keras names them (`query`, `key`, `value`, `attention_output`,
    and `gate` with `use_gate`), with Keras' kernel and bias shapes (query,
    key, value kernels `[d, num_heads, key_dim]` and biases
    `[num_heads, key_dim]`, output kernel `[num_heads, value_dim, d]` and
    bias `[d]`). So weights files and `.keras` files move between models
    built with either layer, `get_config()` round-trips with Keras',
    `quantize("int8")`, `enable_lora` on the sublayers and a
    `keras.dtype_policies.DTypePolicyMap` keyed `"<name>/query"` apply as
    they do to Keras' layer, and Keras' own tests for its layer pass against
    this one (tests/keras_suite/).

    Masks are merged once, in `keras_transformer.layers.masks.merge_masks`:
    Keras masks of `query` and `value` (from a `mask_zero=True` embedding),
    an explicit `attention_mask` (`[B, T, S]`, or per head
    `[B, heads, T, S]`), the causal mask and the sliding window. A masked
    logit is replaced, not added to, so whatever a scoring hook returns
    there (NaN, inf) cannot reach the output; a padded query row gets
    all-zero attention weights.

    To change how queries and keys are scored (e.g. add a relative position
    bias), subclass and override `compute_attention_logits`; to change how
    scores become weights, `compute_attention_weights`. Both paths of the
    project's blocks (the training call and the cached call that decoding
    runs) attend through `attend`, which calls `compute_attention` (and so
    both hooks), so a subclass trains and decodes alike. Blocks and models take the subclass as `attention_class`;
    register it with `keras.saving.register_keras_serializable` so that saved
    models find it again. A subclass written for Keras' layer, overriding
    `_compute_attention` on `[B, T, heads, dim]` tensors, is called as
    Keras calls it.

    Fused attention: on JAX with a GPU or TPU, when the caller asks for no
    attention scores and the attention dropout is inactive (`dropout=0`, or
    not training), `attend` computes through `keras.ops.dot_product_attention`
    (cuDNN's flash attention where it applies, XLA otherwise) instead of
    materializing the weights, with the same masks and results. On a CPU the
    op has no fused kernel and is slower, so the explicit path stays.
    `flash_attention=True` fuses wherever those conditions hold,
    `flash_attention=False` (or `keras.config.disable_flash_attention()`)
    never. Only with the default scoring: a subclass that overrides
    `compute_attention_logits`, `compute_attention_weights` or
    `compute_attention` always gets the explicit path, so its override runs.

    Args:
        num_heads: int, number of attention heads.
        key_dim: int, size of each head for query and key.
        value_dim: int, size of each head for value; defaults to `key_dim`.
        dropout: float, dropout rate on the attention weights. Defaults to 0.
        use_bias: bool, whether the projections have biases. Defaults to True.
        output_shape: int or tuple of ints, last dimension(s) of the output;
            defaults to the last dimension of `query`.
        attention_axes: int or tuple of ints, the axes of an input of rank
            above 3 that attention runs over (the others, besides batch and
            features, act as more batch axes); defaults to all of them.
        sliding_window: int, each query attends only keys within
            `sliding_window - 1` positions of its own (with
            `use_causal_mask`, the previous `sliding_window - 1` and itself).
            Defaults to None, no window.
        flash_attention: bool or None, see "Fused attention" above.
        kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer, activity_regularizer, kernel_constraint,
        bias_constraint: for the projections, as in `keras.layers.EinsumDense`;
            each projection gets its own copy of the initializers.
        use_gate: bool, multiply the attended values by a sigmoid gate
            projected from the query (Qiu et al., 2025). Defaults to False.
        seed: int, seed of the attention dropout.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `[B, T, d_query]` (or `[B, ..., d_query]` with `attention_axes`).
        value: `[B, S, d_value]`.
        key: `[B, S, d_key]`; defaults to `value`.
        attention_mask: bool `[B, T, S]` or `[B, heads, T, S]`, True = may
            attend.
        use_causal_mask: whether query `i` may only attend keys `j <= i`.
        return_attention_scores: also return the weights `[B, heads, T, S]`.
        training: whether dropout is active.

    Example:

    >>> import keras
    >>> from keras_transformer.layers import MultiHeadAttention
    >>> layer = MultiHeadAttention(num_heads=2, key_dim=4, name="mha")
    >>> x = keras.random.normal((3, 5, 8))
    >>> output, scores = layer(x, x, return_attention_scores=True)
    >>> tuple(output.shape), tuple(scores.shape)
    ((3, 5, 8), (3, 2, 5, 5))
    >>> [variable.path for variable in layer.weights][:2]
    ['mha/query/kernel', 'mha/query/bias']

    References:
        Vaswani et al., "Attention Is All You Need", 2017.
        Qiu et al., "Gated Attention for Large Language Models", 2025.
    """

    # Where `attend` may take the fused op when `flash_attention` is None.
    # None: where the backend has a fused kernel (`_fused_kernel_expected`).
    # True: wherever the other conditions hold, on a CPU too (tests compare
    # the two paths with it). False: never.
    _fused_attention = None

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_shape=None,
        attention_axes=None,
        sliding_window=None,
        flash_attention=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        use_gate=False,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        _check_positive_int("num_heads", num_heads)
        _check_positive_int("key_dim", key_dim)
        if value_dim is not None:
            _check_positive_int("value_dim", value_dim)
        if sliding_window is not None:
            _check_positive_int("sliding_window", sliding_window)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1), got {dropout!r}.")
        if flash_attention and dropout > 0:
            raise ValueError(
                "Dropout is not supported when flash attention is enabled "
                f"(`flash_attention=True`, `dropout={dropout!r}`): set one of them off."
            )
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim or key_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.use_gate = use_gate
        self._output_shape = _output_shape_tuple(output_shape)
        self.attention_axes = _attention_axes_tuple(attention_axes)
        self._sliding_window = sliding_window
        self._flash_attention = flash_attention
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self._projection_activity_regularizer = keras.regularizers.get(activity_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.seed = seed
        self.supports_masking = True
        self._dropout_layer = keras.layers.Dropout(dropout, seed=seed, dtype=self.dtype_policy)

    @property
    def sliding_window(self):
        return self._sliding_window

    @property
    def query_dense(self):
        return self._query_dense

    @property
    def key_dense(self):
        return self._key_dense

    @property
    def value_dense(self):
        return self._value_dense

    @property
    def output_dense(self):
        return self._output_dense

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        _check_key_and_value(key_shape, value_shape)
        for name, shape in (("query", query_shape), ("value", value_shape), ("key", key_shape)):
            if len(shape) < 3 or shape[-1] is None:
                raise ValueError(
                    f"`{name}` must have shape [batch, length, features] (or more length axes) "
                    f"with known features, got {tuple(shape)}."
                )
        self._attended_axes(len(query_shape))  # checks `attention_axes` against the rank
        output_shape = self._output_shape or (query_shape[-1],)
        heads = self.num_heads
        # Created in Keras' order, so that `get_weights()` lists them in Keras' order.
        self._query_dense = self._projection("query", query_shape[-1], (heads, self.key_dim))
        self._key_dense = self._projection("key", key_shape[-1], (heads, self.key_dim))
        if self.use_gate:
            self._gate_dense = self._projection(
                "gate", query_shape[-1], (heads, self.value_dim), activation="sigmoid"
            )
        self._value_dense = self._projection("value", value_shape[-1], (heads, self.value_dim))
        self._output_dense = self._projection(
            "attention_output", (heads, self.value_dim), output_shape
        )
        self._dropout_layer.build(None)

    def _projection(self, name, input_dims, output_dims, activation=None):
        """A built `EinsumDense` from `[B, L, *input_dims]` to `[B, L, *output_dims]`,
        with Keras' equation, name and initializer copies."""
        if isinstance(input_dims, int):
            input_dims = (input_dims,)
        letters = "cdefgh"
        inputs = letters[: len(input_dims)]
        outputs = letters[len(input_dims) : len(input_dims) + len(output_dims)]
        dense = keras.layers.EinsumDense(
            f"ab{inputs},{inputs}{outputs}->ab{outputs}",
            output_shape=(None, *output_dims),
            bias_axes=outputs if self.use_bias else None,
            activation=activation,
            kernel_initializer=clone_initializer(self.kernel_initializer, f"{name}_kernel"),
            bias_initializer=clone_initializer(self.bias_initializer, f"{name}_bias"),
            kernel_regularizer=self.kernel_regularizer,
            bias_regularizer=self.bias_regularizer,
            activity_regularizer=self._projection_activity_regularizer,
            kernel_constraint=self.kernel_constraint,
            bias_constraint=self.bias_constraint,
            dtype=self.dtype_policy,
            name=name,
        )
        # The layer merges the masks itself; a quantized projection is called
        # as a layer, which would otherwise warn that it drops the mask.
        dense.supports_masking = True
        dense.build((None, None, *input_dims))
        return dense

    def _attended_axes(self, rank):
        """`attention_axes` for an input of `rank`, non-negative; all the middle axes by default."""
        if self.attention_axes is None:
            return tuple(range(1, rank - 1))
        axes = tuple(axis if axis >= 0 else rank + axis for axis in self.attention_axes)
        if any(not 1 <= axis <= rank - 2 for axis in axes) or len(set(axes)) != len(axes):
            raise ValueError(
                f"`attention_axes` {self.attention_axes} must name distinct axes between the batch "
                f"and the features of a rank-{rank} input."
            )
        return axes

    # Projections. Heads go before length ([B, heads, length, dim]) so that
    # attention is a batched matmul over the two trailing axes.

    def _dense(self, name):
        return {
            "query": self._query_dense,
            "key": self._key_dense,
            "value": self._value_dense,
            "output": self._output_dense,
        }[name]

    def projection_matrix(self, name):
        """`(kernel, bias)` of the `"query"`, `"key"`, `"value"` or `"output"`
        projection as one matmul takes them: kernel `[in, out]`, bias `[out]`
        (None without biases), in the layer's compute dtype. With LoRA
        enabled on the sublayer, the kernel includes the adapters."""
        dense = self._dense(name)
        if dense.quantization_mode is not None:
            raise ValueError(
                f"The {name} projection is quantized ({dense.quantization_mode!r}); its kernel is "
                "not a float matrix. Call the layer, or the block, instead."
            )
        kernel, bias = dense.kernel, dense.bias
        # Output kernel [heads, dim, *out], the others [in, heads, dim].
        inputs = math.prod(kernel.shape[: 2 if name == "output" else 1])
        kernel = ops.cast(ops.reshape(kernel, (inputs, -1)), self.compute_dtype)
        if bias is not None:
            bias = ops.cast(ops.reshape(bias, (-1,)), self.compute_dtype)
        return kernel, bias

    def _as_matmul(self, dense):
        """Whether `dense` may run as one 2-D matmul of its kernel: not
        quantized, no activation or activity regularizer of its own."""
        return (
            dense.quantization_mode is None
            and dense.activity_regularizer is None
            and dense.activation is keras.activations.linear
        )

    def _project_heads(self, inputs, name, dim):
        # One 2-D matmul [B*T, d] x [d, heads*dim], the bias on the trailing
        # axis, then a transpose to [B, heads, T, dim]. As one einsum
        # "btd,dnh->bnth" it costs more forward+backward on the TensorFlow
        # backend (benchmarks/BENCHMARKS.md); and a rank-3 `ops.matmul` becomes a `tensordot`
        # there, whose dynamic-shape bookkeeping is many small ops.
        dense = self._dense(name)
        if not self._as_matmul(dense):
            return ops.transpose(dense(inputs), (0, 2, 1, 3))
        kernel, bias = self.projection_matrix(name)
        shape = ops.shape(inputs)
        projected = ops.matmul(ops.reshape(inputs, (-1, kernel.shape[0])), kernel)
        if bias is not None:
            projected = projected + bias
        projected = ops.reshape(projected, (shape[0], shape[1], self.num_heads, dim))
        return ops.transpose(projected, (0, 2, 1, 3))

    def project_query(self, query):
        """`[B, T, d]` -> `[B, heads, T, key_dim]`."""
        return self._project_heads(query, "query", self.key_dim)

    def project_key(self, key):
        """`[B, S, d]` -> `[B, heads, S, key_dim]`."""
        return self._project_heads(key, "key", self.key_dim)

    def project_value(self, value):
        """`[B, S, d]` -> `[B, heads, S, value_dim]`."""
        return self._project_heads(value, "value", self.value_dim)

    def project_output(self, attended):
        """`[B, heads, T, value_dim]` -> `[B, T, *output_shape]`."""
        attended = ops.transpose(attended, (0, 2, 1, 3))  # [B, T, heads, dim]
        if not self._as_matmul(self._output_dense):
            return self._output_dense(attended)
        output_dims = self._output_dense.kernel.shape[2:]
        shape = ops.shape(attended)
        attended = ops.reshape(attended, (-1, self.num_heads * self.value_dim))
        kernel, bias = self.projection_matrix("output")
        output = ops.matmul(attended, kernel)
        if bias is not None:
            output = output + bias
        return ops.reshape(output, (shape[0], shape[1], *output_dims))

    def project_gate(self, query):
        """`[B, T, d]` -> the sigmoid gate `[B, heads, T, value_dim]` (with `use_gate`)."""
        return ops.transpose(self._gate_dense(query), (0, 2, 1, 3))

    # Attention over projected heads.

    def compute_attention_logits(self, query_heads, key_heads):
        """Unnormalized scores `[B, heads, T, S]` of query heads
        `[B, heads, T, key_dim]` against key heads `[B, heads, S, key_dim]`;
        override for other scorings. `query_heads @ key_heads^T / sqrt(key_dim)`.

        Key heads may come from a decoding cache whose slots past the decoded
        positions hold zeros (masked out afterwards): a scoring must give
        them finite logits.
        """
        return scaled_dot_product_logits(query_heads, key_heads)

    def compute_attention_weights(self, logits, attention_bias=None):
        """Logits `[B, heads, T, S]` -> weights, a float32 softmax over the last
        axis of `logits + attention_bias`, cast to the compute dtype.

        `attention_bias` (float32, broadcastable to the logits, or None) is the
        first item of `prepare_attention_mask`'s pair: 0 where a query may
        attend a key, `MASKED_LOGIT` where not. A masked logit is replaced by
        `MASKED_LOGIT`, so what a scoring hook returned there (NaN, inf) is
        gone; the default scoring's logits are finite, and adding the bias
        (cheaper: no select on `[B, heads, T, S]`) gives the same weights.
        """
        logits = ops.cast(logits, "float32")
        if attention_bias is not None and not _keeps_default_logits(type(self)):
            logits = ops.where(ops.less(attention_bias, 0.0), MASKED_LOGIT, logits)
            attention_bias = None
        return ops.cast(softmax_with_bias(logits, attention_bias), self.compute_dtype)

    def prepare_attention_mask(self, attention_mask=None, query_mask=None):
        """Masks -> the `(bias, rows)` pair `compute_attention` applies.

        Args:
            attention_mask: bool broadcastable to `[B, T, S]`, or per head
                `[B, heads, T, S]`, True = may attend, or None.
            query_mask: bool `[B, T]`, True at real queries, or None.

        Returns:
            `bias`: float32 `[B, 1, T, S]` (or what the mask broadcasts to),
            added to the logits, or None; `rows`: compute-dtype `[B, 1, T, 1]`
            (or broadcastable), 0 for a query row that attends nowhere (a
            padded query, or one the mask allows no key), multiplying the
            outputs; None when every row attends somewhere.

        A decoding loop computes this once, outside the loop, and passes it to
        `compute_attention` as `prepared_mask`.
        """
        bias = rows = None
        if attention_mask is not None:
            if len(attention_mask.shape) < 4:
                attention_mask = ops.expand_dims(attention_mask, 1)  # broadcast over heads
            bias = attention_bias(attention_mask)
            rows = attending_rows(attention_mask)
        if query_mask is not None:
            # Apart from `attention_mask` (rather than merged into it), a
            # padding mask stays a [B, 1, 1, S] bias, not a [B, 1, T, S] one.
            real_queries = ops.expand_dims(ops.expand_dims(ops.cast(query_mask, "bool"), 1), -1)
            rows = real_queries if rows is None else ops.logical_and(rows, real_queries)
        if rows is not None:
            rows = ops.cast(rows, self.compute_dtype)
        return bias, rows

    def compute_attention(
        self,
        query_heads,
        key_heads,
        value_heads,
        attention_mask=None,
        training=None,
        query_mask=None,
        prepared_mask=None,
    ):
        """Attends projected heads: `compute_attention_logits`, then
        `compute_attention_weights`, dropout, and the weighted sum of values.

        The explicit path, with the weights; callers go through `attend`,
        which calls this unless the fused op computes the same thing.

        Args:
            query_heads: `[B, heads, T, key_dim]`.
            key_heads: `[B, heads, S, key_dim]`.
            value_heads: `[B, heads, S, value_dim]`.
            attention_mask: bool broadcastable to `[B, T, S]`, True = may attend.
            training: whether attention dropout is active.
            query_mask: bool `[B, T]`, True at real queries, or None. A query
                row that is False here, or that `attention_mask` lets attend
                nowhere, gets zero weights and a zero output.
            prepared_mask: instead of `attention_mask` and `query_mask`, the
                `(bias, rows)` pair of `prepare_attention_mask` (either may be
                None), for a caller that computes it once and attends many
                times.

        Returns:
            `(attended [B, heads, T, value_dim], weights [B, heads, T, S])`.
        """
        bias, rows = self._resolve_mask(attention_mask, query_mask, prepared_mask)
        logits = self.compute_attention_logits(query_heads, key_heads)
        weights = self.compute_attention_weights(logits, bias)
        # Dropout is the identity unless training: calling it anyway would put
        # a layer call into every decoding step.
        dropped = (
            self._dropout_layer(weights, training=True)
            if self.dropout > 0 and training
            else weights
        )
        attended = ops.matmul(dropped, value_heads)
        if rows is None:
            return attended, weights
        # Rows that may attend nowhere came out of the softmax uniform: zero
        # them on the output, [B, heads, T, value_dim], rather than on the
        # weights, [B, heads, T, S], in the forward and the backward pass. The
        # zeroed weights are computed only if the caller uses them (graph
        # execution drops unused results).
        return attended * rows, weights * rows

    def attend(
        self,
        query_heads,
        key_heads,
        value_heads,
        attention_mask=None,
        training=None,
        query_mask=None,
        prepared_mask=None,
        return_attention_scores=False,
    ):
        """Attends projected heads, fused where allowed, else through `compute_attention`.

        Every path of the layer and of the blocks calls this. It takes
        `compute_attention`'s arguments, plus whether the caller needs the
        weights. The fused path (`keras.ops.dot_product_attention`) is taken
        on JAX with a GPU or TPU when no weights are asked for, dropout is
        inactive, the value heads have the key heads' size, and the class
        keeps the default `compute_attention_logits`,
        `compute_attention_weights` and `compute_attention`; otherwise
        `compute_attention` runs, as a subclass defines it.

        Returns:
            `(attended [B, heads, T, value_dim], weights)`: weights
            `[B, heads, T, S]` as `compute_attention` gives them, or None when
            the fused path computed none (only if `return_attention_scores`
            is False).
        """
        if not self._can_fuse(training, return_attention_scores):
            return self.compute_attention(
                query_heads,
                key_heads,
                value_heads,
                attention_mask=attention_mask,
                training=training,
                query_mask=query_mask,
                prepared_mask=prepared_mask,
            )
        bias, rows = self._resolve_mask(attention_mask, query_mask, prepared_mask)
        attended = self._attend_fused(query_heads, key_heads, value_heads, bias)
        if rows is not None:
            attended = attended * rows
        return attended, None

    def _can_fuse(self, training, return_attention_scores):
        """Whether `attend` may skip the explicit weights (see its docstring).

        Equal head sizes because JAX's fused op requires them.
        """
        wanted = self._flash_attention
        if wanted is None:
            wanted = self._fused_attention
        if wanted is None:
            wanted = (
                _fused_kernel_expected() and keras.config.is_flash_attention_enabled() is not False
            )
        return (
            wanted
            and not return_attention_scores
            and not (self.dropout > 0 and training)
            and self.value_dim == self.key_dim
            and _keeps_default_scoring(type(self))
        )

    def _resolve_mask(self, attention_mask, query_mask, prepared_mask):
        """The `(bias, rows)` pair from either form of the masks, as
        `compute_attention` takes them."""
        if prepared_mask is None:
            return self.prepare_attention_mask(attention_mask, query_mask)
        if attention_mask is not None or query_mask is not None:
            raise ValueError(
                "Pass either `prepared_mask` or `attention_mask` / `query_mask`, not both."
            )
        return prepared_mask

    def _attend_fused(self, query_heads, key_heads, value_heads, bias):
        """`keras.ops.dot_product_attention` on heads `[B, heads, length, dim]`.

        The op takes `[B, length, heads, dim]` and casts `bias` to the compute
        dtype: in float16 `MASKED_LOGIT` would become -inf, and a row of -inf
        logits a NaN, so the bias is first clipped to what float16 holds. The
        op's logits and softmax are float32, as in `compute_attention_weights`.
        """
        if bias is not None:
            floor = masked_value(self.compute_dtype)
            if floor != MASKED_LOGIT:
                bias = ops.maximum(bias, floor)
            # [B, T, S] or fewer axes -> [B, heads or 1, T, S], the rank the op requires.
            for _ in range(4 - len(bias.shape)):
                bias = ops.expand_dims(bias, 0)
            # A padding bias is [B, 1, 1, S]; cuDNN's fused kernel takes a bias
            # only with the query's length on its T axis (JAX falls back to
            # XLA otherwise).
            bias_shape = ops.shape(bias)
            bias = ops.broadcast_to(
                bias, (bias_shape[0], bias_shape[1], ops.shape(query_heads)[2], bias_shape[3])
            )
        attended = ops.dot_product_attention(
            _swap_heads_and_length(query_heads),
            _swap_heads_and_length(key_heads),
            _swap_heads_and_length(value_heads),
            bias=bias,
            scale=1.0 / math.sqrt(query_heads.shape[-1]),
        )
        return _swap_heads_and_length(attended)

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        use_causal_mask=False,
    ):
        """Keras' override point, in Keras' layout: projected query
        `[B, T, heads, key_dim]`, key `[B, S, heads, key_dim]`, value
        `[B, S, heads, value_dim]`, a bool `attention_mask` broadcastable to
        `[B, T, S]` (or `[B, heads, T, S]`), and the causal mask on top when
        `use_causal_mask`. Returns `(output [B, T, heads, value_dim], scores
        [B, heads, T, S] or None)`.

        `call` calls it only for a subclass that overrides it (written for
        Keras' layer), with every mask merged into `attention_mask`;
        otherwise `call` attends through `attend` directly.
        """
        if use_causal_mask:
            attention_mask = merge_masks(
                ops.shape(query)[1],
                ops.shape(key)[1],
                attention_mask=attention_mask,
                use_causal_mask=True,
            )
        attended, weights = self.attend(
            _swap_heads_and_length(query),
            _swap_heads_and_length(key),
            _swap_heads_and_length(value),
            attention_mask=attention_mask,
            training=training,
            return_attention_scores=return_attention_scores,
        )
        return _swap_heads_and_length(attended), weights

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
    ):
        if key is None:
            key = value
            key_mask = None
        _check_key_and_value(key.shape, value.shape)
        if self._flash_attention and return_attention_scores:
            raise ValueError(
                "Returning attention scores is not supported when flash attention is enabled. "
                "Please disable flash attention to access attention scores "
                "(`flash_attention=None` or False)."
            )
        rank = len(query.shape)
        if rank != len(value.shape):
            raise ValueError(
                f"`query` and `value` must have the same rank, got shapes {tuple(query.shape)} "
                f"and {tuple(value.shape)}."
            )
        masks = (query_mask, value_mask, key_mask, attention_mask)
        if rank != 3 or self._attended_axes(rank) != (1,):
            return self._call_over_axes(
                query, value, key, masks, use_causal_mask, return_attention_scores, training
            )
        return self._call_on_sequences(
            query, value, key, masks, use_causal_mask, return_attention_scores, training
        )

    def _call_on_sequences(
        self, query, value, key, masks, use_causal_mask, return_attention_scores, training
    ):
        """`call` on `[B, T, d]` inputs."""
        query_mask, value_mask, key_mask, attention_mask = masks
        if key_mask is not None:
            value_mask = key_mask if value_mask is None else ops.logical_and(value_mask, key_mask)
        keras_hook = not _keeps_keras_hook(type(self))
        # The query mask stays apart (see `compute_attention`), except for a
        # Keras-style hook, which takes one mask.
        mask = merge_masks(
            ops.shape(query)[1],
            ops.shape(value)[1],
            query_mask=query_mask if keras_hook else None,
            key_mask=value_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
            sliding_window=self._sliding_window,
        )
        query_heads = self.project_query(query)
        key_heads = self.project_key(key)
        value_heads = self.project_value(value)
        if keras_hook:
            attended, weights = self._compute_attention(
                _swap_heads_and_length(query_heads),
                _swap_heads_and_length(key_heads),
                _swap_heads_and_length(value_heads),
                mask,
                training,
                return_attention_scores,
            )
            attended = _swap_heads_and_length(attended)
        else:
            attended, weights = self.attend(
                query_heads,
                key_heads,
                value_heads,
                attention_mask=mask,
                training=training,
                query_mask=query_mask,
                return_attention_scores=return_attention_scores,
            )
        if self.use_gate:
            attended = attended * self.project_gate(query)
        output = self.project_output(attended)
        if return_attention_scores:
            return output, weights
        return output

    def _call_over_axes(
        self, query, value, key, masks, use_causal_mask, return_attention_scores, training
    ):
        """`call` on inputs of rank above 3 or with `attention_axes`: the axes
        attended are flattened into one length and the others into the
        batch, the sequences attended as `[B', T, d]`, and the results put
        back in the inputs' layout (scores `[B, <other axes>, heads,
        <query axes>, <key axes>]`, as Keras')."""
        rank = len(query.shape)
        axes = self._attended_axes(rank)
        others = tuple(axis for axis in range(1, rank - 1) if axis not in axes)
        for name, tensor in (("query", query), ("value", value), ("key", key)):
            if any(tensor.shape[axis] is None for axis in range(1, rank)):
                raise ValueError(
                    f"`{name}` needs known sizes on every axis but the batch with "
                    f"`attention_axes`, got shape {tuple(tensor.shape)}."
                )
        if any(query.shape[axis] != value.shape[axis] for axis in others):
            raise ValueError(
                f"`query` {tuple(query.shape)} and `value` {tuple(value.shape)} must have the "
                f"same sizes on the axes not attended, {others}."
            )
        order = (0, *others, *axes)
        other_dims = [query.shape[axis] for axis in others]
        query_dims = [query.shape[axis] for axis in axes]
        key_dims = [value.shape[axis] for axis in axes]
        query_mask, value_mask, key_mask, attention_mask = masks

        def sequences(tensor, trailing=1):
            tensor = ops.transpose(tensor, (*order, *range(rank - 1, rank - 1 + trailing)))
            return ops.reshape(
                tensor,
                (
                    -1,
                    math.prod(tensor.shape[len(others) + 1 : len(order)]),
                    *tensor.shape[len(order) :],
                ),
            )

        def mask_sequences(mask):
            return None if mask is None else sequences(mask, trailing=0)

        if attention_mask is not None:
            attention_mask = ops.cast(attention_mask, "bool")
            full = (ops.shape(query)[0], *other_dims, *query_dims, *key_dims)
            missing = len(full) - len(attention_mask.shape)
            attention_mask = ops.broadcast_to(
                ops.reshape(attention_mask, (1,) * missing + tuple(ops.shape(attention_mask))), full
            )
            attention_mask = ops.reshape(
                attention_mask, (-1, math.prod(query_dims), math.prod(key_dims))
            )
        outputs = self._call_on_sequences(
            sequences(query),
            sequences(value),
            sequences(key),
            (
                mask_sequences(query_mask),
                mask_sequences(value_mask),
                mask_sequences(key_mask),
                attention_mask,
            ),
            use_causal_mask,
            return_attention_scores,
            training,
        )
        output, weights = outputs if return_attention_scores else (outputs, None)
        output_dims = output.shape[2:]
        output = ops.reshape(output, (-1, *other_dims, *query_dims, *output_dims))
        back = [order.index(axis) for axis in range(rank - 1)]
        output = ops.transpose(output, (*back, *range(rank - 1, rank - 1 + len(output_dims))))
        if not return_attention_scores:
            return output
        weights = ops.reshape(weights, (-1, *other_dims, self.num_heads, *query_dims, *key_dims))
        return output, weights

    def compute_output_shape(
        self, query_shape, value_shape, key_shape=None, return_attention_scores=False
    ):
        """`[B, T, *output_shape]` (by default the query's shape); with
        `return_attention_scores`, also the weights' `[B, heads, T, S]`."""
        query_shape, value_shape = tuple(query_shape), tuple(value_shape)
        key_shape = value_shape if key_shape is None else tuple(key_shape)
        _check_key_and_value(key_shape, value_shape)
        output_shape = (*query_shape[:-1], *(self._output_shape or query_shape[-1:]))
        if not return_attention_scores:
            return output_shape
        axes = self._attended_axes(len(query_shape))
        others = [query_shape[axis] for axis in range(1, len(query_shape) - 1) if axis not in axes]
        scores_shape = (
            query_shape[0],
            *others,
            self.num_heads,
            *(query_shape[axis] for axis in axes),
            *(value_shape[axis] for axis in axes),
        )
        return output_shape, scores_shape

    def compute_output_spec(self, *args, **kwargs):
        # Symbolic calls trace `call`, which knows every output it may return
        # (scores too); Keras would otherwise build them from
        # `compute_output_shape`, which it calls with shapes only.
        return keras.Operation.compute_output_spec(self, *args, **kwargs)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "use_gate": self.use_gate,
                "output_shape": self._output_shape,
                "attention_axes": self.attention_axes,
                "sliding_window": self._sliding_window,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
                "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
                "activity_regularizer": keras.regularizers.serialize(
                    self._projection_activity_regularizer
                ),
                "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
                "bias_constraint": keras.constraints.serialize(self.bias_constraint),
                "seed": self.seed,
            }
        )
        return config


def _check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"Invalid argument `{name}`: expected a positive integer, got {value!r}.")


def _output_shape_tuple(output_shape):
    """`output_shape` as a tuple of positive ints, or None."""
    if output_shape is None or output_shape == ():
        return None
    dims = (output_shape,) if isinstance(output_shape, int) else output_shape
    if not isinstance(dims, (tuple, list)) or not all(
        isinstance(dim, int) and not isinstance(dim, bool) and dim > 0 for dim in dims
    ):
        raise ValueError(
            f"Invalid `output_shape`: {output_shape!r}; give a positive int, or a tuple or list "
            "of them."
        )
    return tuple(dims)


def _attention_axes_tuple(attention_axes):
    """`attention_axes` as a tuple of ints, or None."""
    if attention_axes is None:
        return None
    axes = (attention_axes,) if isinstance(attention_axes, int) else attention_axes
    if not isinstance(axes, (tuple, list)) or not all(
        isinstance(axis, int) and not isinstance(axis, bool) for axis in axes
    ):
        raise ValueError(
            f"`attention_axes` must be an int, or a tuple or list of ints, got {attention_axes!r}."
        )
    return tuple(axes)


def _check_key_and_value(key_shape, value_shape):
    """Key and value must agree on every axis but the features (where both are known)."""
    key_dims, value_dims = tuple(key_shape)[1:-1], tuple(value_shape)[1:-1]
    if len(key_dims) != len(value_dims) or any(
        k is not None and v is not None and k != v for k, v in zip(key_dims, value_dims)
    ):
        raise ValueError(
            "All dimensions of `value` and `key`, except the batch and the last one, must be "
            f"equal, got value shape {tuple(value_shape)} and key shape {tuple(key_shape)}."
        )


def _swap_heads_and_length(tensor):
    """`[B, heads, length, dim]` <-> `[B, length, heads, dim]`."""
    return ops.transpose(tensor, (0, 2, 1, 3))


def _fused_kernel_expected():
    """Whether `keras.ops.dot_product_attention` can beat the explicit path
    here: on JAX with a GPU or TPU (cuDNN's or Pallas' fused kernels). On a
    CPU, both backends' op is the explicit arithmetic in another layout and
    measured slower, on TensorFlow most (its einsums transpose the whole
    decoding cache at every step)."""
    if keras.backend.backend() != "jax":
        return False
    import jax

    return jax.default_backend() != "cpu"


# The hooks whose default arithmetic is what the fused op computes.
_SCORING_HOOKS = ("compute_attention_logits", "compute_attention_weights", "compute_attention")


def _keeps_default_logits(attention_class):
    """Whether `attention_class` keeps the default `compute_attention_logits`."""
    return attention_class.compute_attention_logits is MultiHeadAttention.compute_attention_logits


def _keeps_keras_hook(attention_class):
    """Whether `attention_class` keeps this layer's `_compute_attention` (Keras' override point)."""
    return attention_class._compute_attention is MultiHeadAttention._compute_attention


def _keeps_default_scoring(attention_class):
    """Whether `attention_class` overrides none of `_SCORING_HOOKS`."""
    return all(
        getattr(attention_class, name) is getattr(MultiHeadAttention, name)
        for name in _SCORING_HOOKS
    )


def get_attention_class(identifier):
    """`MultiHeadAttention` or a subclass, given as the class or by the name
    `serialize_attention_class` saved (its registered Keras name)."""
    if isinstance(identifier, str):
        attention_class = keras.saving.get_registered_object(identifier)
        if attention_class is None:
            raise ValueError(
                f"Unknown `attention_class` {identifier!r}: register the class with "
                "`keras.saving.register_keras_serializable` and import it before loading."
            )
    else:
        attention_class = identifier
    if not (isinstance(attention_class, type) and issubclass(attention_class, MultiHeadAttention)):
        raise TypeError(
            "`attention_class` must be `MultiHeadAttention` or a subclass of it, "
            f"got {attention_class!r}."
        )
    return attention_class


def serialize_attention_class(attention_class):
    """The registered name that `get_attention_class` resolves back to `attention_class`."""
    name = keras.saving.get_registered_name(attention_class)
    if keras.saving.get_registered_object(name) is not attention_class:
        raise ValueError(
            f"`attention_class` {attention_class.__name__} is not registered, so a saved "
            "model could not find it again: decorate it with "
            "`@keras.saving.register_keras_serializable(package=...)`."
        )
    return name
