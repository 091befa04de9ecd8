"""Masks: True = may attend / is a real token. Expected values are numpy built here."""

import itertools

import numpy as np
import pytest
from keras import ops

from keras_transformer.layers import causal_mask, merge_masks, padding_mask


def np_causal(query_length, key_length, offset=0):
    # Query i (absolute position i + offset) may attend key j iff j <= i + offset.
    return np.tril(np.ones((query_length, key_length), dtype=bool), k=offset)


def as_numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor))


@pytest.mark.parametrize("length", [1, 2, 5, 8])
def test_causal_mask_square_is_lower_triangular(length):
    mask = as_numpy(causal_mask(length))
    assert mask.dtype == bool
    np.testing.assert_array_equal(mask, np_causal(length, length))
    # Spelled out for one case so the reference itself is checked.
    if length == 2:
        np.testing.assert_array_equal(mask, [[True, False], [True, True]])


@pytest.mark.parametrize(
    "query_length, key_length, offset",
    [
        (3, 5, 0),  # fewer queries than keys
        (5, 3, 0),  # more queries than keys
        (1, 6, 5),  # one decoding step at the end of a 6-slot cache
        (1, 6, 2),  # one decoding step in the middle of the cache: later slots masked
        (2, 7, 3),  # two tokens per decoding step
        (4, 4, 2),
    ],
)
def test_causal_mask_offset_and_rectangular(query_length, key_length, offset):
    mask = as_numpy(causal_mask(query_length, key_length, offset=offset))
    assert mask.shape == (query_length, key_length)
    np.testing.assert_array_equal(mask, np_causal(query_length, key_length, offset))


@pytest.mark.parametrize("query_length", [1, 2], ids=["one_query", "two_queries"])
def test_causal_mask_offset_as_tensor(query_length):
    # One query is what every decoding step asks for, with the index a tensor.
    offset = ops.convert_to_tensor(3, dtype="int32")
    mask = as_numpy(causal_mask(query_length, 6, offset=offset))
    np.testing.assert_array_equal(mask, np_causal(query_length, 6, 3))
    # Query 0 sits at absolute position 3: keys 0..3 allowed, 4..5 not.
    np.testing.assert_array_equal(mask[0], [True, True, True, True, False, False])


def test_padding_mask_marks_real_tokens():
    ids = np.array([[5, 3, 0, 0], [1, 0, 2, 0], [0, 0, 0, 0]], dtype="int32")
    mask = as_numpy(padding_mask(ops.convert_to_tensor(ids)))
    assert mask.dtype == bool
    np.testing.assert_array_equal(
        mask,
        [[True, True, False, False], [True, False, True, False], [False, False, False, False]],
    )


def test_padding_mask_custom_padding_id():
    ids = np.array([[4, -1, 0], [-1, -1, 7]], dtype="int32")
    mask = as_numpy(padding_mask(ops.convert_to_tensor(ids), padding_id=-1))
    np.testing.assert_array_equal(mask, ids != -1)


def test_merge_masks_nothing_is_none():
    assert merge_masks(3, 4) is None


# Fixed random masks for the combination test.
_B, _T, _S = 2, 4, 5
_rng = np.random.default_rng(0)
_QUERY = _rng.random((_B, _T)) > 0.3
_KEY = _rng.random((_B, _S)) > 0.3
_ATTENTION = _rng.random((_B, _T, _S)) > 0.2


@pytest.mark.parametrize(
    "use_query, use_key, use_attention, use_causal",
    [c for c in itertools.product([False, True], repeat=4) if any(c)],
)
@pytest.mark.parametrize("offset", [0, 1])
def test_merge_masks_combinations(use_query, use_key, use_attention, use_causal, offset):
    merged = merge_masks(
        _T,
        _S,
        query_mask=ops.convert_to_tensor(_QUERY) if use_query else None,
        key_mask=ops.convert_to_tensor(_KEY) if use_key else None,
        attention_mask=ops.convert_to_tensor(_ATTENTION) if use_attention else None,
        use_causal_mask=use_causal,
        causal_offset=offset,
    )
    merged = as_numpy(merged)
    assert merged.dtype == bool
    assert merged.ndim == 3

    expected = np.ones((_B, _T, _S), dtype=bool)
    for b, t, s in itertools.product(range(_B), range(_T), range(_S)):
        allowed = True
        if use_query:
            allowed &= bool(_QUERY[b, t])
        if use_key:
            allowed &= bool(_KEY[b, s])
        if use_attention:
            allowed &= bool(_ATTENTION[b, t, s])
        if use_causal:
            allowed &= s <= t + offset
        expected[b, t, s] = allowed
    np.testing.assert_array_equal(np.broadcast_to(merged, (_B, _T, _S)), expected)


def test_merge_masks_accepts_unbatched_attention_mask():
    attention = np.array([[True, False, True], [False, True, True]])
    key = np.array([[True, True, False], [True, True, True]])
    merged = as_numpy(
        merge_masks(
            2,
            3,
            key_mask=ops.convert_to_tensor(key),
            attention_mask=ops.convert_to_tensor(attention),
        )
    )
    assert merged.ndim == 3
    expected = attention[None, :, :] & key[:, None, :]
    np.testing.assert_array_equal(np.broadcast_to(merged, (2, 2, 3)), expected)


def test_merge_masks_accepts_integer_masks():
    # Masks given as 0/1 integers (e.g. from a data pipeline) mean the same as bools.
    query = np.array([[1, 1, 0]], dtype="int32")
    key = np.array([[1, 0, 1, 1]], dtype="int32")
    merged = as_numpy(
        merge_masks(
            3, 4, query_mask=ops.convert_to_tensor(query), key_mask=ops.convert_to_tensor(key)
        )
    )
    expected = query.astype(bool)[:, :, None] & key.astype(bool)[:, None, :]
    np.testing.assert_array_equal(np.broadcast_to(merged, (1, 3, 4)), expected)
