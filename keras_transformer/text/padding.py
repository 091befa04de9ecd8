"""Padding of encoded batches, shared by training and the exports."""

import tensorflow as tf


def trim_shared_padding(token_ids, min_length=1):
    """Drops the trailing padding columns (id 0) every row of the batch has.

    Texts are encoded to a fixed length once; short ones (a verse, a review)
    would otherwise pay for every padded position in attention. The models are
    exact on any length up to their `sequence_length`.
    """
    longest = tf.reduce_max(tf.reduce_sum(tf.cast(token_ids != 0, tf.int32), axis=1))
    return token_ids[:, : tf.maximum(longest, min_length)]
