"""TensorFlow Serving's Classify, Regress and MultiInference: tf.Examples in, classes and scores
(or one value) per example out.

As TensorFlow Serving does (tensorflow_serving/servables/tensorflow/classifier.cc,
regressor.cc, multi_inference.cc and util.cc; for REST, util/json_tensor.cc):

* A request's `tensorflow.serving.Input` (a list of Examples, or a list and a
  context Example whose features each one extends) is fed to the signature's
  one input, `inputs`, as a batch of serialized Examples. The signature is
  `model_spec.signature_name`, `serving_default` if empty.
* A signature qualifies by its inputs and outputs, as in TensorFlow Serving by
  default (its `--enable_signature_method_name_check` is off, so its
  `method_name` is not read): for Classify one input `inputs` and one or two
  outputs, `classes` (strings) and/or `scores` (floats), each
  `[examples, classes]`; for Regress one input `inputs` and one output
  `outputs`, floats `[examples]` or `[examples, 1]`.
* REST: `{"signature_name": ..., "context": {...}, "examples": [{feature: value
  or [values]}, ...]}`, a string (or `{"b64": ...}`) a bytes feature, an integer
  or boolean an int64 one, any other number a float one; the answer is
  `{"results": [[[label, score], ...], ...]}` for classify, `{"results": [value,
  ...]}` for regress.

Every refusal is a `RequestError` with TensorFlow Serving's message: 400 for its
INVALID_ARGUMENT, 501 for its UNIMPLEMENTED. Protobuf modules are imported on first
use: importing them imports TensorFlow.
"""

import base64
import binascii
import decimal
import json
import math

import numpy as np

from keras_transformer.export.signature_defs import (  # noqa: F401 (the server's names)
    CLASSIFY_METHOD_NAME,
    REGRESS_METHOD_NAME,
)
from keras_transformer.serving.protocol import RequestError, _check_count

# TensorFlow Serving's signature keys (tensorflow/cc/saved_model/signature_constants.h).
EXAMPLES_INPUT = "inputs"
CLASSES_OUTPUT = "classes"
SCORES_OUTPUT = "scores"
REGRESSION_OUTPUT = "outputs"

# How much of a JSON body TensorFlow Serving quotes in an error (kMaxJsonDebugStringBytes).
_DEBUG_STRING_BYTES = 256
_INT64_RANGE = (-(1 << 63), (1 << 63) - 1)
_UINT64_MAX = (1 << 64) - 1


def example_request_from_json(body, max_instances):
    """A classify or regress body -> (signature name or None, `tensorflow.serving.Input`), as
    TensorFlow Serving's FillClassifyRegressRequestFromJson reads it.

    Args:
        body: the parsed JSON object (`protocol.parse_body`).
        max_instances: the most examples one request may carry (413 above it).
    """
    from tensorflow_serving.apis import input_pb2

    signature_name = body.get("signature_name")
    if "signature_name" in body and not isinstance(signature_name, str):
        raise _json_error(
            body, "not formatted correctly. 'signature_name' key must be a string value."
        )
    request_input = input_pb2.Input()
    listed = request_input.example_list
    if "context" in body:
        listed = request_input.example_list_with_context
        _fill_example(body["context"], listed.context)
    # The same words for :regress: TensorFlow Serving's message says classify for both.
    if "examples" not in body:
        raise _json_error(
            body, "When method is classify, key 'examples' is expected and was not found"
        )
    examples = body["examples"]
    if not isinstance(examples, list):
        raise _json_error(body, "Expecting 'examples' value to be an list/array")
    if not examples:
        raise _json_error(body, "'examples' value is an empty array")
    # Ours: TensorFlow Serving has no limit.
    _check_count(len(examples), max_instances)
    for example in examples:
        _fill_example(example, listed.examples.add())
    return signature_name, request_input


def example_count(request_input):
    """How many examples a `tensorflow.serving.Input` holds (0 where it holds none)."""
    kind = request_input.WhichOneof("kind")
    return len(getattr(request_input, kind).examples) if kind else 0


def _json_error(body, message):
    """TensorFlow Serving's error about a JSON body: the body quoted, then `message`."""
    return RequestError(400, f"JSON Value: {json_debug_string(body)} {message}")


