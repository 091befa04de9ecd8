"""Speed of BagOfNgrams' counting: sorting each row against comparing every pair of positions.

    .venv/bin/python benchmarks/ngrams_speed.py
    .venv/bin/python benchmarks/ngrams_speed.py --lengths 128,512,2048 --rounds 7

The layer counts how often each n-gram occurs in a text. It sorts each row
of n-gram ids (`_sorted_with_counts`, O(L log L)). The reference, `pairwise`
(the layer with its `_tfidf_weights` counting that way), compares every pair
of positions, an `[B, L, L]` tensor (O(L**2) time and memory). Both are timed as the layer's forward
pass in a `tf.function` (graph, the way `predict` and the export run it) on
0-padded ids with repeats, after checking that both give the same outputs;
interleaved in one process (`bench_common.time_interleaved`). The table
gives median milliseconds per batch and `ratio = pairwise / sorted`
(> 1: sorting is faster).
"""

import argparse
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if os.environ.setdefault("KERAS_BACKEND", "tensorflow") != "tensorflow":
    sys.exit("benchmarks/ngrams_speed.py needs KERAS_BACKEND=tensorflow.")

import numpy as np
import tensorflow as tf
from bench_common import (
    paired_ratio,
    time_interleaved,
)
from keras import ops

from keras_transformer.layers import BagOfNgrams


class PairwiseBagOfNgrams(BagOfNgrams):
    """The layer with its former counting: every pair of positions compared
    (the weight at each n-gram's first copy)."""

    def _tfidf_weights(self, rows):
        idf = ops.where(rows >= 0, ops.take(self.idf, ops.maximum(rows, 0)), 0.0)
        same = ops.cast(ops.expand_dims(rows, 2) == ops.expand_dims(rows, 1), "float32")
        count = ops.sum(same, axis=-1)
        length = ops.shape(rows)[1]
        is_first = ops.sum(same * ops.tril(ops.ones((length, length)), -1), axis=-1) == 0
        term_frequency = 1.0 + ops.log(count) if self.sublinear_tf else count
        return rows, ops.where(is_first, term_frequency * idf, 0.0)


def token_ids(batch, length, vocabulary, seed=0):
    """Zipf-like ids (frequent words repeat, as in text), rows 50-100% full."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((batch, length), "int32")
    for row in ids:
        count = int(rng.integers(length // 2, length + 1))
        row[:count] = np.minimum(rng.zipf(1.3, count), vocabulary - 1)
    return ids


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="128,512,2048")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--vocabulary", type=int, default=8000)
    parser.add_argument("--classes", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)

    print(
        f"BagOfNgrams forward, batch {args.batch}, vocabulary {args.vocabulary}, {args.classes} "
        "classes, "
        f"{tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()} threads"
    )
    print("| length | sorted ms | pairwise ms | ratio |")
    print("|---|---|---|---|")
    for length in [int(value) for value in args.lengths.split(",")]:
        ids = token_ids(args.batch, length, args.vocabulary)
        layers = {}
        for name, layer_class in (("sorted", BagOfNgrams), ("pairwise", PairwiseBagOfNgrams)):
            layer = layer_class(
                args.vocabulary, args.classes, use_bias=True, kernel_initializer="random_normal"
            )
            layer.adapt(ids)
            layers[name] = layer
        layers["pairwise"].set_weights(layers["sorted"].get_weights())
        functions = {
            name: tf.function(lambda layer=layer: layer(ids)) for name, layer in layers.items()
        }
        np.testing.assert_allclose(
            functions["sorted"]().numpy(), functions["pairwise"]().numpy(), atol=1e-4
        )
        seconds = time_interleaved(
            {name: (lambda f=f: f().numpy()) for name, f in functions.items()},
            rounds=args.rounds,
            warmup=2,
        )
        print(
            f"| {length} | {1000 * statistics.median(seconds['sorted']):.1f} | "
            f"{1000 * statistics.median(seconds['pairwise']):.1f} | "
            f"{paired_ratio(seconds['pairwise'], seconds['sorted']):.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
