"""Attention masks. A boolean mask means True = may attend / is a real token.

Every layer of the project builds its attention mask through `merge_masks`, so
the rules for combining padding, causal and explicit masks live in one place.
"""

import keras
import numpy as np
from keras import ops

# What a position nobody may attend gets in place of its logit (an additive
# bias, not -inf: a row with every position masked stays finite, and
# exp(MASKED_LOGIT - max) is exactly 0 in float32). Logits are float32 where
# it is added; `masked_value` gives what fits a narrower dtype.
MASKED_LOGIT = -1e9


def masked_value(dtype):
    """`MASKED_LOGIT` as a Python float that `dtype` can hold: float16 tops
    out at 65504, where -1e9 would become -inf (and -inf - -inf, NaN)."""
    if keras.backend.standardize_dtype(dtype) == "float16":
        return float(np.finfo(np.float16).min)
    return MASKED_LOGIT


def attention_bias(mask):
    """Bool mask (True = may attend) -> float32 additive bias for logits:
    0 where allowed, `MASKED_LOGIT` where not."""
    return ops.where(ops.cast(mask, "bool"), 0.0, MASKED_LOGIT)


def padding_mask(token_ids, padding_id=0):
    """`[B, T]` token ids -> `[B, T]` bool, True where the token is real."""
    return ops.not_equal(token_ids, padding_id)


def causal_mask(query_length, key_length=None, offset=0):
    """`[T, S]` bool lower-triangular mask.

    Query `i` sits at absolute position `i + offset` (the offset is the number
    of tokens already in a decoding cache) and may attend key `j` iff
    `j <= i + offset`.
    """
    key_length = query_length if key_length is None else key_length
    key_positions = ops.arange(key_length, dtype="int32")
    if isinstance(query_length, int) and query_length == 1:
        # A decoding step's one query: half the ops, which an eager backend
        # runs one by one at every step.
        return ops.expand_dims(ops.less_equal(key_positions, ops.cast(offset, "int32")), 0)
    query_positions = ops.expand_dims(ops.arange(query_length, dtype="int32"), -1)
    key_positions = ops.expand_dims(key_positions, 0)
    return ops.greater_equal(query_positions + ops.cast(offset, "int32"), key_positions)


def sliding_window_mask(query_length, key_length, window, offset=0):
    """`[T, S]` bool band: query `i` (at absolute position `i + offset`) may
    attend key `j` iff `|i + offset - j| < window`."""
    query_positions = ops.expand_dims(ops.arange(query_length, dtype="int32"), -1)
    key_positions = ops.expand_dims(ops.arange(key_length, dtype="int32"), 0)
    distance = ops.abs(query_positions + ops.cast(offset, "int32") - key_positions)
    return ops.less(distance, window)


def merge_masks(
    query_length,
    key_length,
    query_mask=None,
    key_mask=None,
    attention_mask=None,
    use_causal_mask=False,
    causal_offset=0,
    sliding_window=None,
):
    """Combines every kind of mask into one bool mask broadcastable to `[B, T, S]`.

    Args:
        query_length: T, the number of query positions.
        key_length: S, the number of key positions.
        query_mask: `[B, T]`, True at real query tokens. A padded query row
            attends nowhere (its attention weights are all zero).
        key_mask: `[B, S]`, True at real key tokens.
        attention_mask: `[B, T, S]` (or broadcastable), or per head
            `[B, heads, T, S]`, True = may attend.
        use_causal_mask: add the causal mask, see `causal_mask`.
        causal_offset: absolute position of the first query, for decoding
            with a cache (of the sliding window's too).
        sliding_window: int or None, add `sliding_window_mask`.

    Returns:
        A bool tensor of rank 3 (rank 4 with a per-head `attention_mask`), or
        None when no mask applies.
    """
    merged = None

    def combine(mask):
        nonlocal merged
        mask = ops.cast(mask, "bool")
        merged = mask if merged is None else ops.logical_and(merged, mask)

    if query_mask is not None:
        combine(ops.expand_dims(query_mask, -1))
    if key_mask is not None:
        combine(ops.expand_dims(key_mask, -2))
    if use_causal_mask:
        combine(ops.expand_dims(causal_mask(query_length, key_length, causal_offset), 0))
    if sliding_window is not None:
        window = sliding_window_mask(query_length, key_length, sliding_window, causal_offset)
        combine(ops.expand_dims(window, 0))
    if attention_mask is not None:
        rank = len(attention_mask.shape)
        if rank == 2:
            attention_mask = ops.expand_dims(attention_mask, 0)
        elif rank == 4 and merged is not None:
            merged = ops.expand_dims(merged, 1)  # the same for every head
        combine(attention_mask)
    return merged
