"""Length buckets for the training pipelines."""

import tensorflow as tf


def length_bucketed_batches(dataset, batch_size, sequence_length, bucket_width=8):
    """Batches of fixed-length, 0-padded id rows grouped by their real length.

    `dataset` yields tuples of `[L]` id rows (padded to a fixed length). Rows
    whose longest member falls in the same `bucket_width`-token band are
    batched together, so after `trim_shared_padding` a batch of short
    sentences no longer pays for the one long sentence a random batch would
    have had. Shuffle `dataset` first: buckets fill in the order rows arrive.
    """
    boundaries = list(range(bucket_width + 1, sequence_length + 1, bucket_width))

    def longest_row(*rows):
        return tf.reduce_max([tf.math.count_nonzero(row, dtype=tf.int32) for row in rows])

    return dataset.bucket_by_sequence_length(
        longest_row,
        bucket_boundaries=boundaries,
        bucket_batch_sizes=[batch_size] * (len(boundaries) + 1),
    )
