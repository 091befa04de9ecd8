"""LiteRT (`.tflite`) exports of the classifier and the translator, in versioned folders.

Each export is a version folder `BASE/N/`, written all or nothing as the
SavedModels are (`write_new_version`), holding `.tflite` files, the tokenizer
files that give their input ids in plain Python, and a manifest,
`litert.json`, saying what each file takes and returns.

The models are traced by the SavedModel builders' own signature code
(`export.classifier`, `export.translator`), written to a temporary SavedModel
and converted by `tf.lite.TFLiteConverter.from_saved_model`, which freezes the
weights into the file. `keras_transformer.export.litert_runtime` runs the
token-id files with NumPy and `ai_edge_litert` alone.
"""

import json
import os
import re
import tempfile
import warnings
from collections.abc import Callable
from typing import NamedTuple

import keras
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow.lite.python.convert_phase import ConverterError

from keras_transformer.export.classifier import _ClassifierSignatures, checked_export_parts
from keras_transformer.export.litert_runtime import (
    CLASS_NAMES_FILE,
    CLASSIFIER_FILE,
    CLASSIFIER_TEXT_FILE,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST_FILE,
    SIGNATURE,
    SOURCE_TOKENIZER_DIR,
    TARGET_TOKENIZER_DIR,
    TEXT_SIGNATURE,
    TOKENIZER_DIR,
    TRANSLATOR_FILE,
)
from keras_transformer.export.translator import _check_arguments, _TranslatorSignatures
from keras_transformer.export.versions import write_new_version
from keras_transformer.layers.decoder import portable_cache_writes
from keras_transformer.text.padding import trim_shared_padding
from keras_transformer.text.python_tokenizer import write_tokenizer_files
from keras_transformer.text.vocabulary import CLS, SEP, UNK

# `quantize` values: None keeps float32 weights; "int8" is the converter's
# dynamic-range quantization (int8 weights, float32 activations).
QUANTIZATIONS = (None, "int8")
# What a raw-string file needs beside the builtin ops: tensorflow-text's kernels.
TEXT_RUNTIME = "tensorflow + tensorflow_text (tflite_registrar.SELECT_TFTEXT_OPS)"
TOKEN_ID_RUNTIME = "ai_edge_litert (numpy only)"


class _Endpoint(NamedTuple):
    """One `.tflite` file's signature: its key, the function (one input) and that input."""

    signature: str
    function: Callable
    input_spec: tf.TensorSpec
    text_ops: bool = False  # uses tensorflow-text's tokenizer ops


class LiteRTConversionError(ValueError):
    """The LiteRT converter refused a model; the message names the ops it has no kernel for."""


