"""Classify raw texts with an exported classifier (a SavedModel, LiteRT or ONNX export).

    keras-transformer predict exported_models/classifier "Shares fell as oil rose." "A new album"
    keras-transformer predict exported_models/classifier/3 < texts.txt     # one text per line
    keras-transformer predict exported_models/classifier --json "some text"
    keras-transformer predict exported_models/classifier --plot-attention "some text" \
        --out attention.png

MODEL is a version folder or a base folder (its newest version is used). Only
`tensorflow` and `tensorflow_text` are needed to load a SavedModel; this app uses
the project for finding versions and drawing plots. A LiteRT or ONNX export
(`keras-transformer export --format`) answers through its runtime, with no
TensorFlow, and has no attention to plot.
"""

import json
import os
import sys

from keras_transformer.cli.common import (
    export_format,
    inference_parser,
    layer_index,
    load_export,
    load_runtime,
    run_inference_app,
)
from keras_transformer.export.parts import attention_notice, has_encoder, read_parts


def build_parser():
    parser = inference_parser(
        prog="keras-transformer predict",
        description=__doc__,
        texts_help="texts to classify (default: one per line from stdin)",
        batch_size=64,
        plot_help="draw the encoder's attention for TEXT instead of classifying",
        layer_help="encoder block to draw, 0-based; negative counts from the last (default -1)",
    )
    return parser


def load_model(path):
    """The newest version under `path` (or `path` itself), with its class names: a loaded
    SavedModel, or the runtime of a LiteRT or ONNX export."""
    if export_format(path) != "saved_model":
        version_dir, runtime = load_runtime(path, "classifier")
        return version_dir, runtime, runtime.class_names
    version_dir, model = load_export(path)
    names_path = os.path.join(version_dir, "assets.extra", "class_names.txt")
    class_names = None
    if os.path.exists(names_path):
        with open(names_path, encoding="utf-8") as names_file:
            class_names = [line.rstrip("\n") for line in names_file]
    return version_dir, model, class_names


def classify(model, texts, batch_size):
    """Yields `(text, label, probabilities)` in order, `batch_size` texts per call."""
    for start in range(0, len(texts), batch_size):
        batch = texts[start : start + batch_size]
        yield from zip(batch, *_answers(model, batch))


def _answers(model, batch):
    """`(labels, probabilities)` of a SavedModel's `serving_default` or a runtime's `predict`."""
    if not hasattr(model, "signatures"):
        probabilities, labels = model.predict(batch)
        return labels, probabilities
    import tensorflow as tf

    outputs = model.signatures["serving_default"](text=tf.constant(batch, tf.string))
    labels = [label.decode("utf-8") for label in outputs["label"].numpy()]
    return labels, outputs["probabilities"].numpy()


def print_prediction(text, label, probabilities, class_names, as_json, parts=None):
    names = class_names or [str(index) for index in range(len(probabilities))]
    if as_json:
        by_class = {name: round(float(p), 4) for name, p in zip(names, probabilities)}
        answer = {"text": text, "label": label, "probabilities": by_class}
        if parts and parts["bag_weight"] is not None:
            answer["weights"] = {
                "transformer": parts["transformer_weight"],
                "bag_of_ngrams": parts["bag_weight"],
            }
        print(json.dumps(answer, ensure_ascii=False))
        return
    preview = " ".join(text.split())
    preview = preview if len(preview) <= 70 else preview[:67] + "..."
    print(f"{label:<15} {max(probabilities):6.1%}  {preview!r}")
    # Formatted from the model's values: rounding twice (to 4, then 3 places) can be off by one in
    # the last place.
    print("    " + "  ".join(f"{name} {float(p):.3f}" for name, p in zip(names, probabilities)))


def plot_attention(version_dir, model, text, out_path, layer):
    import numpy as np
    import tensorflow as tf

    from keras_transformer import plots

    if not hasattr(model, "signatures"):
        raise ValueError(
            f"{version_dir} is a {export_format(version_dir)} export, which has no attention to "
            "draw: plot the SavedModel's (keras-transformer export without --format)."
        )
    parts = read_parts(version_dir)
    if not has_encoder(parts):
        # A usage error, not a plot of nothing: the export has no attention signature.
        raise ValueError(f"{version_dir}: {attention_notice(parts)}")
    if "attention" not in model.signatures:
        raise ValueError("This export has no `attention` signature (is it a classifier?).")
    outputs = model.signatures["attention"](text=tf.constant([text], tf.string))
    tokens = [token.decode("utf-8", errors="replace") for token in outputs["tokens"].numpy()[0]]
    scores = outputs["attention_scores"].numpy()[0]  # [layers, heads, T, T]
    length = sum(1 for token in tokens if token)
    if length == 0:
        raise ValueError("The text has no tokens to draw.")
    layer = layer_index(layer, scores.shape[0], "encoder blocks")
    notice = attention_notice(parts)
    if notice is not None:
        print(f"Note: {notice}", file=sys.stderr, flush=True)
    weights = np.asarray(scores[layer, :, :length, :length])
    tokens = tokens[:length]
    plots.plot_attention(
        weights,
        tokens,
        tokens,
        out_path,
        title=f"Encoder block {layer} self-attention ({length} tokens)"
        + (" - not used by the answer" if parts and parts["transformer_weight"] == 0.0 else ""),
    )
    return out_path


def print_predictions(args, version_dir, model, class_names, texts):
    parts = read_parts(version_dir)
    if not args.json:
        print(f"Model: {version_dir}{_parts_described(parts)}")
    for text, label, probabilities in classify(model, texts, args.batch_size):
        print_prediction(text, label, probabilities, class_names, args.json, parts)


def _parts_described(parts):
    if not parts or parts["bag_weight"] is None:
        return ""
    return (
        f" (the Transformer at weight {parts['transformer_weight']}, the bag of n-grams at "
        f"{parts['bag_weight']})"
    )


def main(argv=None):
    return run_inference_app(build_parser(), argv, load_model, plot_attention, print_predictions)


if __name__ == "__main__":
    sys.exit(main())
