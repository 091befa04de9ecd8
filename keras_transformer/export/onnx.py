"""ONNX exports of both apps, for ONNX Runtime where TensorFlow is not.

The model's computation is converted by tf2onnx from a `tf.function` (the same
model call as the SavedModels'); the translator's greedy decoding is one graph,
its `tf.while_loop` an ONNX `Loop`. Tokenization stays outside the graph: the
ONNX model takes and returns token ids, and the tokenizer's files travel beside
it, read by `keras_transformer.export.onnx_runtime` with `PythonWordPieceTokenizer`
(the same ids as the SavedModels' tensorflow-text tokenizer). onnxruntime-extensions'
BERT tokenizer op gives other ids than tensorflow-text's for some texts (it does not
case-fold with NFKC, keeps control characters, gives a word with an unknown character
pieces where tensorflow-text gives one `[UNK]`), so it stays out of the graph.

A version folder `BASE/N/` (written all-or-nothing, as the SavedModels') holds:

* `model.onnx`: the classifier's `token_ids` (int32 `[B, T]`, 0-padded, `T` at most
  the model's `input_length`) -> `probabilities` (float32 `[B, num_classes]`); the
  translator's `source_ids` (int32 `[B, S]`, `S` at most `sequence_length`) ->
  `token_ids` (int32 `[B, max_output_length]`, `[END]` included, 0 after it).
* `onnx.json`: what the model takes and returns, and how texts become its ids
  (`ONNX_CONFIG_FILE`).
* the tokenizer files: `tokenizer/` for the classifier, `source/` and `target/` for the
  translator (`write_tokenizer_files`).
"""

import json
import logging
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from keras_transformer.data.sources import one_line
from keras_transformer.decoding import greedy_decode
from keras_transformer.export.classifier import checked_export_parts
from keras_transformer.export.translator import _check_arguments
from keras_transformer.export.versions import write_new_version
from keras_transformer.text.vocabulary import END, START

ONNX_MODEL_FILE = "model.onnx"
ONNX_CONFIG_FILE = "onnx.json"
CLASSIFIER_TOKENIZER_FOLDER = "tokenizer"
SOURCE_TOKENIZER_FOLDER = "source"
TARGET_TOKENIZER_FOLDER = "target"
# ONNX opset 17: the first with `LayerNormalization`, which tf2onnx fuses layer norms into.
OPSET = 17
QUANTIZATIONS = (None, "int8")
# Domains of the operators ONNX Runtime runs without custom-op libraries.
_STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft")


class ExportFormatError(ValueError):
    """A model that cannot be written in the export format asked for; the message names why
    (for ONNX, the TensorFlow ops that have no conversion)."""


def export_classifier_onnx(
    model,
    tokenizer,
    class_names,
    base_dir,
    add_cls=None,
    add_sep=False,
    mix=None,
    quantize=None,
):
    """Writes the classifier's ONNX export to `base_dir/VERSION/` and returns that folder.

    The model takes token ids and returns probabilities (the module docstring); the
    class names, how texts are encoded and what each part contributes (as in the
    SavedModel's `classifier.json`) are in `onnx.json`. Where `mix` gives the
    Transformer weight 0, the graph holds the bag of n-grams alone, as the SavedModel's.

    Args:
        model: a built `TransformerClassifier` or `PretrainedClassifier`.
        tokenizer: the `WordPieceTokenizer` (or `PretrainedTokenizer`) it was trained
            with; its files are written beside the model.
        class_names: list of names, index = class id.
        base_dir: the model's base path, e.g. `exported_models/classifier-onnx`.
        add_cls: whether inputs start with `[CLS]`; defaults to the model's pooling
            being `"cls"`.
        add_sep: whether inputs end with `[SEP]`.
        mix: `(transformer_weight, bag_weight)` that training chose (recorded).
        quantize: None (float32 weights) or `"int8"` (ONNX Runtime's dynamic
            quantization of the weights: smaller, answers no longer exact).

    Returns:
        The version folder, `base_dir/N`.

    Raises:
        ValueError: the class names do not fit the model, `quantize` is unknown, or
            `mix` gives the Transformer weight 0 but the head is not zeros.
        ExportFormatError: the model holds TensorFlow ops tf2onnx cannot convert.
    """
    _check_quantize(quantize)
    add_cls, parts = checked_export_parts(model, class_names, add_cls, mix)

    if parts["encoder"]:

        def probabilities(token_ids):
            return tf.cast(model(token_ids, training=False), tf.float32)

    else:
        # The head adds exactly 0 to the bag's logits: the softmax of the bag's alone.
        def probabilities(token_ids):
            return tf.nn.softmax(tf.cast(model.ngrams(token_ids), tf.float32), axis=-1)

    function = tf.function(
        lambda token_ids: {"probabilities": probabilities(token_ids)},
        input_signature=[tf.TensorSpec([None, None], tf.int32, name="token_ids")],
    )
    config = {
        "task": "classifier",
        "inputs": {"token_ids": "int32 [batch, length], 0-padded"},
        "outputs": {"probabilities": "float32 [batch, classes]"},
        "input_length": model.input_length,
        "add_cls": bool(add_cls),
        "add_sep": bool(add_sep),
        "class_names": [str(name) for name in class_names],
        "parts": parts,
        "quantize": quantize,
        "tokenizer": CLASSIFIER_TOKENIZER_FOLDER,
    }
    tokenizers = {CLASSIFIER_TOKENIZER_FOLDER: tokenizer}
    return write_new_version(
        base_dir,
        lambda folder: _write(folder, function, "classifier", config, tokenizers, quantize),
        required_file=ONNX_MODEL_FILE,
    )