def export_classifier_litert(
    model,
    tokenizer,
    class_names,
    base_dir,
    add_cls=None,
    add_sep=False,
    mix=None,
    quantize=None,
):
    """Writes the classifier as LiteRT files into `base_dir/VERSION/` and returns that folder.

    The folder holds:

    * `classifier.tflite`: signature `serving_default`, input `token_ids`
      (int32 `[None, sequence_length]`, 0-padded, as `tokenizer/` encodes
      them) -> `probabilities` (float32 `[None, num_classes]`) and `label`
      (string `[None]`). Builtin ops only: runs in `ai_edge_litert`'s
      interpreter with no TensorFlow (`litert_runtime.LiteRTClassifier`).
    * `classifier_text.tflite`: signature `text`, input `text` (string `[None]`) -> the same
      outputs, tokenized inside by tensorflow-text's TFLite ops
      (`FastBertTokenizer`: `FastBertNormalize`, `FastWordpieceTokenize`); runs
      in TensorFlow's interpreter with `tensorflow_text.tflite_registrar.
      SELECT_TFTEXT_OPS` registered. Written only where those ops give
      `tokenizer`'s ids (a `WordPieceTokenizer` that lower-cases, or applies
      no normalization); the manifest says why it is missing otherwise.
    * `tokenizer/` (`vocabulary.txt`, `tokenizer.json`): `PythonWordPieceTokenizer`
      files giving the SavedModel tokenizer's ids in plain Python.
    * `class_names.txt`: one name a line, index = class id.
    * `litert.json`: the manifest: each file's runtime, inputs and outputs,
      `sequence_length`, `add_cls` / `add_sep`, `quantization` and the parts
      of the answer (as `classifier.json`).

    Where `mix` gives the Transformer weight 0, both files compute the bag of
    n-grams alone, as the SavedModel does.

    The raw-string file keeps a text's first tokens as the SavedModel does,
    but without its byte cut (runs of whitespace made one space, then 16
    bytes a token kept): the ids differ only for a text whose first
    `sequence_length` tokens span more than 16 bytes each on average.

    Args:
        model, tokenizer, class_names, base_dir, add_cls, add_sep, mix: as
            `export_classifier`.
        quantize: None (float32) or `"int8"`: dynamic-range quantization of
            both files' weights.

    Returns:
        The version folder, `base_dir/N`.

    Raises:
        ValueError: a bad `quantize`, class names that do not fit the model, or a
            `mix` the model does not match (as `export_classifier`).
        LiteRTConversionError: the converter refused the model; the message names
            the ops.
    """
    _check_quantize(quantize)
    add_cls, parts = checked_export_parts(model, class_names, add_cls, mix)
    fast_tokenizer, omitted = _fast_bert_tokenizer(tokenizer)
    signatures = _LiteRTClassifierSignatures(
        model, tokenizer, class_names, add_cls, add_sep, fast_tokenizer
    )
    # The bag alone where the Transformer's weight is 0, so that its weights stay out.
    tracked = model if parts["encoder"] else model.ngrams
    length = model.input_length
    outputs = {
        "probabilities": _spec("float32", [None, model.num_classes]),
        "label": _spec("string", [None]),
    }
    endpoints = {
        CLASSIFIER_FILE: _Endpoint(
            SIGNATURE,
            signatures.serve_token_ids
            if parts["encoder"]
            else signatures.serve_bag_alone_token_ids,
            tf.TensorSpec([None, length], tf.int32, name="token_ids"),
        )
    }
    files = {
        CLASSIFIER_FILE: {
            "runtime": TOKEN_ID_RUNTIME,
            "signature": SIGNATURE,
            "inputs": {"token_ids": _spec("int32", [None, length])},
            "outputs": outputs,
        }
    }
    if fast_tokenizer is not None:
        endpoints[CLASSIFIER_TEXT_FILE] = _Endpoint(
            TEXT_SIGNATURE,
            signatures.serve if parts["encoder"] else signatures.serve_bag_alone,
            tf.TensorSpec([None], tf.string, name="text"),
            text_ops=True,
        )
        files[CLASSIFIER_TEXT_FILE] = {
            "runtime": TEXT_RUNTIME,
            "signature": TEXT_SIGNATURE,
            "inputs": {"text": _spec("string", [None])},
            "outputs": outputs,
        }
    tracked = [tracked] if fast_tokenizer is None else [tracked, fast_tokenizer]
    flat_models = _convert(endpoints, tracked, quantize, "the classifier")
    manifest = {
        **_manifest_header("classifier", quantize),
        "files": files,
        "sequence_length": length,
        "add_cls": bool(add_cls),
        "add_sep": bool(add_sep),
        "tokenizer": TOKENIZER_DIR,
        "class_names": CLASS_NAMES_FILE,
        "parts": parts,
    }
    if omitted:
        manifest["omitted"] = {CLASSIFIER_TEXT_FILE: omitted}

    def write(folder):
        for name, flat_model in flat_models.items():
            _write_bytes(folder, name, flat_model)
        write_tokenizer_files(tokenizer, os.path.join(folder, TOKENIZER_DIR))
        with open(os.path.join(folder, CLASS_NAMES_FILE), "w", encoding="utf-8") as names_file:
            names_file.writelines(f"{name}\n" for name in class_names)
        _write_manifest(folder, manifest)

    return write_new_version(base_dir, write, required_file=MANIFEST_FILE)


