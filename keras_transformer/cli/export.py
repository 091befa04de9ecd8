"""Export a finished training run as a SavedModel (or for LiteRT or ONNX), under TensorFlow.

    keras-transformer export runs/classifier --export-dir exported_models/classifier
    keras-transformer export runs/translator --beam-width 8
    keras-transformer export runs/translator --model-file runs/translator/checkpoints/best.keras
    keras-transformer export runs/classifier --format litert --export-dir exported_models/litert
    keras-transformer export runs/classifier --format onnx --quantize int8 --export-dir onnx-int8

RUN_DIR is the --run-dir of `train-classifier` or `train-translator`,
trained on any Keras backend (e.g. JAX on a machine without TensorFlow): its
settings.json tells the task, its vocabulary file(s) and model.keras (the kept
epoch's weights) make the same SavedModel, with the same signatures, as the
training app's own export. It goes to EXPORT_DIR/N, N one above the newest
version there. `--format litert` and `--format onnx` write files that run with
no TensorFlow (docs/deploy.md says what each takes, returns and needs).
"""

import argparse
import importlib.util
import os
import subprocess
import sys

from keras_transformer.export import EXPORT_FORMATS, QUANTIZATION_MODES

DEFAULT_BEAM_WIDTH = 4
DEFAULT_LENGTH_PENALTY = 0.6
# What each `--format` writes, as the lines printed after an export name it.
FORMAT_NAMES = {"saved_model": "SavedModel", "litert": "LiteRT model", "onnx": "ONNX model"}


def add_translator_export_flags(group):
    """`--beam-width`, `--length-penalty`: the translator export's beam search."""
    group.add_argument(
        "--beam-width",
        type=int,
        default=DEFAULT_BEAM_WIDTH,
        help=f"of the export's serving_default (default {DEFAULT_BEAM_WIDTH})",
    )
    group.add_argument(
        "--length-penalty",
        type=float,
        default=DEFAULT_LENGTH_PENALTY,
        help="GNMT length penalty alpha of the export's beam search "
        f"(default {DEFAULT_LENGTH_PENALTY})",
    )


def check_translator_export_flags(args):
    """Raises ValueError for a bad `add_translator_export_flags` value (before hours of
    training)."""
    if args.beam_width < 1:
        raise ValueError(f"--beam-width must be at least 1, got {args.beam_width}.")


def export_run_and_say(run_dir, export_dir, **options):
    """`export_run`, then the lines every app prints about the new version; returns its folder.

    A run trained under another Keras backend (JAX) exports in a TensorFlow
    process of `keras-transformer export` (a SavedModel is traced by TensorFlow; a backend
    is fixed for a process once Keras is imported), or, where TensorFlow is
    not installed, not at all: the run folder exports later, elsewhere.
    Returns None then.
    """
    import keras

    if keras.backend.backend() != "tensorflow":
        _export_in_tensorflow_process(run_dir, export_dir, **options)
        return None
    from keras_transformer.training.run_export import CLASSIFIER, export_run

    exported = export_run(run_dir, export_dir, **options)
    print(f"Exported {FORMAT_NAMES[exported.export_format]}: {exported.version_dir}")
    if exported.task == CLASSIFIER:
        print(f'Try it: keras-transformer predict {export_dir} "your text here"')
    else:
        print(f'Try it: keras-transformer translate {export_dir} "your sentence here"')
    return exported.version_dir


def _export_in_tensorflow_process(
    run_dir,
    export_dir,
    model_file=None,
    beam_width=DEFAULT_BEAM_WIDTH,
    length_penalty=DEFAULT_LENGTH_PENALTY,
    export_format="saved_model",
    quantize=None,
):
    command = f"keras-transformer export {run_dir} --export-dir {export_dir}"
    if importlib.util.find_spec("tensorflow") is None:
        print(
            f"TensorFlow is not installed here, so the run is not exported. Where it is: {command}",
            flush=True,
        )
        return
    argv = [
        sys.executable,
        "-m",
        "keras_transformer.cli",
        "export",
        os.fspath(run_dir),
        "--export-dir",
        os.fspath(export_dir),
        "--beam-width",
        str(beam_width),
        "--length-penalty",
        str(length_penalty),
    ]
    if model_file is not None:
        argv += ["--model-file", os.fspath(model_file)]
    argv += ["--format", export_format] + (["--quantize", quantize] if quantize else [])
    print(f"Exporting under TensorFlow: {command}", flush=True)
    sys.stdout.flush()
    exported = subprocess.run(argv, env={**os.environ, "KERAS_BACKEND": "tensorflow"}, check=False)
    if exported.returncode:
        raise SystemExit(
            f"error: the export failed (exit status {exported.returncode}); the run folder is "
            f"complete, so {command} can try again."
        )


def default_export_dir(task, export_format):
    """exported_models/TASK for a SavedModel, exported_models/TASK-FORMAT otherwise."""
    name = task if export_format == "saved_model" else f"{task}-{export_format}"
    return os.path.join("exported_models", name)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-transformer export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "run_dir", metavar="RUN_DIR", help="the run folder of a finished training run"
    )
    parser.add_argument(
        "--export-dir",
        default=None,
        help="the model's base folder (default exported_models/TASK, TASK classifier or "
        "translator by the run's task, and exported_models/TASK-FORMAT for --format litert "
        "or onnx, so that a server of the SavedModels never meets another format's version)",
    )
    parser.add_argument(
        "--model-file",
        default=None,
        metavar="PATH",
        help="the .keras file to export (default RUN_DIR/model.keras, written when the run "
        "finished; an unfinished run's RUN_DIR/checkpoints/best.keras is its best epoch "
        "so far)",
    )
    parser.add_argument(
        "--format",
        dest="export_format",
        choices=EXPORT_FORMATS,
        default="saved_model",
        help="saved_model: a TensorFlow SavedModel taking raw strings (the default); litert: "
        ".tflite files for LiteRT; onnx: an ONNX graph for ONNX Runtime (docs/deploy.md)",
    )
    parser.add_argument(
        "--quantize",
        choices=QUANTIZATION_MODES,
        default=None,
        help="int8: Keras' int8 weights in a SavedModel, dynamic-range int8 in the others "
        "(default: float32)",
    )
    add_translator_export_flags(
        parser.add_argument_group(
            "translator runs",
            "a classifier's run ignores these, and so do LiteRT and ONNX (greedy decoding)",
        )
    )
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if "keras" not in sys.modules:
        # SavedModels are TensorFlow graphs, whichever backend trained the run.
        os.environ["KERAS_BACKEND"] = "tensorflow"
    try:
        check_translator_export_flags(args)
    except ValueError as error:
        parser.exit(2, f"error: {error}\n")
    # Imported late so that `--help` and bad flags answer without loading TensorFlow.
    from keras_transformer.training.run_export import RunFolderError, read_run

    try:
        export_dir = args.export_dir or default_export_dir(
            read_run(args.run_dir).task, args.export_format
        )
        export_run_and_say(
            args.run_dir,
            export_dir,
            model_file=args.model_file,
            beam_width=args.beam_width,
            length_penalty=args.length_penalty,
            export_format=args.export_format,
            quantize=args.quantize,
        )
    except (RunFolderError, ValueError) as error:
        parser.exit(2, f"error: {error}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
