"""Padding of encoded batches: NumPy for training batches, TensorFlow for the exports."""


def trim_shared_padding(token_ids, min_length=1):
    """Drops the trailing padding columns (id 0) every row of the batch has.

    Texts are encoded to a fixed length once; short ones (a verse, a review)
    would otherwise pay for every padded position in attention. The models are
    exact on any length up to their `sequence_length`. TensorFlow ops, for the
    exports' traced functions; `trim_shared_padding_array` is the NumPy twin.
    """
    import tensorflow as tf

    longest = tf.reduce_max(tf.reduce_sum(tf.cast(token_ids != 0, tf.int32), axis=1))
    return token_ids[:, : tf.maximum(longest, min_length)]


def trim_shared_padding_array(token_ids, min_length=1, round_up=None):
    """`trim_shared_padding` of a NumPy `[B, L]` id array (training batches, on any backend).

    With `round_up` (a function of the longest row's length), the width kept
    is `round_up(longest)`, at most `L`: a backend that compiles a step for
    every new shape (JAX) then compiles a few widths, not every one.
    """
    longest = max(int((token_ids != 0).sum(axis=1).max(initial=0)), min_length)
    width = round_up(longest) if round_up is not None else longest
    return token_ids[:, : min(width, token_ids.shape[1])]