def export_translator_litert(
    model, source_tokenizer, target_tokenizer, base_dir, max_output_length=64, quantize=None
):
    """Writes the translator as one LiteRT file into `base_dir/VERSION/` and returns that folder.

    The folder holds:

    * `translator.tflite`: signature `serving_default`, input `source_ids`
      (int32 `[None, sequence_length]`, 0-padded, as `source_tokenizer/`
      encodes them) -> `token_ids` (int32 `[None, max_output_length]`): the
      greedy translation's target ids, `[END]` included, 0 after it. The
      encoder and the whole greedy decoding (`greedy_decode`'s `tf.while_loop`
      over the cached decoder, a LiteRT `WHILE` op) are inside; builtin ops
      only, so it runs in `ai_edge_litert`'s interpreter with no TensorFlow
      (`litert_runtime.LiteRTTranslator`, which reads the ids back as text).
    * `source_tokenizer/`, `target_tokenizer/`: `PythonWordPieceTokenizer` files.
    * `litert.json`: the manifest: the file's runtime, inputs and outputs,
      `sequence_length`, `max_output_length`, the `[START]` and `[END]` ids
      and `quantization`.

    Args:
        model: a built `Seq2SeqTransformer`.
        source_tokenizer, target_tokenizer: as `export_translator`.
        base_dir: the model's base path, e.g. `exported_models/translator_litert`.
        max_output_length: most target tokens generated, `[END]` included
            (capped at the model's `sequence_length`).
        quantize: None (float32) or `"int8"`: dynamic-range quantization.

    Returns:
        The version folder, `base_dir/N`.

    Raises:
        ValueError: a bad `quantize` or `max_output_length`, or tokenizers
            that do not fit the model.
        LiteRTConversionError: the converter refused the model; the message names
            the ops.
    """
    _check_quantize(quantize)
    _check_arguments(model, source_tokenizer, target_tokenizer, max_output_length, 1)
    signatures = _TranslatorSignatures(
        model,
        source_tokenizer,
        target_tokenizer,
        max_length=min(int(max_output_length), model.sequence_length),
        beam_width=1,
        length_penalty=0.0,
    )

    def greedy_token_ids(source_ids):
        return {"token_ids": signatures._greedy(source_ids)}

    # The decoder blocks' cache write is traced as a LiteRT builtin here only.
    with portable_cache_writes():
        flat_models = _convert(
            {
                TRANSLATOR_FILE: _Endpoint(
                    SIGNATURE,
                    greedy_token_ids,
                    tf.TensorSpec([None, model.sequence_length], tf.int32, name="source_ids"),
                )
            },
            [model],
            quantize,
            "the translator's greedy decoding",
        )
    manifest = {
        **_manifest_header("translator", quantize),
        "files": {
            TRANSLATOR_FILE: {
                "runtime": TOKEN_ID_RUNTIME,
                "signature": SIGNATURE,
                "inputs": {"source_ids": _spec("int32", [None, model.sequence_length])},
                "outputs": {"token_ids": _spec("int32", [None, signatures.max_length])},
                "decoding": "greedy",
            }
        },
        "sequence_length": model.sequence_length,
        "max_output_length": signatures.max_length,
        "start_id": signatures.start_id,
        "end_id": signatures.end_id,
        "source_tokenizer": SOURCE_TOKENIZER_DIR,
        "target_tokenizer": TARGET_TOKENIZER_DIR,
    }

    def write(folder):
        _write_bytes(folder, TRANSLATOR_FILE, flat_models[TRANSLATOR_FILE])
        write_tokenizer_files(source_tokenizer, os.path.join(folder, SOURCE_TOKENIZER_DIR))
        write_tokenizer_files(target_tokenizer, os.path.join(folder, TARGET_TOKENIZER_DIR))
        _write_manifest(folder, manifest)

    return write_new_version(base_dir, write, required_file=MANIFEST_FILE)


