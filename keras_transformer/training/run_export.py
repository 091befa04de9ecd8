"""Exporting a finished run folder of either task: its `model.keras`, vocabularies and settings
become the SavedModel of `keras_transformer.export`'s `export_classifier` /
`export_translator`, or their LiteRT or ONNX counterparts, optionally int8.

The one way a run is exported: `keras-transformer export RUN_DIR` and the training
apps' `--export-dir` both call `export_run`. It reads only files, so a run
trained on any Keras backend (JAX on a machine without TensorFlow) exports here
under TensorFlow. The model loads without its compile state: the optimizer and
the loss are training's, not the export's.
"""

import dataclasses
import importlib
import json
import os
import zipfile

from keras_transformer.data.sources import one_line
from keras_transformer.training.classifier.settings import ClassifierSettings
from keras_transformer.training.runs import METRICS_FILE, SETTINGS_FILE, RunFolder
from keras_transformer.training.translator.settings import TranslatorSettings
from keras_transformer.training.translator.tokenizing import run_tokenizers

CLASSIFIER = "classifier"
TRANSLATOR = "translator"
MODEL_FILE = "model.keras"  # written when a run finished, with the kept epoch's weights
BEST_CHECKPOINT = os.path.join("checkpoints", "best.keras")  # the kept epoch so far
CLASSIFIER_VOCABULARY_FILE = "vocabulary.txt"
TRAINING_APPS = {CLASSIFIER: "train-classifier", TRANSLATOR: "train-translator"}


class RunFolderError(ValueError):
    """A run folder that cannot be exported; the message names the file at fault."""


@dataclasses.dataclass(frozen=True)
class SavedRun:
    """What a run folder's `settings.json` says: which task, with which settings."""

    run_dir: str
    task: str  # CLASSIFIER or TRANSLATOR
    settings: object  # a ClassifierSettings or TranslatorSettings
    saved: dict  # the whole settings.json (class_names, data, languages, ...)

    def file(self, name):
        return os.path.join(self.run_dir, name)


@dataclasses.dataclass(frozen=True)
class ExportedRun:
    task: str
    version_dir: str  # EXPORT_DIR/N
    export_format: str = "saved_model"  # one of keras_transformer.export.EXPORT_FORMATS


def read_run(run_dir):
    """The `SavedRun` of `run_dir`, from its `settings.json`.

    The classifier's settings name its `class_names`, the translator's not;
    the settings must then be the fields of that task's settings class.

    Raises:
        RunFolderError: no such folder, no or unreadable `settings.json`, or
            settings of neither task.
    """
    run_dir = os.fspath(run_dir)
    if not os.path.isdir(run_dir):
        raise RunFolderError(f"{run_dir} is not a folder: expected a run folder of a training app.")
    settings_path = os.path.join(run_dir, SETTINGS_FILE)
    if not os.path.isfile(settings_path):
        raise RunFolderError(
            f"{run_dir} is not a run folder: it has no {SETTINGS_FILE}, which a training app "
            "writes first."
        )
    try:
        with open(settings_path, encoding="utf-8") as settings_file:
            saved = json.load(settings_file)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RunFolderError(f"Cannot read {settings_path}: {one_line(error)}") from error
    if not isinstance(saved, dict) or not isinstance(saved.get("settings"), dict):
        raise RunFolderError(
            f'{settings_path} has no "settings" object: it is not a training run\'s settings.'
        )
    task = CLASSIFIER if "class_names" in saved else TRANSLATOR
    settings_class = ClassifierSettings if task == CLASSIFIER else TranslatorSettings
    unknown = set(saved["settings"]) - {field.name for field in dataclasses.fields(settings_class)}
    if unknown:
        has = (
            "class_names, a classifier's,"
            if task == CLASSIFIER
            else "no class_names, which a classifier's has,"
        )
        raise RunFolderError(
            f"{settings_path} is neither a classifier's nor a translator's run settings: it has "
            f"{has} and settings a {task} does not have: {', '.join(sorted(unknown))}."
        )
    if task == TRANSLATOR:
        return SavedRun(run_dir, task, TranslatorSettings(**saved["settings"]), saved)
    names = saved["class_names"]
    if (
        not isinstance(names, list)
        or len(names) < 2
        or not all(isinstance(name, str) for name in names)
    ):
        raise RunFolderError(
            f"{settings_path}: class_names must be a list of at least two names, got {names!r}."
        )
    return SavedRun(run_dir, task, ClassifierSettings(**saved["settings"]), saved)


