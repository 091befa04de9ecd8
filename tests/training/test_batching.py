"""Batch shaping: shared-padding trimming and length buckets."""

import numpy as np
import tensorflow as tf

from keras_transformer.training.batching import length_bucketed_batches
from keras_transformer.text.padding import trim_shared_padding


def padded_rows(lengths, width):
    rows = np.zeros((len(lengths), width), np.int32)
    for index, length in enumerate(lengths):
        rows[index, :length] = np.arange(1, length + 1) + 1000 * index
    return rows


def test_trim_shared_padding_keeps_the_longest_row():
    rows = padded_rows([3, 5, 1], 10)
    trimmed = trim_shared_padding(tf.constant(rows)).numpy()
    np.testing.assert_array_equal(trimmed, rows[:, :5])
    assert trim_shared_padding(tf.zeros([2, 6], tf.int32), min_length=2).shape == (2, 2)


def test_length_buckets_group_similar_lengths_and_keep_every_row():
    rng = np.random.default_rng(0)
    width = 40
    source_lengths = rng.integers(1, width, size=300)
    target_lengths = rng.integers(1, width, size=300)
    sources, targets = padded_rows(source_lengths, width), padded_rows(target_lengths, width)
    dataset = tf.data.Dataset.from_tensor_slices((sources, targets)).shuffle(300, seed=1)
    seen = []
    for source_batch, target_batch in length_bucketed_batches(dataset, 16, width, bucket_width=8):
        source_batch, target_batch = source_batch.numpy(), target_batch.numpy()
        assert len(source_batch) <= 16
        longest = np.maximum((source_batch != 0).sum(1), (target_batch != 0).sum(1))
        # One band of 8 lengths per batch: (0, 8], (8, 16], ...
        assert len(set((longest - 1) // 8)) == 1
        seen.extend(source_batch[:, 0].tolist())
    assert sorted(seen) == sorted(sources[:, 0].tolist())