class _LiteRTClassifierSignatures(_ClassifierSignatures):
    """`export_classifier`'s signature functions, tokenizing with tensorflow-text's
    TFLite-convertible tokenizer, plus their token-id twins."""

    def __init__(self, model, tokenizer, class_names, add_cls, add_sep, fast_tokenizer):
        super().__init__(model, tokenizer, class_names, add_cls, add_sep)
        self.fast_tokenizer = fast_tokenizer

    def serve_token_ids(self, token_ids):
        probabilities = self.model(trim_shared_padding(token_ids), training=False)
        return self._answer(tf.cast(probabilities, tf.float32))

    def serve_bag_alone_token_ids(self, token_ids):
        logits = tf.cast(self.model.ngrams(trim_shared_padding(token_ids)), tf.float32)
        return self._answer(tf.nn.softmax(logits, axis=-1))

    def _encode(self, text, length):
        # `WordPieceTokenizer.encode`'s layout from ops LiteRT has kernels for: the
        # ragged-to-dense conversion cuts each text to `room` tokens, then [SEP]
        # goes after a text's last token and [CLS] before its first.
        room = length - int(self.add_cls) - int(self.add_sep)
        pieces = self.fast_tokenizer.tokenize(text)
        token_ids = tf.cast(pieces.to_tensor(default_value=0, shape=[None, room]), tf.int32)
        batch_size = tf.shape(token_ids)[0]
        if self.add_sep:
            lengths = tf.minimum(tf.cast(pieces.row_lengths(), tf.int32), room)
            token_ids = tf.pad(token_ids, [[0, 0], [0, 1]])
            is_end = tf.range(room + 1)[None, :] == lengths[:, None]
            token_ids = tf.where(is_end, self.tokenizer.token_id(SEP), token_ids)
        if self.add_cls:
            cls_column = tf.fill([batch_size, 1], self.tokenizer.token_id(CLS))
            token_ids = tf.concat([cls_column, token_ids], axis=1)
        return token_ids


def _fast_bert_tokenizer(tokenizer):
    """tensorflow-text's `FastBertTokenizer` giving `tokenizer`'s ids, and None; or None
    and why there is none.

    Its normalizer either lower-cases (NFKC case folding, NFD, accents removed:
    `WordPieceTokenizer`'s `lower_case`) or leaves the text as it is; it has no
    other Unicode normalization, and not Hugging Face's (`PretrainedTokenizer`).
    """
    from keras_transformer.text.pretrained import PretrainedTokenizer

    if isinstance(tokenizer, PretrainedTokenizer):
        return None, (
            "tensorflow-text's TFLite tokenizer ops have no Hugging Face BERT normalization "
            "(a PretrainedTokenizer's); tokenize with tokenizer/ and use classifier.tflite."
        )
    if not tokenizer.lower_case and tokenizer.normalization_form is not None:
        return None, (
            f"tensorflow-text's TFLite tokenizer ops have no {tokenizer.normalization_form} "
            "normalization without lower-casing; tokenize with tokenizer/ and use "
            "classifier.tflite."
        )
    fast_tokenizer = tf_text.FastBertTokenizer(
        tokenizer.vocabulary,
        suffix_indicator="##",
        max_bytes_per_word=100,
        token_out_type=tf.int64,
        unknown_token=UNK,
        lower_case_nfd_strip_accents=tokenizer.lower_case,
    )
    return fast_tokenizer, None