def export_run(
    run_dir,
    export_dir,
    model_file=None,
    beam_width=4,
    length_penalty=0.6,
    export_format="saved_model",
    quantize=None,
):
    """Exports `run_dir` to `export_dir/N` (N one above the newest version there).

    Args:
        run_dir: a run folder written by `train_classifier` or `train_translator`.
        export_dir: the model's base path, e.g. `exported_models/classifier`.
        model_file: the `.keras` file to export instead of `RUN_DIR/model.keras`
            (e.g. an unfinished run's `checkpoints/best.keras`).
        beam_width, length_penalty: the translator's `serving_default` beam
            search (see `export_translator`); a classifier and the formats
            other than the SavedModel (greedy decoding) ignore them.
        export_format: one of `keras_transformer.export.EXPORT_FORMATS`:
            `"saved_model"` (`export_classifier` / `export_translator`),
            `"litert"` (`keras_transformer.export.litert`) or `"onnx"`
            (`keras_transformer.export.onnx`).
        quantize: None, or `"int8"`: Keras' int8 weights
            (`keras_transformer.export.quantize`) for a SavedModel, each
            format's own int8 conversion for the others.

    Returns:
        An `ExportedRun`.

    Raises:
        RunFolderError: the folder, its settings, a vocabulary or the model
            file is missing, unreadable, or disagrees with the others.
        ValueError: an unknown `export_format` or `quantize`.
    """
    from keras_transformer.export import EXPORT_FORMATS, QUANTIZATION_MODES

    if export_format not in EXPORT_FORMATS:
        raise ValueError(
            f"Unknown export format {export_format!r}: choose one of {', '.join(EXPORT_FORMATS)}."
        )
    if quantize is not None and quantize not in QUANTIZATION_MODES:
        raise ValueError(
            f"Unknown quantization {quantize!r}: choose one of {', '.join(QUANTIZATION_MODES)}."
        )
    run = read_run(run_dir)
    model_path = os.fspath(model_file) if model_file is not None else run.file(MODEL_FILE)
    if not os.path.isfile(model_path):
        raise RunFolderError(_missing_model_message(run, model_path, model_file is None))
    if run.task == CLASSIFIER:
        version_dir = _export_classifier_run(run, model_path, export_dir, export_format, quantize)
        return ExportedRun(CLASSIFIER, version_dir, export_format)
    version_dir = _export_translator_run(
        run, model_path, export_dir, beam_width, length_penalty, export_format, quantize
    )
    return ExportedRun(TRANSLATOR, version_dir, export_format)


def _builder(task, export_format, quantize, model):
    """`(export function, its extra arguments)` for the task in `export_format`; quantizes
    `model` first where the format's int8 is Keras' (the SavedModel)."""
    if export_format == "saved_model":
        if quantize is not None:
            from keras_transformer.export.quantize import quantize_int8

            quantize_int8(model, quantize)
        module = importlib.import_module(f"keras_transformer.export.{task}")
        return getattr(module, f"export_{task}"), {}
    module = importlib.import_module(f"keras_transformer.export.{export_format}")
    return getattr(module, f"export_{task}_{export_format}"), {"quantize": quantize}


def _missing_model_message(run, model_path, is_final_model):
    if not is_final_model:
        return f"No model file {model_path}."
    resume = (
        f"keras-transformer {TRAINING_APPS[run.task]} --data {run.saved.get('data', 'SOURCE')} "
        f"--run-dir {run.run_dir} --resume (with the flags it started with)"
    )
    message = (
        f"The run in {run.run_dir} has not finished (no {model_path}): resume it with {resume}"
    )
    best = run.file(BEST_CHECKPOINT)
    if os.path.isfile(best):
        message += (
            f", or export its best epoch so far with keras-transformer export {run.run_dir} "
            f"--model-file {best}"
        )
    return message + "."