def export_translator_onnx(
    model,
    source_tokenizer,
    target_tokenizer,
    base_dir,
    max_output_length=64,
    quantize=None,
):
    """Writes the translator's ONNX export to `base_dir/VERSION/` and returns that folder.

    The model is greedy decoding in one graph: source ids in, target ids out (the module
    docstring); its tokens are those of the SavedModel's `greedy` signature. Beam search
    and sampling are not exported: their `top_k` over a variable number of hypotheses
    is the SavedModel's.

    Args:
        model: a built `Seq2SeqTransformer`.
        source_tokenizer, target_tokenizer: the `WordPieceTokenizer`s it was trained
            with (may be one object); their files are written to `source/` and `target/`.
        base_dir: the model's base path, e.g. `exported_models/translator-onnx`.
        max_output_length: most target tokens generated, `[END]` included (capped at
            the model's `sequence_length`, as in the SavedModel).
        quantize: None or `"int8"`, as for `export_classifier_onnx`.

    Returns:
        The version folder, `base_dir/N`.

    Raises:
        ValueError: the tokenizers do not fit the model, or an argument is out of range.
        ExportFormatError: the model holds TensorFlow ops tf2onnx cannot convert.
    """
    _check_quantize(quantize)
    _check_arguments(model, source_tokenizer, target_tokenizer, max_output_length, 1)
    max_length = min(int(max_output_length), model.sequence_length)
    start_id, end_id = target_tokenizer.token_id(START), target_tokenizer.token_id(END)
    function = tf.function(
        lambda source_ids: {
            "token_ids": greedy_decode(model, source_ids, max_length, start_id, end_id)
        },
        input_signature=[tf.TensorSpec([None, None], tf.int32, name="source_ids")],
    )
    config = {
        "task": "translator",
        "inputs": {"source_ids": "int32 [batch, length], 0-padded"},
        "outputs": {"token_ids": "int32 [batch, max_output_length], 0 after [END]"},
        "decoding": "greedy",
        "sequence_length": model.sequence_length,
        "max_output_length": max_length,
        "quantize": quantize,
        "source_tokenizer": SOURCE_TOKENIZER_FOLDER,
        "target_tokenizer": TARGET_TOKENIZER_FOLDER,
    }
    tokenizers = {
        SOURCE_TOKENIZER_FOLDER: source_tokenizer,
        TARGET_TOKENIZER_FOLDER: target_tokenizer,
    }
    return write_new_version(
        base_dir,
        lambda folder: _write(folder, function, "translator", config, tokenizers, quantize),
        required_file=ONNX_MODEL_FILE,
    )


def _check_quantize(quantize):
    if quantize not in QUANTIZATIONS:
        raise ValueError(
            f"`quantize` must be one of {', '.join(map(repr, QUANTIZATIONS))} for ONNX, "
            f"got {quantize!r}."
        )


