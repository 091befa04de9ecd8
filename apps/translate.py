"""Translate raw texts with an exported translator SavedModel.

    python -m apps.translate exported_models/translator "El perro azul." "Buenos días"
    python -m apps.translate exported_models/translator/3 < texts.txt     # one text per line
    python -m apps.translate exported_models/translator --greedy --json "some text"
    python -m apps.translate exported_models/translator --plot-attention "some text" --out attention.png

MODEL is a version folder or a base folder (its newest version is used).
Translations come from the beam search of `serving_default` (the export's
beam width and length penalty, see assets.extra/translator.json), or with
--greedy from the `greedy` signature. Only `tensorflow` and `tensorflow_text`
are needed to load the model; this app uses the project for finding versions
and drawing plots.
"""

import argparse
import json
import os
import sys

from apps.common import layer_index
from apps.common import load_export
from apps.common import texts_or_stdin

CONFIG_FILE = "translator.json"


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m apps.translate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model", help="exported model: base folder or version folder")
    parser.add_argument("texts", nargs="*", help="texts to translate (default: one per line from stdin)")
    parser.add_argument("--greedy", action="store_true",
                        help="greedy decoding (the `greedy` signature) instead of beam search")
    parser.add_argument("--json", action="store_true", help="print one JSON object per text")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--plot-attention", metavar="TEXT", default=None,
                        help="draw the decoder's cross-attention for TEXT instead of translating")
    parser.add_argument("--out", default="attention.png", help="PNG path for --plot-attention")
    parser.add_argument("--layer", type=int, default=-1,
                        help="decoder block to draw, 0-based; negative counts from the last (default -1)")
    return parser


def load_model(path):
    """The newest version under `path` (or `path` itself), with its decoding settings."""
    version_dir, model = load_export(path)
    config_path = os.path.join(version_dir, "assets.extra", CONFIG_FILE)
    config = {}
    if os.path.exists(config_path):
        with open(config_path, encoding="utf-8") as config_file:
            config = json.load(config_file)
    return version_dir, model, config


def signature_name(greedy):
    return "greedy" if greedy else "serving_default"


def check_signature(model, name):
    if name not in model.signatures:
        raise ValueError(f"This export has no `{name}` signature (is it a translator?).")
    outputs = model.signatures[name].structured_outputs
    if "translation" not in outputs:
        raise ValueError(f"The `{name}` signature has no `translation` output (is it a translator?).")


def translate(model, texts, batch_size, greedy=False):
    """Yields `(text, translation)` in order, `batch_size` texts per call."""
    import tensorflow as tf

    name = signature_name(greedy)
    check_signature(model, name)
    signature = model.signatures[name]
    for start in range(0, len(texts), batch_size):
        batch = texts[start : start + batch_size]
        outputs = signature(text=tf.constant(batch, tf.string))
        for text, translation in zip(batch, outputs["translation"].numpy()):
            yield text, translation.decode("utf-8", errors="replace")


def print_translation(text, translation, as_json):
    if as_json:
        print(json.dumps({"text": text, "translation": translation}, ensure_ascii=False))
        return
    print(translation)


def plot_attention(model, text, out_path, layer):
    import numpy as np
    import tensorflow as tf

    from keras_transformer import plots

    if "attention" not in model.signatures:
        raise ValueError("This export has no `attention` signature (is it a translator?).")
    outputs = model.signatures["attention"](text=tf.constant([text], tf.string))
    if "cross_attention" not in outputs:
        raise ValueError("The `attention` signature has no `cross_attention` output (is it a translator?).")

    def words(tokens):
        return [token.decode("utf-8", errors="replace") for token in tokens if token]

    source_tokens = words(outputs["source_tokens"].numpy()[0])
    target_tokens = words(outputs["target_tokens"].numpy()[0])
    scores = outputs["cross_attention"].numpy()[0]  # [layers, heads, T, S]
    if not source_tokens:
        raise ValueError("The text has no tokens to draw.")
    if not target_tokens:
        raise ValueError("The translation has no tokens to draw.")
    layer = layer_index(layer, scores.shape[0], "decoder block(s)")
    weights = np.asarray(scores[layer, :, : len(target_tokens), : len(source_tokens)])
    plots.plot_attention(
        weights, target_tokens, source_tokens, out_path,
        title=f"Decoder block {layer} cross-attention (greedy translation)",
    )
    return out_path


def main(argv=None):
    parser = build_parser()
    # Intermixed: texts may come after options (`MODEL --json "text"`).
    args = parser.parse_intermixed_args(argv)
    if args.batch_size < 1:
        parser.exit(2, f"error: --batch-size must be at least 1, got {args.batch_size}\n")
    try:
        version_dir, model, _ = load_model(args.model)
    except (FileNotFoundError, OSError) as error:
        parser.exit(2, f"error: {error}\n")
    if args.plot_attention is not None:
        try:
            path = plot_attention(model, args.plot_attention, args.out, args.layer)
        except ValueError as error:
            parser.exit(2, f"error: {error}\n")
        print(f"Attention plot written to {path}")
        return 0
    texts = texts_or_stdin(args.texts)
    try:
        check_signature(model, signature_name(args.greedy))
        if not args.json:
            print(f"Model: {version_dir}", file=sys.stderr)
        for text, translation in translate(model, texts, args.batch_size, greedy=args.greedy):
            print_translation(text, translation, args.json)
    except ValueError as error:
        parser.exit(2, f"error: {error}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
