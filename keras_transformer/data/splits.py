"""Deterministic, stratified, seeded splits of example indices.

Everything here works on integer class labels and returns index arrays, so the
same code splits labelled texts now and sentence pairs later (give every pair
the same label for a plain seeded split).
"""

import numpy as np

from keras_transformer.data.errors import DataError


def largest_remainder_quotas(counts, total):
    """Shares `total` among groups in proportion to `counts`, in whole numbers.

    Each group gets the floor of its exact share; the units left over go to the
    groups with the largest fractional parts (ties to the lower index). So the
    quotas add up to exactly `total` and each is within one of its exact share;
    rounding every group on its own could miss the total by several.

    Args:
        counts: 1-D array of non-negative group sizes.
        total: the whole number to share, `0 <= total <= counts.sum()`.

    Returns:
        int64 array of quotas, `quota[i] <= counts[i]`.
    """
    counts = np.asarray(counts, dtype=np.int64)
    size = int(counts.sum())
    if size == 0:
        return np.zeros_like(counts)
    exact = counts * total / size
    quotas = np.floor(exact).astype(np.int64)
    left_over = int(total - quotas.sum())
    # Stable sort: equal remainders go to the lower group index, deterministically.
    by_remainder = np.argsort(-(exact - quotas), kind="stable")
    quotas[by_remainder[:left_over]] += 1
    return quotas


def _check_fraction(value, what):
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < 1.0:
        raise DataError(f"{what} must be a number in [0, 1), got {value!r}.")


def stratified_split(labels, seed, validation_fraction=0.1, test_fraction=0.1):
    """Splits example indices into train, validation and test, class by class.

    Each split gets (within one example) the same share of every class as the
    whole set, and exactly `round(n * fraction)` examples in total. Every class
    keeps at least one example in train (a class seen only in held-out data
    cannot be learned), so a class with 3 or more examples is always in train.
    Within each split the classes are interleaved in a seeded random order.

    Args:
        labels: 1-D int array, the class of each example.
        seed: seed for `np.random.default_rng`; the same seed gives the same
            split, another seed another one.
        validation_fraction: share of examples held out for validation.
        test_fraction: share of examples held out for testing.

    Returns:
        `(train, validation, test)`: disjoint int64 index arrays that together
        cover `range(len(labels))`.

    Raises:
        DataError: no labels, a fraction outside [0, 1), or fractions that add
            up to 1 or more.
    """
    _check_fraction(validation_fraction, "validation_fraction")
    _check_fraction(test_fraction, "test_fraction")
    if validation_fraction + test_fraction >= 1.0:
        raise DataError(
            f"validation_fraction + test_fraction must be below 1 to leave examples for training, "
            f"got {validation_fraction} + {test_fraction}."
        )
    labels = np.asarray(labels)
    if len(labels) == 0:
        raise DataError("There are no examples to split.")
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    test_quotas, validation_quotas = _held_out_quotas(counts, validation_fraction, test_fraction)

    train, validation, test = [], [], []
    for label, test_quota, validation_quota in zip(classes, test_quotas, validation_quotas):
        members = rng.permutation(np.flatnonzero(labels == label))
        test.append(members[:test_quota])
        validation.append(members[test_quota : test_quota + validation_quota])
        train.append(members[test_quota + validation_quota :])
    # Concatenated class by class, a split would be sorted by class; shuffle so
    # that unshuffled batches still mix classes.
    return tuple(rng.permutation(np.concatenate(parts)) for parts in (train, validation, test))