def _write(folder, function, what, config, tokenizers, quantize):
    """`model.onnx` of `function`, `onnx.json` and each tokenizer's files in `folder`."""
    from keras_transformer.text.python_tokenizer import write_tokenizer_files

    model_path = os.path.join(folder, ONNX_MODEL_FILE)
    model_proto = convert_function(function, what)
    if quantize == "int8":
        _quantize_int8(model_proto, model_path)
    else:
        import onnx

        onnx.save(model_proto, model_path)
    for name, tokenizer in tokenizers.items():
        write_tokenizer_files(tokenizer, os.path.join(folder, name))
    with open(os.path.join(folder, ONNX_CONFIG_FILE), "w", encoding="utf-8") as config_file:
        json.dump(config, config_file, indent=2, ensure_ascii=False)
        config_file.write("\n")


def convert_function(function, what="model"):
    """The ONNX model (a `ModelProto`) of a `tf.function` with an input signature.

    Args:
        function: a `tf.function` whose `input_signature` is set.
        what: what the function is, for error messages (`"classifier"`).

    Returns:
        An `onnx.ModelProto` that ONNX Runtime loads.

    Raises:
        ExportFormatError: tf2onnx has no conversion for some of its ops (named), or
            the converter or ONNX Runtime refused the result.
    """
    import onnxruntime
    import tf2onnx

    with _quiet_converter():
        try:
            model_proto, _ = tf2onnx.convert.from_function(
                function,
                input_signature=function.input_signature,
                opset=OPSET,
                custom_op_handlers=_CUSTOM_HANDLERS,
            )
        except Exception as error:  # tf2onnx raises anything; one sentence instead
            raise ExportFormatError(
                f"tf2onnx could not convert the {what} to ONNX: {one_line(error)}"
            ) from error
    unsupported = unconverted_ops(model_proto)
    if unsupported:
        raise ExportFormatError(
            f"The {what} cannot be exported to ONNX: tf2onnx has no conversion for the "
            f"TensorFlow op{'s' if len(unsupported) > 1 else ''} {', '.join(unsupported)}."
        )
    try:
        onnxruntime.InferenceSession(
            model_proto.SerializeToString(), providers=["CPUExecutionProvider"]
        )
    except Exception as error:  # onnxruntime's errors are its own classes
        raise ExportFormatError(
            f"The {what}'s ONNX graph does not load in ONNX Runtime: {one_line(error)}"
        ) from error
    return model_proto


def unconverted_ops(model_proto):
    """Sorted op types in `model_proto` (its `Loop` and `If` bodies included) that are no
    ONNX operator: what tf2onnx left as it found it, with no conversion."""
    import onnx

    found = set()

    def visit(graph):
        for node in graph.node:
            if node.domain in _STANDARD_DOMAINS and not _is_onnx_op(node, onnx):
                found.add(node.op_type)
            elif node.domain not in _STANDARD_DOMAINS:
                found.add(f"{node.domain}.{node.op_type}")
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    visit(attribute.g)
                for subgraph in attribute.graphs:
                    visit(subgraph)

    visit(model_proto.graph)
    return sorted(found)


def _is_onnx_op(node, onnx):
    domain = "" if node.domain == "ai.onnx" else node.domain
    return onnx.defs.has(node.op_type, domain)