def _fill_example(value, example):
    """Fills the tf.train.Example `example` from its JSON object (MakeExampleFromJsonObject)."""
    if not isinstance(value, dict):
        raise RequestError(
            400, f"Example must be JSON object but got JSON {_json_type_name(value)}"
        )
    for name, content in value.items():
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            # JSON's "\ud800": TensorFlow Serving's parser refuses the body; a proto key cannot.
            raise RequestError(
                400, "A feature name is not valid UTF-8 (it holds a lone surrogate escape)."
            ) from None
        feature = example.features.feature[name]
        feature.Clear()
        for item in content if isinstance(content, list) else [content]:
            _add_to_feature(item, name, feature)


def _add_to_feature(value, name, feature):
    """Appends one JSON value to `feature` (AddValueToFeature): its type chooses the list, and
    every value of a feature must choose the same one."""
    if value is None or isinstance(value, list):
        raise _unexpected_type(name, value)
    if isinstance(value, dict):
        if set(value) != {"b64"} or not isinstance(value["b64"], str):
            raise _unexpected_type(name, value)
        _check_kind(feature, "bytes_list", name)
        try:
            decoded = base64.b64decode(value["b64"], validate=True)
        except (binascii.Error, ValueError):
            raise RequestError(400, "Unable to base64 decode") from None
        feature.bytes_list.value.append(decoded)
    elif isinstance(value, str):
        _check_kind(feature, "bytes_list", name)
        feature.bytes_list.value.append(value.encode("utf-8", "surrogatepass"))
    elif isinstance(value, bool):
        _check_kind(feature, "int64_list", name)
        feature.int64_list.value.append(int(value))
    elif isinstance(value, float) or not _INT64_RANGE[0] <= value <= _UINT64_MAX:
        # An integer past both int64 and uint64 is a double to TensorFlow Serving's parser.
        _check_kind(feature, "float_list", name)
        feature.float_list.value.append(_as_float32(value))
    else:
        _check_kind(feature, "int64_list", name)
        if value > _INT64_RANGE[1]:
            raise RequestError(
                400, f"Feature: {name} has uint64_t element. Only int64_t is supported."
            )
        feature.int64_list.value.append(value)


def _unexpected_type(name, value):
    return RequestError(
        400, f"Feature: {name} has element with unexpected JSON type: {_json_type_name(value)}"
    )


def _as_float32(value):
    """A JSON number as TensorFlow Serving stores it in a float list (a C++ cast: infinity past
    float32's range)."""
    try:
        number = float(value)
    except OverflowError:
        number = math.inf if value > 0 else -math.inf
    with np.errstate(over="ignore"):
        return float(np.float32(number))


_FEATURE_KINDS = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int64"}


def _check_kind(feature, kind, name):
    present = feature.WhichOneof("kind")
    if present is not None and present != kind:
        raise RequestError(
            400,
            f"Unexpected element type in feature: {name} expecting type: {_FEATURE_KINDS[present]}",
        )


def _json_type_name(value):
    """A JSON value's type as TensorFlow Serving names it (JsonTypeString)."""
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        return "Array"
    if isinstance(value, str):
        return "String"
    return "Number"


class _Full(Exception):
    """The debug string reached its limit."""


def json_debug_string(value):
    """A JSON value as TensorFlow Serving quotes it in errors (JsonValueToDebugString):
    rapidjson's PrettyWriter (four-space indents, arrays on one line), cut at the first value
    that starts past 256 bytes."""
    written = bytearray()
    levels = []  # [in an array, values written] per open object or array

    def start_value():
        if len(written) >= _DEBUG_STRING_BYTES:
            raise _Full
        if not levels:
            return
        level = levels[-1]
        in_array, count = level
        if in_array:
            if count:
                written.extend(b", ")
        else:
            # An object's values alternate: key, value, key, ...
            written.extend(b"\n" if not count else b",\n" if count % 2 == 0 else b": ")
            if count % 2 == 0:
                written.extend(b" " * (4 * len(levels)))
        level[1] += 1

    def end(closing, in_array):
        if len(written) >= _DEBUG_STRING_BYTES:
            raise _Full
        _, count = levels.pop()
        if count and not in_array:
            written.extend(b"\n" + b" " * (4 * len(levels)))
        written.extend(closing)

    def write(item):
        if isinstance(item, dict):
            start_value()
            levels.append([False, 0])
            written.extend(b"{")
            for key, member in item.items():
                start_value()
                written.extend(_rapidjson_string(key))
                write(member)
            end(b"}", in_array=False)
        elif isinstance(item, list):
            start_value()
            levels.append([True, 0])
            written.extend(b"[")
            for member in item:
                write(member)
            end(b"]", in_array=True)
        else:
            start_value()
            written.extend(_rapidjson_scalar(item).encode("utf-8"))

    try:
        write(value)
    except _Full:
        pass
    return written.decode("utf-8", "replace")


