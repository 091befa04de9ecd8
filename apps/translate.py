"""Translate raw texts with an exported translator SavedModel.

    python -m apps.translate exported_models/translator "El perro azul." "Buenos días"
    python -m apps.translate exported_models/translator/3 < texts.txt     # one text per line
    python -m apps.translate exported_models/translator --greedy --json "some text"
    python -m apps.translate exported_models/translator --plot-attention "some text" \
        --out attention.png

MODEL is a version folder or a base folder (its newest version is used).
Translations come from the beam search of `serving_default` (the export's
beam width and length penalty, see assets.extra/translator.json), or with
--greedy from the `greedy` signature. Only `tensorflow` and `tensorflow_text`
are needed to load the model; this app uses the project for finding versions
and drawing plots.
"""

import json
import os
import sys

from apps.common import inference_parser, layer_index, load_export, run_inference_app

CONFIG_FILE = "translator.json"


def build_parser():
    parser = inference_parser(
        prog="python -m apps.translate",
        description=__doc__,
        texts_help="texts to translate (default: one per line from stdin)",
        batch_size=32,
        plot_help="draw the decoder's cross-attention for TEXT instead of translating",
        layer_help="decoder block to draw, 0-based; negative counts from the last (default -1)",
    )
    parser.add_argument(
        "--greedy",
        action="store_true",
        help="greedy decoding (the `greedy` signature) instead of beam search",
    )
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
        raise ValueError(
            f"The `{name}` signature has no `translation` output (is it a translator?)."
        )


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


def plot_attention(version_dir, model, text, out_path, layer):
    import numpy as np
    import tensorflow as tf

    from keras_transformer import plots

    if "attention" not in model.signatures:
        raise ValueError("This export has no `attention` signature (is it a translator?).")
    outputs = model.signatures["attention"](text=tf.constant([text], tf.string))
    if "cross_attention" not in outputs:
        raise ValueError(
            "The `attention` signature has no `cross_attention` output (is it a translator?)."
        )

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
        weights,
        target_tokens,
        source_tokens,
        out_path,
        title=f"Decoder block {layer} cross-attention (greedy translation)",
    )
    return out_path


def print_translations(args, version_dir, model, config, texts):
    check_signature(model, signature_name(args.greedy))
    if not args.json:
        print(f"Model: {version_dir}", file=sys.stderr)
    for text, translation in translate(model, texts, args.batch_size, greedy=args.greedy):
        print_translation(text, translation, args.json)


def main(argv=None):
    return run_inference_app(build_parser(), argv, load_model, plot_attention, print_translations)


if __name__ == "__main__":
    sys.exit(main())
