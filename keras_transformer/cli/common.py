"""What the inference apps (`predict`, `translate`) share: their flags, loading
an export, reading texts, choosing a layer to plot, and the flow of `main`."""

import argparse
import importlib
import os
import sys

from keras_transformer.export.litert_runtime import MANIFEST_FILE as LITERT_MANIFEST
from keras_transformer.export.onnx_runtime import ONNX_MODEL_FILE
from keras_transformer.export.versions import latest_version_dir, version_folders

# The file that tells each format's version folder (`keras-transformer export --format`).
FORMAT_FILES = {"litert": LITERT_MANIFEST, "onnx": ONNX_MODEL_FILE}
# Per format other than the SavedModel and per task: the runtime class that answers from it
# with no TensorFlow (module, class).
RUNTIMES = {
    ("litert", "classifier"): ("keras_transformer.export.litert_runtime", "LiteRTClassifier"),
    ("litert", "translator"): ("keras_transformer.export.litert_runtime", "LiteRTTranslator"),
    ("onnx", "classifier"): ("keras_transformer.export.onnx_runtime", "OnnxClassifier"),
    ("onnx", "translator"): ("keras_transformer.export.onnx_runtime", "OnnxTranslator"),
}


def export_format(path):
    """ "litert" or "onnx" where `path` (or its newest version) is such an export; else
    "saved_model" (and `load_export` says what is wrong, if anything)."""
    folders = version_folders(path)
    newest = os.path.join(path, folders[max(folders)]) if folders else None
    for name, marker in FORMAT_FILES.items():
        if any(os.path.isfile(os.path.join(folder, marker)) for folder in (path, newest) if folder):
            return name
    return "saved_model"


def load_runtime(path, task):
    """`(version folder, runtime)` for a LiteRT or ONNX export of `task` at `path`."""
    module_name, class_name = RUNTIMES[export_format(path), task]
    runtime = getattr(importlib.import_module(module_name), class_name)(path)
    return runtime.version_dir, runtime


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


def inference_parser(prog, description, texts_help, batch_size, plot_help, layer_help):
    """A parser with MODEL, TEXTS, `--json`, `--batch-size`, `--plot-attention`, `--out` and
    `--layer`."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", help="exported model: base folder or version folder")
    parser.add_argument("texts", nargs="*", help=texts_help)
    parser.add_argument("--json", action="store_true", help="print one JSON object per text")
    parser.add_argument("--batch-size", type=int, default=batch_size)
    parser.add_argument("--plot-attention", metavar="TEXT", default=None, help=plot_help)
    parser.add_argument("--out", default="attention.png", help="PNG path for --plot-attention")
    parser.add_argument("--layer", type=int, default=-1, help=layer_help)
    return parser


def run_inference_app(parser, argv, load_model, plot_attention, answer):
    """The `main` of an inference app; bad input exits 2 with one `error:` line.

    Args:
        parser: from `inference_parser`.
        argv: the command line (None: `sys.argv[1:]`).
        load_model: `(path) -> (version folder, loaded model, extra)`.
        plot_attention: `(version folder, model, text, out path, layer) -> out path`.
        answer: `(args, version folder, model, extra, texts)`, prints the
            answers; may raise `ValueError`.
    """
    # Intermixed: texts may come after options (`MODEL --json "text"`).
    args = parser.parse_intermixed_args(argv)
    if args.batch_size < 1:
        parser.exit(2, f"error: --batch-size must be at least 1, got {args.batch_size}\n")
    try:
        version_dir, model, extra = load_model(args.model)
    except (FileNotFoundError, OSError) as error:
        parser.exit(2, f"error: {error}\n")
    try:
        if args.plot_attention is not None:
            path = plot_attention(version_dir, model, args.plot_attention, args.out, args.layer)
            print(f"Attention plot written to {path}")
            return 0
        answer(args, version_dir, model, extra, texts_or_stdin(args.texts))
    except ValueError as error:
        parser.exit(2, f"error: {error}\n")
    return 0