_STRING_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


def _rapidjson_string(text):
    escaped = "".join(
        _STRING_ESCAPES.get(character)
        or (f"\\u{ord(character):04X}" if character < " " else character)
        for character in text
    )
    return f'"{escaped}"'.encode("utf-8", "backslashreplace")


def _rapidjson_scalar(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _rapidjson_string(value).decode("utf-8")
    if isinstance(value, int) and _INT64_RANGE[0] <= value <= _UINT64_MAX:
        return str(value)
    try:
        return _rapidjson_double(float(value))
    except OverflowError:
        return str(value)


def _rapidjson_double(value):
    """rapidjson's shortest form of a double (its dtoa's Prettify): `100.0`, `0.001`, `1e-7`,
    `1.5e22`."""
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    _, digit_tuple, exponent = decimal.Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exponent += len(digit_tuple) - len(digits)  # value = digits * 10**exponent
    length, point = len(digits), len(digits) + exponent
    if 0 <= exponent and point <= 21:
        text = digits + "0" * exponent + ".0"
    elif 0 < point <= 21:
        text = f"{digits[:point]}.{digits[point:]}"
    elif -6 < point <= 0:
        text = "0." + "0" * -point + digits
    elif length == 1:
        text = f"{digits}e{point - 1}"
    else:
        text = f"{digits[0]}.{digits[1:]}e{point - 1}"
    return sign + text


# Signatures.


def classification_problem(input_specs, output_specs):
    """Why a signature cannot classify, as TensorFlow Serving's PreProcessClassification
    says it: `(message, whether the SignatureDef follows it)`, or None if it can."""
    if len(input_specs) != 1:
        return "Expected one input Tensor.", False
    if len(output_specs) not in (1, 2):
        return f"Expected one or two output Tensors, found {len(output_specs)}", False
    if EXAMPLES_INPUT not in input_specs:
        return "No classification inputs found in SignatureDef: ", True
    if CLASSES_OUTPUT not in output_specs and SCORES_OUTPUT not in output_specs:
        return (
            "Expected classification signature outputs to contain at least one of "
            f'"{CLASSES_OUTPUT}" or "{SCORES_OUTPUT}". Signature was: ',
            True,
        )
    return None


def regression_problem(input_specs, output_specs):
    """Why a signature cannot regress, as TensorFlow Serving's PreProcessRegression says
    it: `(message, whether the SignatureDef follows it)`, or None if it can."""
    if len(input_specs) != 1:
        return "Expected one input Tensor.", False
    if len(output_specs) != 1:
        return "Expected one output Tensor.", False
    if EXAMPLES_INPUT not in input_specs:
        return "No regression inputs found in SignatureDef: ", True
    if REGRESSION_OUTPUT not in output_specs:
        return "No regression outputs found in SignatureDef: ", True
    return None


def signature_def_text(served, signature_name):
    """The SignatureDef of `signature_name` as TensorFlow Serving prints it in errors
    (protobuf's text format): the version's own, read from its `saved_model.pb` where it
    loaded, else one made from the specs, without the tensors' names."""
    from google.protobuf import text_format
    from tensorflow.core.protobuf import meta_graph_pb2

    signature_def = served.signature_defs.get(signature_name)
    if signature_def is None:
        signature_def = meta_graph_pb2.SignatureDef()
        for specs, infos in (
            (served.inputs[signature_name], signature_def.inputs),
            (served.outputs[signature_name], signature_def.outputs),
        ):
            for spec in specs.values():
                info = infos[spec.name]
                info.dtype = _data_type(spec.dtype)
                for size in spec.shape:
                    info.tensor_shape.dim.add().size = -1 if size is None else size
    return text_format.MessageToString(signature_def)


def _data_type(name):
    from tensorflow.core.framework import types_pb2

    return types_pb2.DataType.Value(name)


# Results.


def classification_result(outputs, output_specs, num_examples):
    """A classify signature's outputs -> `tensorflow.serving.ClassificationResult`, checked as
    TensorFlow Serving's PostProcessClassificationResult checks them."""
    from tensorflow_serving.apis import classification_pb2

    classes, scores = outputs.get(CLASSES_OUTPUT), outputs.get(SCORES_OUTPUT)
    for name, array, dtype in (
        (CLASSES_OUTPUT, classes, "DT_STRING"),
        (SCORES_OUTPUT, scores, "DT_FLOAT"),
    ):
        if array is None:
            continue
        if array.ndim != 2:
            raise RequestError(
                400,
                "Expected Tensor shape: [batch_size num_classes] but got "
                f"{_shape_text(array.shape)}",
            )
        if output_specs[name].dtype != dtype:
            raise RequestError(
                400, f"Expected {name} Tensor of {dtype}. Got: {output_specs[name].dtype}"
            )
        if array.shape[0] != num_examples:
            raise RequestError(
                400,
                f"Expected {name} output batch size of {num_examples}. Got: {array.shape[0]}",
            )
    if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
        raise RequestError(
            400,
            "Tensors class and score should match in dim_size(1). Got "
            f"{classes.shape[1]} vs. {scores.shape[1]}",
        )
    num_classes = (classes if classes is not None else scores).shape[1]
    result = classification_pb2.ClassificationResult()
    for index in range(num_examples):
        classifications = result.classifications.add()
        for column in range(num_classes):
            answer = classifications.classes.add()
            if classes is not None:
                # A proto3 string: a label that is not UTF-8 is shown with replacements.
                answer.label = bytes(classes[index, column]).decode("utf-8", "replace")
            if scores is not None:
                answer.score = scores[index, column]
    return result


def regression_result(outputs, output_specs, num_examples):
    """A regress signature's output -> `tensorflow.serving.RegressionResult`, checked as
    TensorFlow Serving's PostProcessRegressionResult checks it."""
    from tensorflow_serving.apis import regression_pb2

    values = outputs[REGRESSION_OUTPUT]
    if not (values.ndim == 1 or (values.ndim == 2 and values.shape[1] == 1)):
        raise RequestError(
            400,
            "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got "
            f"{_shape_text(values.shape)}",
        )
    if values.shape[0] != num_examples:
        raise RequestError(
            400,
            "Input batch size did not match output batch size: "
            f"{num_examples} vs. {values.shape[0]}",
        )
    dtype = output_specs[REGRESSION_OUTPUT].dtype
    if dtype != "DT_FLOAT":
        raise RequestError(400, f"Expected output Tensor of DT_FLOAT.  Got: {dtype}")
    result = regression_pb2.RegressionResult()
    for value in values.reshape(-1):
        result.regressions.add().value = value
    return result


def _shape_text(shape):
    """A shape as TensorFlow's TensorShape::DebugString writes it: `[2,3]`."""
    return "[" + ",".join(str(size) for size in shape) + "]"


def classification_json(result):
    """A ClassificationResult as TensorFlow Serving's REST answer (MakeJsonFromClassificationResult):
    `{"results": [[[label, score], ...], ...]}`."""
    rows = (
        "["
        + ",".join(
            f"[{_json_string(answer.label)},{_json_float(answer.score)}]" for answer in row.classes
        )
        + "]"
        for row in result.classifications
    )
    return ('{"results":[' + ",".join(rows) + "]}").encode("utf-8")


def regression_json(result):
    """A RegressionResult as TensorFlow Serving's REST answer: `{"results": [value, ...]}`."""
    values = ",".join(_json_float(regression.value) for regression in result.regressions)
    return ('{"results":[' + values + "]}").encode("utf-8")


_json_string = json.JSONEncoder(ensure_ascii=False).encode


def _json_float(value):
    """A float32 as TensorFlow Serving writes it (WriteDecimal): six significant digits where
    they read back as the same float32, else nine; `.0` on whole numbers. JSON has no NaN or
    infinity: those are strings, as in our predict answers."""
    value = np.float32(value)
    if not np.isfinite(value):
        return f'"{"NaN" if np.isnan(value) else "Infinity" if value > 0 else "-Infinity"}"'
    text = f"{float(value):.6g}"
    if np.float32(float(text)) != value:
        text = f"{float(value):.9g}"
    if "." not in text and "e" not in text:
        text += ".0"
    return text