def _quantize_int8(model_proto, model_path):
    """ONNX Runtime's dynamic quantization of `model_proto`'s weights to int8, at
    `model_path`."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    scratch = tempfile.mkdtemp(prefix=".float32-", dir=os.path.dirname(model_path))
    try:
        float_path = os.path.join(scratch, ONNX_MODEL_FILE)
        onnx.save(model_proto, float_path)
        # ONNX Runtime logs a suggestion to pre-process (shape inference for
        # static quantization) on the root logger; dynamic quantization needs none.
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)
        try:
            quantize_dynamic(float_path, model_path, weight_type=QuantType.QInt8)
        finally:
            root.setLevel(level)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class _quiet_converter:
    """Keeps tf2onnx's logging (a line per op it visits, warnings for each op it cannot
    convert, which `convert_function` reports itself) out of the user's console, and its
    graph optimizers from copying the whole graph before each one runs.

    Those copies (`TF2ONNX_CATCH_ERRORS`, on by default) let tf2onnx skip an optimizer
    that fails; they cost half the conversion's time, and an optimizer failing here is
    reported like any other conversion failure.
    """

    def __enter__(self):
        import logging

        # TensorFlow's own logger warns while tf2onnx freezes the graph.
        self._loggers = [logging.getLogger(name) for name in ("tf2onnx", "tensorflow")]
        self._levels = [logger.level for logger in self._loggers]
        for logger in self._loggers:
            logger.setLevel(logging.CRITICAL)
        self._catch_errors = os.environ.get(_CATCH_ERRORS_VARIABLE)
        os.environ[_CATCH_ERRORS_VARIABLE] = "FALSE"
        return self

    def __exit__(self, *exc_info):
        for logger, level in zip(self._loggers, self._levels):
            logger.setLevel(level)
        if self._catch_errors is None:
            os.environ.pop(_CATCH_ERRORS_VARIABLE, None)
        else:
            os.environ[_CATCH_ERRORS_VARIABLE] = self._catch_errors
        return False


_CATCH_ERRORS_VARIABLE = "TF2ONNX_CATCH_ERRORS"


# --- conversions for the TensorFlow ops of our models that tf2onnx lacks ----------------


def _convert_erfc(ctx, node, name, args):
    """`Erfc` (Keras' exact GELU on TensorFlow) as `1 - Erf(x)`."""
    from tf2onnx import utils

    dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))
    node.type = "Erf"
    one = ctx.make_const(utils.make_name(f"{name}_one"), np.array(1, dtype))
    complement = ctx.insert_new_node_on_output(
        "Sub", node.output[0], name=utils.make_name(f"{name}_complement")
    )
    # `insert_new_node_on_output` feeds the node's output as the first input: 1 - erf(x).
    ctx.replace_inputs(complement, [one.output[0], node.output[0]])
    ctx.copy_shape(node.output[0], complement.output[0])
    ctx.set_dtype(complement.output[0], ctx.get_dtype(node.output[0]))


def _convert_strided_slice_update(ctx, node, name, args):
    """`TensorStridedSliceUpdate` of a run of positions along one axis, all of every other
    axis, stride 1 (the decoder's key/value cache write) as a `ScatterND` along that axis.

    Raises:
        ValueError: any other form (left unconverted, so the export names the op).
    """
    from tf2onnx import utils

    rank = ctx.get_shape(node.input[1])
    begin_mask, end_mask = node.get_attr_value("begin_mask"), node.get_attr_value("end_mask")
    strides = node.inputs[3]
    if (
        rank is None
        or len(rank) != 1
        or rank[0] is None
        or rank[0] < 1
        or any(
            node.get_attr_value(mask, 0)
            for mask in ("ellipsis_mask", "new_axis_mask", "shrink_axis_mask")
        )
        or not strides.is_const()
        or np.any(strides.get_tensor_value(as_list=False) != 1)
    ):
        raise ValueError(f"unsupported form of TensorStridedSliceUpdate {name}")
    rank = rank[0]
    sliced = [axis for axis in range(rank) if not (begin_mask >> axis) & 1 & (end_mask >> axis)]
    if len(sliced) != 1:
        raise ValueError(f"unsupported form of TensorStridedSliceUpdate {name}")
    axis = sliced[0]
    order = [axis] + [other for other in range(rank) if other != axis]
    inverse = list(np.argsort(order))
    cache, begin, end, _, value = node.input
    output, dtype = node.output[0], ctx.get_dtype(node.output[0])

    def scalar_at(vector):
        index = ctx.make_const(utils.make_name(f"{name}_axis"), np.array(axis, np.int64))
        return ctx.make_node("Gather", [vector, index.output[0]], attr={"axis": 0}).output[0]

    start, stop = scalar_at(begin), scalar_at(end)
    step = ctx.make_const(utils.make_name(f"{name}_step"), np.array(1, np.int32))
    positions = ctx.make_node("Range", [start, stop, step.output[0]]).output[0]
    positions = ctx.make_node("Cast", [positions], attr={"to": 7}).output[0]  # int64
    last = ctx.make_const(utils.make_name(f"{name}_last"), np.array([-1], np.int64))
    indices = ctx.make_node("Unsqueeze", [positions, last.output[0]]).output[0]
    cache_first = ctx.make_node("Transpose", [cache], attr={"perm": order}).output[0]
    value_first = ctx.make_node("Transpose", [value], attr={"perm": order}).output[0]
    updated = ctx.make_node("ScatterND", [cache_first, indices, value_first]).output[0]
    ctx.remove_node(node.name)
    ctx.make_node(
        "Transpose",
        [updated],
        attr={"perm": inverse},
        outputs=[output],
        name=name,
        dtypes=[dtype],
    )


_CUSTOM_HANDLERS = {
    "Erfc": (_convert_erfc, []),
    "TensorStridedSliceUpdate": (_convert_strided_slice_update, []),
}