def stratified_subset(labels, size, seed):
    """Picks `size` example indices keeping each class's share.

    When `size` is at least the number of classes, every class keeps at least
    one example (taken from the class with the largest quota), so a small
    subset still shows the model every class.

    Args:
        labels: 1-D int array, the class of each example.
        size: how many indices to keep; at least `len(labels)` keeps them all.
        seed: seed for `np.random.default_rng`.

    Returns:
        int64 index array of `min(size, len(labels))` distinct indices, in a
        seeded random order.

    Raises:
        DataError: `size` is not a positive integer.
    """
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
        raise DataError(f"max_examples must be a positive integer, got {size!r}.")
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    size = min(int(size), len(labels))
    classes, counts = np.unique(labels, return_counts=True)
    quotas = largest_remainder_quotas(counts, size)
    if size >= len(classes):
        for i in np.flatnonzero(quotas == 0):
            quotas[np.argmax(quotas)] -= 1
            quotas[i] = 1
    chosen = [
        rng.permutation(np.flatnonzero(labels == label))[:quota]
        for label, quota in zip(classes, quotas)
    ]
    return rng.permutation(np.concatenate(chosen))


def in_memory_dataset(columns, batch_size=None, shuffle=False, seed=None):
    """A `tf.data.Dataset` over aligned in-memory columns (texts, labels, ...).

    `columns` is a tuple of `(values, tf dtype)`. Shuffling uses a buffer as
    large as the split: a uniform shuffle, free since everything is in memory.
    TensorFlow is imported here so that loading and splitting data works (and
    imports fast) without it.
    """
    import tensorflow as tf

    length = len(columns[0][0])
    tensors = tuple(tf.constant(values, dtype=dtype, shape=[length]) for values, dtype in columns)
    dataset = tf.data.Dataset.from_tensor_slices(tensors)
    if shuffle:
        dataset = dataset.shuffle(max(length, 1), seed=seed, reshuffle_each_iteration=True)
    if batch_size is not None:
        dataset = dataset.batch(batch_size)
    return dataset.prefetch(tf.data.AUTOTUNE)


class ExampleSplit:
    """What the splits of every corpus share: aligned columns, one entry per
    example; their count; a short repr; and a `tf.data` view.

    A subclass is a frozen dataclass whose fields are the columns, named with
    their TensorFlow dtypes in `COLUMNS`, and says what an example is in `UNIT`.
    """

    COLUMNS = ()  # ((field name, TensorFlow dtype name), ...)
    UNIT = "examples"

    def __len__(self):
        return len(getattr(self, self.COLUMNS[0][0]))

    def __repr__(self):
        # The default dataclass repr would print every text.
        return f"{type(self).__name__}({len(self)} {self.UNIT})"

    def to_dataset(self, batch_size=None, shuffle=False, seed=None):
        """The split as a `tf.data.Dataset` of one tuple per example, the columns in
        `COLUMNS` order.

        Args:
            batch_size: if given, batch the examples (the last batch may be
                smaller); otherwise yield one example at a time.
            shuffle: shuffle the whole split, in a new order each epoch.
            seed: shuffle seed; the same seed gives the same sequence of
                epoch orders.

        Returns:
            A dataset of scalar tuples, or of `[batch]` tuples when batched.
            Unshuffled, it yields the examples in order.
        """
        columns = tuple((getattr(self, name), dtype) for name, dtype in self.COLUMNS)
        return in_memory_dataset(columns, batch_size, shuffle, seed)


def _held_out_quotas(counts, validation_fraction, test_fraction):
    """`(test quotas, validation quotas)`: how many examples of each class (of
    `counts`) go to each held-out split, every class keeping one for training."""
    total = int(np.sum(counts))
    # Round half up (Python's round() goes to even: 222.5 -> 222).
    test_total = int(np.floor(total * test_fraction + 0.5))
    validation_total = int(np.floor(total * validation_fraction + 0.5))
    test_quotas = largest_remainder_quotas(counts, test_total)
    validation_quotas = largest_remainder_quotas(counts - test_quotas, validation_total)
    for i, count in enumerate(counts):
        # Only tiny classes get here; giving one back to train costs a held-out
        # example rather than leaving the class unlearnable.
        while (
            test_quotas[i] + validation_quotas[i] > count - 1
            and test_quotas[i] + validation_quotas[i] > 0
        ):
            if validation_quotas[i] >= test_quotas[i]:
                validation_quotas[i] -= 1
            else:
                test_quotas[i] -= 1
    return test_quotas, validation_quotas
