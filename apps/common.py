"""What the inference apps (`predict`, `translate`) share: loading an export,
reading texts, choosing a layer to plot."""

import sys

from keras_transformer.export.versions import latest_version_dir


def load_export(path):
    """(version folder, loaded SavedModel) for `path`, a version folder or a base folder."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the tokenizer ops the graph uses

    version_dir = latest_version_dir(path)
    return version_dir, tf.saved_model.load(version_dir)


def texts_or_stdin(texts):
    """The texts given on the command line, or else stdin's lines."""
    if texts:
        return texts
    if sys.stdin.isatty():
        print("Reading texts from stdin, one per line (Ctrl-D to end)...", file=sys.stderr)
    return [line.rstrip("\n") for line in sys.stdin]


def layer_index(layer, num_layers, blocks):
    """`--layer` (negative counts from the last) as an index into `num_layers` `blocks`."""
    if not -num_layers <= layer < num_layers:
        raise ValueError(f"--layer {layer} is out of range for {num_layers} {blocks}.")
    return layer % num_layers
