"""Test accuracy of an exported classifier on a corpus' seeded test split.

The split is the one `apps.tokenize` and `apps.train_classifier` make with
the same `--seed`, so a run trained elsewhere (a GPU machine, from a token
folder) is scored here on the raw test texts through its SavedModel, the way
a user calls it.

    .venv/bin/python benchmarks/export_accuracy.py exported_models/classifier --data bbc
"""

import argparse

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the tokenizer ops the graph uses

from keras_transformer.data.classification import load_classification_data
from keras_transformer.export.versions import latest_version_dir


def export_accuracy(export_dir, data, seed, batch_size=32):
    """`(accuracy, number of test texts)` of the export's `serving_default` on the split."""
    test = load_classification_data(data, seed=seed).test
    serve = tf.saved_model.load(latest_version_dir(export_dir)).signatures["serving_default"]
    texts = list(test.texts)
    probabilities = np.concatenate(
        [
            serve(tf.constant(texts[start : start + batch_size]))["probabilities"].numpy()
            for start in range(0, len(texts), batch_size)
        ]
    )
    return float(np.mean(probabilities.argmax(axis=-1) == np.asarray(test.labels))), len(texts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("exports", nargs="+", help="exported classifiers (base or version folder)")
    parser.add_argument("--data", default="bbc", help="the corpus the runs were trained on")
    parser.add_argument("--seed", type=int, default=1337, help="the runs' split seed")
    args = parser.parse_args(argv)
    for export_dir in args.exports:
        accuracy, count = export_accuracy(export_dir, args.data, args.seed)
        print(f"{export_dir}: test accuracy {accuracy:.4f} on {count} {args.data} texts")


if __name__ == "__main__":
    main()
