"""`keras-transformer train-classifier` with gradient clipping off, for
tests/apps/test_multi_worker.py.

Keras clips each replica's gradient (from its share of the global batch)
before the replicas' gradients are summed, so with clipping on, two
replicas clip what one process would not (or the other way round) and the
runs part by a few percent. With it off, two workers and one process do the
same arithmetic but for the order of float32 sums, so the test can hold
them to a tight tolerance.
"""

import dataclasses
import sys

from keras_transformer.cli import train_classifier


def unclipped(settings_from):
    """`settings_from` with `clip_norm=None` (no clipping) in the settings it returns."""
    return lambda args, **kwargs: dataclasses.replace(settings_from(args, **kwargs), clip_norm=None)


if __name__ == "__main__":
    train_classifier.settings_from = unclipped(train_classifier.settings_from)
    sys.exit(train_classifier.main())
