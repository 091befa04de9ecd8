"""The translator's length-bucketed batches (`ArrayBatches`) keep every target with its own source.

Each source row carries its example's number, and its target is derived from
that number (a different length, a different token pattern), so any batch
that pairs a target with another row's source is seen, whichever bucket or
position it lands in.
"""

import numpy as np
import pytest

from keras_transformer.training.batching import ArrayBatches

WIDTH = 33  # the translator buckets rows of sequence_length + 1 tokens
NUM_PAIRS = 400
BATCH_SIZE = 16


def example_pairs(seed=0):
    """(sources, targets) `[NUM_PAIRS, WIDTH]`, 0-padded: source i is i + 1
    repeated; target i is `target_row(i + 1, its length)`, whose length is
    drawn independently of the source's, so the two often fall in different
    bands of 8 and the bucket is decided by the longer of the two."""
    rng = np.random.default_rng(seed)
    sources = np.zeros((NUM_PAIRS, WIDTH), np.int32)
    targets = np.zeros((NUM_PAIRS, WIDTH), np.int32)
    for index in range(NUM_PAIRS):
        sources[index, : rng.integers(1, WIDTH + 1)] = index + 1
        targets[index] = target_row(index + 1, rng.integers(1, WIDTH + 1))
    return sources, targets


def target_row(number, length):
    row = np.zeros(WIDTH, np.int32)
    row[:length] = 100_000 + 7 * number + np.arange(length) % 3
    return row


def source_number(source_row):
    values = set(source_row[source_row != 0].tolist())
    assert len(values) == 1, f"a source row mixes examples: {sorted(values)}"
    return values.pop()


def target_number(target_row_values):
    first = int(target_row_values[0])
    assert (first - 100_000) % 7 == 0, target_row_values
    return (first - 100_000) // 7


def check_pairs(batches, sources, targets, batch_size=BATCH_SIZE):
    """Every (source, target) row of every batch is one of the examples, whole; returns
    their numbers."""
    seen = []
    for source_batch, target_batch in batches:
        assert source_batch.shape[0] == target_batch.shape[0] <= batch_size
        for source, target in zip(source_batch, target_batch):
            number = source_number(source)
            assert target_number(target) == number, (number, target[:6])
            np.testing.assert_array_equal(source, sources[number - 1])
            np.testing.assert_array_equal(target, targets[number - 1])
            seen.append(number)
    return seen


def untrimmed(sources, targets):
    return sources, targets


def bucketed(sources, targets, batch_size=BATCH_SIZE, bucket_width=8, seed=3):
    """Whole rows (untrimmed), so a row is compared with its example as it was."""
    return ArrayBatches(
        (sources, targets), batch_size, make_batch=untrimmed, seed=seed, bucket_width=bucket_width
    )


def test_bucketed_batches_keep_each_target_with_its_source():
    sources, targets = example_pairs()
    batches = list(bucketed(sources, targets))
    # More than one bucket (so rows were regrouped), and every example comes out once.
    bands = {int((max((s != 0).sum(1).max(), (t != 0).sum(1).max()) - 1) // 8) for s, t in batches}
    assert len(bands) > 2, bands
    seen = check_pairs(batches, sources, targets)
    assert sorted(seen) == list(range(1, NUM_PAIRS + 1))


@pytest.mark.parametrize("batch_size, bucket_width", [(1, 8), (5, 4), (64, 33)])
def test_pairs_survive_other_bucket_shapes(batch_size, bucket_width):
    sources, targets = example_pairs(seed=batch_size)
    seen = check_pairs(
        bucketed(sources, targets, batch_size, bucket_width, seed=batch_size),
        sources,
        targets,
        batch_size,
    )
    assert sorted(seen) == list(range(1, NUM_PAIRS + 1))


def test_pairs_survive_the_translators_epochs():
    """As the translator's training feeds `fit`: reshuffled and rebucketed every epoch."""
    sources, targets = example_pairs(seed=5)
    batches = bucketed(sources, targets, seed=5)
    orders = []
    for epoch in range(3):
        batches.epoch = epoch
        seen = check_pairs(batches, sources, targets)
        assert sorted(seen) == list(range(1, NUM_PAIRS + 1))
        orders.append(seen)
    assert orders[0] != orders[1] != orders[2]