def _export_classifier_run(run, model_path, export_dir, export_format, quantize):
    from keras_transformer.models import PretrainedClassifier, TransformerClassifier
    from keras_transformer.training.classifier.tokenizing import (
        encoding_arguments,
        run_tokenizer,
    )

    tokenizer = _tokenizers(
        lambda: run_tokenizer(run.settings, run.file(CLASSIFIER_VOCABULARY_FILE))
    )
    model_class = TransformerClassifier if run.settings.pretrained is None else PretrainedClassifier
    model = load_run_model(model_path, model_class, run)
    _check_vocabulary_size(model.vocabulary_size, tokenizer, model_path, "")
    class_names = run.saved["class_names"]
    if len(class_names) != model.num_classes:
        raise RunFolderError(
            f"{run.file(SETTINGS_FILE)} names {len(class_names)} classes but {model_path} "
            f"has {model.num_classes} outputs."
        )
    export, options = _builder(CLASSIFIER, export_format, quantize, model)
    return export(
        model,
        tokenizer,
        class_names,
        export_dir,
        mix=_chosen_mix(run),
        **encoding_arguments(run.settings),
        **options,
    )


def _chosen_mix(run):
    """`(transformer_weight, bag_weight)` that the run's `metrics.json` records, or None."""
    try:
        with open(run.file(METRICS_FILE), encoding="utf-8") as metrics_file:
            combination = json.load(metrics_file).get("bag_of_ngrams")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not combination:
        return None
    return combination["transformer_weight"], combination.get("bag_weight", 1.0)


def _export_translator_run(
    run, model_path, export_dir, beam_width, length_penalty, export_format, quantize
):
    from keras_transformer.models import Seq2SeqTransformer

    source_tokenizer, target_tokenizer = _tokenizers(
        lambda: run_tokenizers(RunFolder(run.run_dir), run.settings)
    )
    model = load_run_model(model_path, Seq2SeqTransformer, run)
    _check_vocabulary_size(model.source_vocabulary_size, source_tokenizer, model_path, "source ")
    _check_vocabulary_size(model.target_vocabulary_size, target_tokenizer, model_path, "target ")
    export, options = _builder(TRANSLATOR, export_format, quantize, model)
    if export_format == "saved_model":
        options = dict(
            beam_width=beam_width,
            length_penalty=length_penalty,
            source_language=run.saved.get("source_language"),
            target_language=run.saved.get("target_language"),
        )
    return export(
        model,
        source_tokenizer,
        target_tokenizer,
        export_dir,
        max_output_length=run.settings.sequence_length,
        **options,
    )


def _tokenizers(make):
    """`make()`, with a missing, unreadable or foreign vocabulary file as a `RunFolderError`."""
    try:
        return make()
    except (
        OSError,
        UnicodeDecodeError,
    ) as error:  # FileNotFoundError included: its message names the file
        raise RunFolderError(f"Cannot read the run's vocabulary: {one_line(error)}") from error
    except ValueError as error:  # not one of our vocabularies; the message names the file
        raise RunFolderError(str(error)) from error


def _check_vocabulary_size(model_size, tokenizer, model_path, side):
    if tokenizer.vocabulary_size != model_size:
        raise RunFolderError(
            f"{tokenizer.vocabulary_path} has {tokenizer.vocabulary_size} tokens but {model_path} "
            f"expects a {side}vocabulary of {model_size}."
        )


def load_run_model(model_path, model_class, run):
    """The `model_class` in `model_path`, without its compile state (see the module docstring).

    Raises:
        RunFolderError: the file is not a Keras model, or not a `model_class`.
    """
    import keras

    import keras_transformer.models  # noqa: F401  registers the model and layer classes

    if not zipfile.is_zipfile(model_path):
        raise RunFolderError(f"{model_path} is not a Keras model file (.keras, a zip archive).")
    try:
        model = keras.models.load_model(model_path, compile=False)
    except (ValueError, TypeError, KeyError, OSError, zipfile.BadZipFile) as error:
        raise RunFolderError(f"Cannot load {model_path}: {one_line(error)}") from error
    if not isinstance(model, model_class):
        raise RunFolderError(
            f"{model_path} holds a {type(model).__name__}, but {run.file(SETTINGS_FILE)} is a "
            f"{run.task}'s (a {model_class.__name__})."
        )
    return model