def _convert(endpoints, tracked, quantize, what):
    """The `.tflite` bytes of each endpoint (its one signature), converted from one
    temporary SavedModel holding `tracked`.

    Args:
        endpoints: `{file name: _Endpoint}`.
        tracked: what the functions read (models, tokenizers).
        quantize: one of `QUANTIZATIONS`.
        what: the model, for error messages.

    Returns:
        `{file name: bytes}`.

    Raises:
        LiteRTConversionError: the converter refused one (or a raw-string one needs
            custom ops that tensorflow-text has no TFLite kernel for).
    """
    flat_models = {}
    with tempfile.TemporaryDirectory(prefix="litert-") as saved_model_dir:
        archive = keras.export.ExportArchive()
        for trackable in tracked:
            archive.track(trackable)
        # One SavedModel for all: the model is traced and saved once, not once a file.
        for endpoint in endpoints.values():
            archive.add_endpoint(
                endpoint.signature, endpoint.function, input_signature=[endpoint.input_spec]
            )
        archive.write_out(saved_model_dir, verbose=False)
        for name, endpoint in endpoints.items():
            converter = tf.lite.TFLiteConverter.from_saved_model(
                saved_model_dir, signature_keys=[endpoint.signature]
            )
            # tensorflow-text's tokenizer ops become custom ops, run by its registrar.
            converter.allow_custom_ops = endpoint.text_ops
            if quantize == "int8":
                converter.optimizations = [tf.lite.Optimize.DEFAULT]
            try:
                flat_model = converter.convert()
            except ConverterError as error:
                raise LiteRTConversionError(_refusal_message(what, str(error))) from None
            if endpoint.text_ops:
                _check_text_ops_resolve(flat_model, what)
            flat_models[name] = flat_model
    return flat_models


def _refusal_message(what, converter_message):
    """One sentence naming the ops the converter refused, from its error message."""
    refused = sorted(
        set(re.findall(r"'tf\.(\w+)' op is neither a custom op nor a flex op", converter_message))
        | set(
            op
            for line in re.findall(r"TF Select ops: ([\w, ]+)", converter_message)
            for op in re.split(r",\s*", line.strip())
            if op
        )
    )
    if refused:
        return (
            f"The LiteRT converter cannot convert {what}: it has no builtin kernel for the "
            f"TensorFlow op(s) {', '.join(refused)}."
        )
    first_error = next(
        (line.strip() for line in converter_message.splitlines() if "error:" in line),
        converter_message.strip().splitlines()[0] if converter_message.strip() else "",
    )
    return f"The LiteRT converter cannot convert {what}: {first_error}"


def _check_text_ops_resolve(flat_model, what):
    """LiteRTConversionError unless every custom op of `flat_model` has a kernel in
    tensorflow-text's registrar (the converter turns any op into a custom op once
    custom ops are allowed)."""
    from tensorflow.lite.python.interpreter import InterpreterWithCustomOps

    try:
        # TensorFlow's interpreter warns that it is deprecated for ai_edge_litert's, which
        # cannot take tensorflow-text's registrar: it is the one that can check this file.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "\\s*Warning: tf.lite.Interpreter is deprecated")
            InterpreterWithCustomOps(
                model_content=flat_model,
                custom_op_registerers=tf_text.tflite_registrar.SELECT_TFTEXT_OPS,
            )
    except (RuntimeError, ValueError) as error:
        unresolved = sorted(set(re.findall(r"unresolved custom op: (\w+)", str(error))))
        raise LiteRTConversionError(
            f"The LiteRT converter cannot convert {what}: tensorflow-text has no TFLite kernel "
            f"for the op(s) {', '.join(unresolved) or str(error).splitlines()[0]}."
        ) from None


def _check_quantize(quantize):
    if quantize not in QUANTIZATIONS:
        raise ValueError(
            f"`quantize` must be None (float32) or 'int8' (dynamic-range), got {quantize!r}."
        )


def _spec(dtype, shape):
    return {"dtype": dtype, "shape": shape}


def _manifest_header(task, quantize):
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "task": task,
        "signature": SIGNATURE,
        "quantization": quantize,
    }


def _write_bytes(folder, name, content):
    with open(os.path.join(folder, name), "wb") as model_file:
        model_file.write(content)


def _write_manifest(folder, manifest):
    with open(os.path.join(folder, MANIFEST_FILE), "w", encoding="utf-8") as manifest_file:
        json.dump(manifest, manifest_file, indent=2, ensure_ascii=False)
        manifest_file.write("\n")
