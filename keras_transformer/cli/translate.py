"""Translate raw texts with an exported translator (a SavedModel, LiteRT or ONNX export).

    keras-transformer translate exported_models/translator "El perro azul." "Buenos días"
    keras-transformer translate exported_models/translator/3 < texts.txt     # one text per line
    keras-transformer translate exported_models/translator --greedy --json "some text"
    keras-transformer translate exported_models/translator --num-translations 3 "El perro azul."
    keras-transformer translate exported_models/translator --sample --temperature 0.8 --top-p 0.9 \
        --seed 7 "El perro azul."
    keras-transformer translate exported_models/translator --plot-attention "some text" \
        --out attention.png

MODEL is a version folder or a base folder (its newest version is used).
Translations come from the beam search of `serving_default` (the export's
beam width and length penalty, see assets.extra/translator.json), or with
--greedy from the `greedy` signature. Any of --beam-width, --num-translations,
--sample, --temperature, --top-k, --top-p and --seed decode with the
`translate` signature instead (the others at their defaults, which answer as
`serving_default`; their ranges are in translator.json); with
--num-translations K above 1 each text gets K lines, "score<TAB>translation",
best first, and a blank line after them. Only `tensorflow` and `tensorflow_text`
are needed to load the model; this app uses the project for finding versions
and drawing plots. A LiteRT or ONNX export (`keras-transformer export --format`)
decodes greedily only, through its runtime, with no TensorFlow.
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
from keras_transformer.export.controls import (
    CONFIG_FILE,
    CONTROLLED_SIGNATURE,
    ControlError,
    complete_controls,
)

# The `translate` signature's inputs, by the flags that set them.
CONTROL_FLAGS = {
    "beam_width": "--beam-width",
    "num_translations": "--num-translations",
    "sampling": "--sample",
    "temperature": "--temperature",
    "top_k": "--top-k",
    "top_p": "--top-p",
    "seed": "--seed",
}


def build_parser():
    parser = inference_parser(
        prog="keras-transformer translate",
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
    controls = parser.add_argument_group(
        "decoding per request (the `translate` signature; defaults answer as serving_default)"
    )
    controls.add_argument(
        "--beam-width", type=int, help="hypotheses kept, 1 to the export's beam width"
    )
    controls.add_argument(
        "--num-translations",
        type=int,
        metavar="K",
        help="translations printed per text with their scores, best first; 1 to the beam width",
    )
    controls.add_argument(
        "--sample",
        dest="sampling",
        action="store_true",
        default=None,
        help="draw the tokens instead of searching (reproducible with --seed)",
    )
    controls.add_argument("--temperature", type=float, help="with --sample, above 0 (default 1)")
    controls.add_argument(
        "--top-k", type=int, help="with --sample, draw from the K likeliest tokens (0: all)"
    )
    controls.add_argument(
        "--top-p", type=float, help="with --sample, the probability mass drawn from, in (0, 1]"
    )
    controls.add_argument("--seed", type=int, help="with --sample, the random stream (default 0)")
    return parser


def requested_controls(args):
    """{input name: value} of the control flags given."""
    return {name: getattr(args, name) for name in CONTROL_FLAGS if getattr(args, name) is not None}


def checked_controls(config, given, greedy=False):
    """Every control of the export's `translate` signature: `given`, the defaults for the
    others; a `ValueError` naming the flag and its range for a value out of it."""
    controls = config.get("request_controls")
    if not controls:
        raise ValueError(
            f"This export has no `{CONTROLLED_SIGNATURE}` signature for "
            f"{', '.join(CONTROL_FLAGS[name] for name in given)} (export it again)."
        )
    if greedy:
        raise ValueError(
            f"--greedy does not combine with {', '.join(CONTROL_FLAGS[name] for name in given)}; "
            "--beam-width 1 is greedy decoding."
        )
    try:
        return complete_controls(given, controls, spell=CONTROL_FLAGS.get)
    except ControlError as error:
        raise ValueError(f"{error} (the ranges are in {CONFIG_FILE})") from None


def load_model(path):
    """The newest version under `path` (or `path` itself), with its decoding settings: a
    loaded SavedModel, or the runtime of a LiteRT or ONNX export (settings None)."""
    if export_format(path) != "saved_model":
        version_dir, runtime = load_runtime(path, "translator")
        return version_dir, runtime, None
    version_dir, model = load_export(path)
    config_path = os.path.join(version_dir, "assets.extra", CONFIG_FILE)
    config = {}
    if os.path.exists(config_path):
        with open(config_path, encoding="utf-8") as config_file:
            config = json.load(config_file)
    return version_dir, model, config


def signature_name(greedy):
    return "greedy" if greedy else "serving_default"


def check_signature(model, name, output="translation"):
    if name not in model.signatures:
        raise ValueError(f"This export has no `{name}` signature (is it a translator?).")
    outputs = model.signatures[name].structured_outputs
    if output not in outputs:
        raise ValueError(f"The `{name}` signature has no `{output}` output (is it a translator?).")


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


def translate_controlled(model, texts, batch_size, controls):
    """Yields `(text, translations, scores)` in order, best first, from the `translate`
    signature with `controls` (every one of its inputs but `text`)."""
    import tensorflow as tf

    check_signature(model, CONTROLLED_SIGNATURE, output="translations")
    signature = model.signatures[CONTROLLED_SIGNATURE]
    specs = signature.structured_input_signature[1]
    arguments = {name: tf.constant(value, specs[name].dtype) for name, value in controls.items()}
    for start in range(0, len(texts), batch_size):
        batch = texts[start : start + batch_size]
        outputs = signature(text=tf.constant(batch, tf.string), **arguments)
        for text, translations, scores in zip(
            batch, outputs["translations"].numpy(), outputs["scores"].numpy()
        ):
            yield (
                text,
                [translation.decode("utf-8", errors="replace") for translation in translations],
                [float(score) for score in scores],
            )


def print_controlled(text, translations, scores, as_json):
    if as_json:
        print(
            json.dumps(
                {
                    "text": text,
                    "translation": translations[0],
                    "translations": translations,
                    "scores": scores,
                },
                ensure_ascii=False,
            )
        )
    elif len(translations) == 1:
        print(translations[0])
    else:
        for translation, score in zip(translations, scores):
            print(f"{score:.4f}\t{translation}")
        print()


def print_translation(text, translation, as_json):
    if as_json:
        print(json.dumps({"text": text, "translation": translation}, ensure_ascii=False))
        return
    print(translation)


def plot_attention(version_dir, model, text, out_path, layer):
    import numpy as np
    import tensorflow as tf

    from keras_transformer import plots

    if not hasattr(model, "signatures"):
        raise ValueError(
            f"{version_dir} is a {export_format(version_dir)} export, which has no attention to "
            "draw: plot the SavedModel's (keras-transformer export without --format)."
        )
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
    given = requested_controls(args)
    if config is None:
        translate_with_runtime(args, version_dir, model, given, texts)
        return
    if given:
        controls = checked_controls(config, given, greedy=args.greedy)
        check_signature(model, CONTROLLED_SIGNATURE, output="translations")
    else:
        check_signature(model, signature_name(args.greedy))
    if not args.json:
        print(f"Model: {version_dir}", file=sys.stderr)
    if given:
        for text, translations, scores in translate_controlled(
            model, texts, args.batch_size, controls
        ):
            print_controlled(text, translations, scores, args.json)
        return
    for text, translation in translate(model, texts, args.batch_size, greedy=args.greedy):
        print_translation(text, translation, args.json)


def translate_with_runtime(args, version_dir, runtime, given, texts):
    """Greedy translations from a LiteRT or ONNX export's runtime: its only decoding."""
    if given:
        flags = ", ".join(CONTROL_FLAGS[name] for name in given)
        raise ValueError(
            f"{version_dir} is a {export_format(version_dir)} export, which decodes greedily "
            f"only: drop {flags}, or use the SavedModel."
        )
    if not args.json:
        print(f"Model: {version_dir} (greedy decoding)", file=sys.stderr)
    for start in range(0, len(texts), args.batch_size):
        batch = texts[start : start + args.batch_size]
        for text, translation in zip(batch, runtime.translate(batch)):
            print_translation(text, translation, args.json)


def main(argv=None):
    return run_inference_app(build_parser(), argv, load_model, plot_attention, print_translations)


if __name__ == "__main__":
    sys.exit(main())
