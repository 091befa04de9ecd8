"""Translator training speed on TensorFlow: `ArrayBatches` (NumPy, any backend) against
an all-TensorFlow `tf.data` pipeline of the same batches (shuffle, repeat,
`bucket_by_sequence_length`, teacher forcing as a `map`), the way to feed `fit`
that needs no Python per batch.

One model (`build_compiled_translator`), one epoch of `fit` per pipeline per
round, the two interleaved (A B, B A, ...) after one warm-up epoch each (the
first traces); reports the median seconds per epoch and the ratio
`ArrayBatches / tf.data` (<= 1.0: no slower).

    python benchmarks/array_batches_speed.py --pairs 4096 --rounds 4
"""

import argparse
import math
import statistics
import time

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.text.padding import trim_shared_padding
from keras_transformer.training.batching import as_tf_dataset
from keras_transformer.training.translator.model import build_compiled_translator
from keras_transformer.training.translator.pipeline import _translation_batches
from keras_transformer.training.translator.settings import TranslatorSettings


def tf_data_batches(sources, targets, settings):
    """The translator's training batches as a `tf.data` pipeline: the reference to match."""
    width = settings.sequence_length + 1
    boundaries = list(range(9, width + 1, 8))

    def longest_row(*rows):
        return tf.reduce_max([tf.math.count_nonzero(row, dtype=tf.int32) for row in rows])

    def teacher_forcing(source_ids, target_ids):
        source_ids = trim_shared_padding(source_ids)
        target_ids = trim_shared_padding(target_ids, min_length=2)
        return {"source_ids": source_ids, "target_ids": target_ids[:, :-1]}, target_ids[:, 1:]

    dataset = tf.data.Dataset.from_tensor_slices((sources, targets))
    dataset = dataset.shuffle(
        len(sources), seed=settings.seed, reshuffle_each_iteration=True
    ).repeat()
    dataset = dataset.bucket_by_sequence_length(
        longest_row,
        bucket_boundaries=boundaries,
        bucket_batch_sizes=[settings.batch_size] * (len(boundaries) + 1),
    )
    return dataset.map(teacher_forcing).prefetch(tf.data.AUTOTUNE)


def made_up_pairs(count, sequence_length, vocabulary_size, seed=0):
    rng = np.random.default_rng(seed)
    sources = np.zeros((count, sequence_length), np.int32)
    targets = np.zeros((count, sequence_length + 1), np.int32)
    for source, target in zip(sources, targets):
        length = int(np.clip(rng.gamma(4.0, sequence_length / 8), 1, sequence_length - 2))
        source[:length] = rng.integers(7, vocabulary_size, size=length)
        target_length = int(np.clip(length + rng.integers(-3, 4), 1, sequence_length - 1))
        target[: target_length + 2] = [4, *rng.integers(7, vocabulary_size, size=target_length), 5]
    return sources, targets


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=4096, help="made-up training pairs")
    parser.add_argument(
        "--rounds", type=int, default=4, help="timed epochs per pipeline (median taken)"
    )
    parser.add_argument("--sequence-length", type=int, default=48)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    settings = TranslatorSettings(
        epochs=1,
        batch_size=args.batch_size,
        sequence_length=args.sequence_length,
        vocabulary_size=4000,
        target_vocabulary_size=4000,
        num_layers=2,
        d_model=128,
        num_heads=4,
        intermediate_dim=512,
        dropout=0.1,
        source_word_dropout=0.0,
        label_smoothing=0.1,
        warmup_steps=100,
        schedule="inverse_sqrt",
    )
    keras.utils.set_random_seed(settings.seed)
    sources, targets = made_up_pairs(args.pairs, settings.sequence_length, settings.vocabulary_size)
    model = build_compiled_translator(
        settings, settings.vocabulary_size, settings.target_vocabulary_size
    )
    steps = math.ceil(args.pairs / settings.batch_size)
    array_batches = _translation_batches(sources, targets, settings, shuffle=True)
    pipelines = {
        "ArrayBatches": (as_tf_dataset(array_batches), None),
        "tf.data": (tf_data_batches(sources, targets, settings), steps),
    }
    seconds = {name: [] for name in pipelines}

    def epoch(name):
        dataset, steps_per_epoch = pipelines[name]
        array_batches.epoch += 1
        started = time.perf_counter()
        model.fit(dataset, epochs=1, steps_per_epoch=steps_per_epoch, shuffle=False, verbose=0)
        return time.perf_counter() - started

    for name in pipelines:
        epoch(name)  # traces
    for round_index in range(args.rounds):
        order = list(pipelines) if round_index % 2 == 0 else list(reversed(pipelines))
        for name in order:
            seconds[name].append(epoch(name))
    for name, values in seconds.items():
        print(
            f"{name:>12}: median {statistics.median(values):.2f} s/epoch of {steps} steps "
            f"({', '.join(f'{value:.2f}' for value in values)})"
        )
    ratio = statistics.median(seconds["ArrayBatches"]) / statistics.median(seconds["tf.data"])
    print(f"ArrayBatches / tf.data: {ratio:.3f} (<= 1.0: no slower)")


if __name__ == "__main__":
    main()
