"""Batch shaping: shared-padding trimming and length buckets (`ArrayBatches`)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.text.padding import trim_shared_padding, trim_shared_padding_array
from keras_transformer.training.batching import (
    ArrayBatches,
    as_tf_dataset,
    octave_step_width,
    trim_id_rows,
)


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


def test_trim_shared_padding_array_is_the_tensorflow_trim():
    rng = np.random.default_rng(1)
    for lengths in ([3, 5, 1], [0, 0], [7, 7], list(rng.integers(0, 10, size=6))):
        rows = padded_rows(lengths, 10)
        for min_length in (1, 2):
            np.testing.assert_array_equal(
                trim_shared_padding_array(rows, min_length),
                trim_shared_padding(tf.constant(rows), min_length).numpy(),
            )


def test_length_buckets_group_similar_lengths_and_keep_every_row():
    rng = np.random.default_rng(0)
    width = 40
    source_lengths = rng.integers(1, width, size=300)
    target_lengths = rng.integers(1, width, size=300)
    sources, targets = padded_rows(source_lengths, width), padded_rows(target_lengths, width)
    batches = ArrayBatches((sources, targets), 16, seed=1, bucket_width=8)
    assert len(batches) == 19  # ceil(300 / 16): an epoch is as long as without buckets
    seen, mixed = [], 0
    for source_batch, target_batch in batches:
        assert len(source_batch) <= 16
        longest = np.maximum((source_batch != 0).sum(1), (target_batch != 0).sum(1))
        # One band of 8 lengths per batch, (0, 8], (8, 16], ..., but for the
        # batches of what the bands leave over (fewer than one per band).
        mixed += len(set((longest - 1) // 8)) > 1
        assert source_batch.shape[1] == (source_batch != 0).sum(1).max()  # trimmed
        seen.extend(source_batch[:, 0].tolist())
    assert mixed <= 4
    assert sorted(seen) == sorted(sources[:, 0].tolist())


def test_order_is_a_function_of_seed_and_epoch():
    rows = padded_rows(np.arange(1, 101) % 30 + 1, 32)

    def first_ids(batches, epoch):
        batches.epoch = epoch
        return [batch[0][:, 0].tolist() for batch in batches]

    for bucket_width in (None, 8):
        batches = ArrayBatches((rows,), 8, seed=4, bucket_width=bucket_width)
        epoch_2 = first_ids(batches, 2)
        assert first_ids(batches, 0) != epoch_2 != first_ids(batches, 1)
        # A fresh object (a resumed run) at epoch 2 reads the same batches.
        assert first_ids(ArrayBatches((rows,), 8, seed=4, bucket_width=bucket_width), 2) == epoch_2
        assert first_ids(ArrayBatches((rows,), 8, seed=5, bucket_width=bucket_width), 2) != epoch_2
    unshuffled = ArrayBatches((rows,), 8)
    assert (
        first_ids(unshuffled, 0)
        == first_ids(unshuffled, 3)
        == [rows[i : i + 8, 0].tolist() for i in range(0, 100, 8)]
    )


def test_bad_batches_are_refused_with_their_reason():
    rows = padded_rows([1, 2, 3], 4)
    with pytest.raises(ValueError, match="one length"):
        ArrayBatches((rows, np.zeros(2)), 2)
    with pytest.raises(ValueError, match="batch_size"):
        ArrayBatches((rows,), 0)
    with pytest.raises(ValueError, match="seed"):
        ArrayBatches((rows,), 2, bucket_width=8)


def test_as_tf_dataset_reads_each_epochs_batches_of_any_width():
    """Keras would fix the width the first two batches share; trimmed widths vary after."""
    rows = padded_rows([4, 4, 4, 4, 2, 2, 9, 9], 12)
    batches = ArrayBatches((rows, np.arange(8)), 2)
    dataset = as_tf_dataset(batches)
    widths = [ids.shape[1] for ids, _ in dataset]
    assert widths == [4, 4, 2, 9]
    shuffled = ArrayBatches((rows, np.arange(8)), 2, seed=3)
    dataset = as_tf_dataset(shuffled)
    for epoch in (0, 1):
        shuffled.epoch = epoch
        read = [labels.numpy().tolist() for _, labels in dataset]
        assert read == [labels.tolist() for _, labels in shuffled]
    assert as_tf_dataset(dataset) is dataset  # other data passes through


def test_trimmed_widths_round_up_to_eight_steps_an_octave_within_the_rows():
    rows = padded_rows([3, 5, 1], 20)
    assert trim_shared_padding_array(rows, round_up=octave_step_width).shape == (3, 8)
    np.testing.assert_array_equal(
        trim_shared_padding_array(rows, round_up=octave_step_width), rows[:, :8]
    )
    for longest, width in [
        (0, 8),
        (8, 8),
        (9, 16),
        (57, 64),
        (65, 80),
        (80, 80),
        (81, 96),
        (129, 160),
        (300, 320),
        (1383, 1536),
    ]:
        assert trim_shared_padding_array(
            padded_rows([longest], 2000), round_up=octave_step_width
        ).shape == (1, width)
    # never past L
    assert trim_shared_padding_array(padded_rows([9], 12), round_up=octave_step_width).shape == (
        1,
        12,
    )


def test_batch_widths_round_up_on_jax_only(monkeypatch):
    from keras_transformer.training import batching

    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    assert batching.batch_width_rounding() is octave_step_width
    assert trim_id_rows(padded_rows([70, 3], 100))[0].shape == (2, 80)
    for backend in ("tensorflow", "torch"):
        monkeypatch.setattr(keras.backend, "backend", lambda backend=backend: backend)
        assert batching.batch_width_rounding() is None
        assert trim_id_rows(padded_rows([70, 3], 100))[0].shape == (2, 70)


@pytest.mark.parametrize("round_up", [None, octave_step_width])
def test_teacher_forcing_splits_trimmed_targets_into_inputs_and_labels(round_up, monkeypatch):
    from keras_transformer.training.translator import pipeline as translator

    monkeypatch.setattr(translator, "batch_width_rounding", lambda: round_up)
    sources = padded_rows([3, 6, 2], 12)
    targets = padded_rows([4, 9, 2], 13)
    inputs, labels = translator._teacher_forcing(sources, targets)
    # Independently: trimmed by the TensorFlow op to the longest row (at least 2), then split.
    trimmed = trim_shared_padding(tf.constant(targets), min_length=2).numpy()
    width = trimmed.shape[1] - 1
    if round_up is None:
        np.testing.assert_array_equal(inputs["source_ids"], sources[:, :6])
        np.testing.assert_array_equal(inputs["target_ids"], trimmed[:, :-1])
        np.testing.assert_array_equal(labels, trimmed[:, 1:])
    else:
        assert (
            inputs["source_ids"].shape[1] == 8
            and labels.shape[1] == inputs["target_ids"].shape[1] == 8
        )
        np.testing.assert_array_equal(labels[:, :width], trimmed[:, 1:])
        assert not labels[:, width:].any()
        np.testing.assert_array_equal(inputs["target_ids"], targets[:, :8])
