"""Training batches from NumPy arrays, on every Keras backend.

`ArrayBatches` is a `keras.utils.PyDataset`: `fit` reads it on JAX, PyTorch
and TensorFlow alike (on TensorFlow Keras wraps it in a `tf.data` generator),
and it needs no TensorFlow itself, so a run trains from token arrays where
TensorFlow is not installed.
"""

import math

import keras
import numpy as np

from keras_transformer.text.padding import trim_shared_padding_array


class ArrayBatches(keras.utils.PyDataset):
    """Batches of rows of NumPy arrays, in a seeded order that changes every epoch.

    The order of an epoch is a pure function of `(seed, epoch)`, so a run
    resumed at epoch k (Keras' `BackupAndRestore`) sees the batches an
    uninterrupted run would have seen. `fit_in_folder` tells the batches
    which epoch `fit` is in (`FollowEpochs`).

    Args:
        arrays: a tuple of arrays with the same first dimension (`[N, ...]`):
            id rows `[N, L]` (0-padded) and, e.g., labels `[N]`.
        batch_size: rows per batch; the last batch of an epoch may be smaller.
        make_batch: the batch `fit` receives from the batch's rows, one array
            per entry of `arrays` (default: the tuple of them, with the
            padding columns every id row of the batch shares trimmed).
        seed: shuffle with this seed; None keeps the arrays' order every epoch.
        bucket_width: with a seed, batch together rows whose longest id row
            (over every 2-D array) falls in the same band of `bucket_width`
            tokens, so that after trimming a batch of short rows does not pay
            for a long one. An epoch is still `ceil(N / batch_size)` batches
            with every row once: each band's full batches, then what the
            bands leave over, sorted by length, batched.
    """

    def __init__(self, arrays, batch_size, make_batch=None, seed=None, bucket_width=None, **kwargs):
        super().__init__(**kwargs)
        self.arrays = tuple(np.asarray(array) for array in arrays)
        sizes = {len(array) for array in self.arrays}
        if len(sizes) != 1:
            raise ValueError(
                f"ArrayBatches needs arrays of one length, got lengths {sorted(sizes)}."
            )
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}.")
        if bucket_width is not None and seed is None:
            raise ValueError(
                "Length buckets need a `seed`: unshuffled batches keep the arrays' order."
            )
        self.num_rows = sizes.pop()
        self.batch_size = batch_size
        self.make_batch = make_batch or trim_id_rows
        self.seed = seed
        self.bucket_width = bucket_width
        self.epoch = 0
        # (epoch, its batch rows): one attribute, so a reader never sees half
        self._order = (
            None,
            None,
        )

    def __len__(self):
        return math.ceil(self.num_rows / self.batch_size)

    def __getitem__(self, index):
        if not 0 <= index < len(self):
            raise IndexError(f"Batch {index} of {len(self)}.")
        rows = self.batch_rows(self.epoch)[index]
        return self.make_batch(*(array[rows] for array in self.arrays))

    def batch_rows(self, epoch):
        """The row indices of each batch of `epoch`, in the order `fit` reads them."""
        # One epoch's order, kept: every batch of the epoch reads it. On
        # TensorFlow, batches are read in tf.data's prefetch thread.
        order_epoch, order = self._order
        if order_epoch != epoch:
            order = self._batch_rows(epoch)
            self._order = (epoch, order)
        return order

    def _batch_rows(self, epoch):
        if self.seed is None:
            rows = np.arange(self.num_rows)
            return [
                rows[start : start + self.batch_size]
                for start in range(0, self.num_rows, self.batch_size)
            ]
        rng = np.random.default_rng([self.seed, epoch])
        rows = rng.permutation(self.num_rows)
        if self.bucket_width is None:
            return [
                rows[start : start + self.batch_size]
                for start in range(0, self.num_rows, self.batch_size)
            ]
        lengths = self.row_lengths()[rows]
        bands = (np.maximum(lengths, 1) - 1) // self.bucket_width
        batches, left_over = [], []
        for band in np.unique(bands):
            members = rows[bands == band]
            full = len(members) - len(members) % self.batch_size
            batches.extend(np.split(members[:full], full // self.batch_size) if full else [])
            left_over.append(members[full:])
        left_over = np.concatenate(left_over)
        left_over = left_over[np.argsort(self.row_lengths()[left_over], kind="stable")]
        batches.extend(
            left_over[start : start + self.batch_size]
            for start in range(0, len(left_over), self.batch_size)
        )
        return [batches[index] for index in rng.permutation(len(batches))]

    def row_lengths(self):
        """Each row's longest id row: its non-zero count, the most over every 2-D array."""
        return np.max(
            [(array != 0).sum(axis=1) for array in self.arrays if array.ndim == 2], axis=0
        )


def batch_width_rounding():
    """How a trimmed batch's width is rounded up on this backend (None: not at all).

    JAX compiles the train step for every new shape, and on a GPU one compile
    of a model costs as much as hundreds of its steps: there the width is
    rounded to one of four steps an octave (`octave_step_width`), so an
    epoch compiles a handful of widths. TensorFlow traces one step for all
    widths and PyTorch runs eagerly: there it is the longest row's.
    """
    return octave_step_width if keras.backend.backend() == "jax" else None


def octave_step_width(length):
    """`length` rounded up to a multiple of 8, or of an eighth of the next power of two
    when that is larger: 8, 16, ..., 64, 80, 96, 112, 128, 160, ..., 256, 320, ...

    Long texts then give four widths an octave, not one every 8 tokens, for
    less than a quarter more positions (`benchmarks/batch_widths.py` counts
    both on a token folder).
    """
    length = max(length, 1)
    step = max(8, (1 << (length - 1).bit_length()) // 8)
    return -(-length // step) * step


def trim_id_rows(*arrays):
    """The batch `(arrays...)` with each 2-D id array's shared padding columns trimmed."""
    round_up = batch_width_rounding()
    return tuple(
        trim_shared_padding_array(array, round_up=round_up) if array.ndim == 2 else array
        for array in arrays
    )


class FollowEpochs(keras.callbacks.Callback):
    """Tells `ArrayBatches` which epoch `fit` begins (after a resume too), before it reads
    a batch."""

    def __init__(self, batches):
        super().__init__()
        self.batches = batches

    def on_epoch_begin(self, epoch, logs=None):
        self.batches.epoch = epoch


def as_tf_dataset(batches):
    """`batches` (an `ArrayBatches`) as a `tf.data.Dataset`, for `fit` on TensorFlow; other
    data as it is.

    Keras would wrap the `ArrayBatches` itself, but with the shape of its
    first two batches, fixing any width they share, where trimmed batches
    vary in width. Each pass over the dataset reads the order of the epoch
    `batches.epoch` names when the pass reads its first batch.
    """
    if not isinstance(batches, ArrayBatches):
        return batches
    import tensorflow as tf

    signature = tf.nest.map_structure(
        lambda array: tf.TensorSpec([None] * array.ndim, tf.as_dtype(array.dtype)), batches[0]
    )
    dataset = tf.data.Dataset.from_generator(
        lambda: (batches[index] for index in range(len(batches))), output_signature=signature
    )
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches))).prefetch(
        tf.data.AUTOTUNE
    )
