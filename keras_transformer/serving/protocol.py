"""TensorFlow Serving's REST predict protocol: JSON bodies to input arrays and back.

Two request formats, as TensorFlow Serving reads them
(https://www.tensorflow.org/tfx/serving/api_rest):

* row: `{"instances": [...]}`, one entry per example (a bare value when the
  signature has one input, else an object keyed by input name), answered by
  `{"predictions": [...]}` (bare values when there is one output);
* columnar: `{"inputs": value-or-object}`, answered by `{"outputs": ...}`.

An input of shape `[]` (a translator's decoding controls) is one value per
request: a bare value in `inputs`; in `instances`, the same value in every
instance. The inputs a signature may go without (`optional`) may be left out.

Binary strings travel as `{"b64": "..."}`. Every problem with a body becomes a
`RequestError` carrying the HTTP status and a message that names what was
wrong; nothing here lets a malformed body reach the model.
"""

import base64
import binascii
import io
import json
import math
import sys

import numpy as np


class RequestError(Exception):
    """A request the server refuses: an HTTP status and a message for the client."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


def shorten(text, limit=100):
    """What an error message quotes of the client's input: at most `limit`
    characters, then "...", so an answer never echoes a whole request back."""
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."


# dtype names as TensorFlow Serving's metadata spells them.
_NUMPY_DTYPES = {
    "DT_STRING": object,
    "DT_FLOAT": np.float32,
    "DT_DOUBLE": np.float64,
    "DT_HALF": np.float16,
    "DT_INT8": np.int8,
    "DT_INT16": np.int16,
    "DT_INT32": np.int32,
    "DT_INT64": np.int64,
    "DT_UINT8": np.uint8,
    "DT_BOOL": np.bool_,
}


class TensorSpec:
    """What a signature input or output is: `name`, `dtype` ("DT_STRING", ...),
    `shape` (a list, None for unknown sizes; the first is the batch)."""

    def __init__(self, name, dtype, shape):
        self.name, self.dtype, self.shape = name, dtype, list(shape)

    def __repr__(self):
        return f"TensorSpec({self.name!r}, {self.dtype}, {self.shape})"


def parse_body(raw_body):
    """Bytes -> JSON object (a dict), or a 400 naming what is wrong."""
    try:
        text = raw_body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RequestError(
            400,
            f"The body is not valid UTF-8 (byte {error.start}); "
            'send binary strings as {"b64": ...}.',
        ) from None
    try:
        body = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        raise RequestError(
            400, f"JSON parse error: {error.msg} at line {error.lineno} column {error.colno}."
        ) from None
    except RecursionError:
        raise RequestError(400, "JSON parse error: the body is nested too deeply.") from None
    # JSONDecodeError is caught above; this is Python's int-string conversion limit.
    except ValueError:
        raise RequestError(
            400,
            f"JSON parse error: an integer has more than the {sys.get_int_max_str_digits()} "
            "digits this server reads.",
        ) from None
    if not isinstance(body, dict):
        raise RequestError(400, f"The body must be a JSON object, got {_json_type(body)}.")
    return body


def _reject_constant(name):
    raise RequestError(400, f"JSON parse error: {name} is not a number JSON allows.")


def parse_predict_request(body, input_specs, max_instances, optional=()):
    """A predict body -> (`"row"` or `"columnar"`, {input name: array}, batch size).

    Args:
        body: the parsed JSON object.
        input_specs: the signature's inputs, `{name: TensorSpec}`.
        max_instances: the most examples one request may carry.
        optional: names of inputs a request may leave out (absent from the arrays then).
    """
    unknown = set(body) - {"instances", "inputs", "signature_name"}
    if unknown:
        raise RequestError(
            400,
            f"Unknown key(s) {shorten(sorted(unknown))}; a predict body has 'instances' or "
            "'inputs', and optionally 'signature_name'.",
        )
    if ("instances" in body) == ("inputs" in body):
        raise RequestError(
            400,
            "A predict body needs exactly one of 'instances' (row format) or 'inputs' (columnar "
            "format).",
        )
    if "instances" in body:
        return ("row", *_row_inputs(body["instances"], input_specs, max_instances, optional))
    return ("columnar", *_columnar_inputs(body["inputs"], input_specs, max_instances, optional))


def _given_names(input_specs, given, optional):
    """The inputs a request sends: the signature's, less the optional ones `given` (its
    keys) leaves out."""
    return [name for name in input_specs if name in given or name not in optional]


def _row_inputs(instances, input_specs, max_instances, optional=()):
    if not isinstance(instances, list):
        raise RequestError(400, f"'instances' must be a list, got {_json_type(instances)}.")
    _check_count(len(instances), max_instances)
    names = list(input_specs)
    if optional and instances and isinstance(instances[0], dict):
        names = _given_names(input_specs, instances[0], optional)
    columns = {name: [] for name in names}
    for index, instance in enumerate(instances):
        if len(names) == 1 and not (isinstance(instance, dict) and set(instance) != {"b64"}):
            columns[names[0]].append(instance)  # a bare value, {"b64": ...} included
            continue
        if not isinstance(instance, dict):
            raise RequestError(
                400,
                f"Instance {index} must be an object with keys {names}, got "
                f"{_json_type(instance)}.",
            )
        missing, extra = set(names) - set(instance), set(instance) - set(names)
        if missing or extra:
            raise RequestError(
                400,
                f"Instance {index} has keys {shorten(sorted(instance))}; the signature's inputs "
                f"are {names}.",
            )
        for name in names:
            columns[name].append(instance[name])
    arrays = {}
    for name, values in columns.items():
        if input_specs[name].shape:
            arrays[name] = _to_array(values, input_specs[name], f"input '{name}'")
        elif values:
            if any(value != values[0] for value in values):
                raise RequestError(
                    400,
                    f"Input '{name}' is one value per request; the instances give different ones.",
                )
            arrays[name] = _scalar(values[0], input_specs[name])
    return arrays, len(instances)


def _scalar(value, spec):
    """One value of an input of shape `[]`, as a 0-d array of its dtype."""
    what = f"input '{spec.name}'"
    if isinstance(value, list):
        raise RequestError(
            400, f"{what} is one value per request, not a list; got {_json_type(value)}."
        )
    return _to_array([value], TensorSpec(spec.name, spec.dtype, [None]), what)[0]


def _columnar_inputs(inputs, input_specs, max_instances, optional=()):
    names = list(input_specs)
    if not isinstance(inputs, dict):
        if len(names) != 1:
            raise RequestError(
                400, f"'inputs' must be an object with keys {names}, got {_json_type(inputs)}."
            )
        inputs = {names[0]: inputs}  # the bare value of the one input
    names = _given_names(input_specs, inputs, optional)
    if set(inputs) != set(names):
        raise RequestError(
            400, f"'inputs' has keys {shorten(sorted(inputs))}; the signature's inputs are {names}."
        )
    arrays, batch_sizes = {}, set()
    for name in names:
        values = inputs[name]
        if not input_specs[name].shape:
            arrays[name] = _scalar(values, input_specs[name])
            continue
        if not isinstance(values, list):
            raise RequestError(
                400,
                f"Input '{name}' must be a list with one entry per example, got "
                f"{_json_type(values)}.",
            )
        _check_count(len(values), max_instances)
        arrays[name] = _to_array(values, input_specs[name], f"input '{name}'")
        batch_sizes.add(len(values))
    if len(batch_sizes) > 1:
        raise RequestError(
            400, f"The inputs disagree on the number of examples: {sorted(batch_sizes)}."
        )
    return arrays, batch_sizes.pop() if batch_sizes else 1


def _check_count(count, max_instances):
    if count > max_instances:
        raise RequestError(413, f"{count} examples in one request; the limit is {max_instances}.")


def _to_array(values, spec, what):
    """A list of per-example values -> a numpy array of the spec's dtype and shape."""
    dtype = _NUMPY_DTYPES.get(spec.dtype)
    if dtype is None:
        raise RequestError(
            400, f"{what} has dtype {spec.dtype}, which this server cannot read from JSON."
        )
    example_shape = spec.shape[1:]
    converted = [
        _convert(value, example_shape, spec.dtype, f"{what}, example {index}")
        for index, value in enumerate(values)
    ]
    if not converted:
        return np.zeros([0, *[size or 0 for size in example_shape]], dtype=dtype)
    if len({np.shape(value) for value in converted}) > 1:
        raise RequestError(
            400, f"{what}: the examples have different shapes; one request is one dense batch."
        )
    try:
        # A number too large for the dtype (1e39 as DT_FLOAT) would silently
        # become infinity; refuse it as integers out of range are.
        with np.errstate(over="raise", invalid="raise"):
            return np.array(converted, dtype=dtype)
    except FloatingPointError:
        raise RequestError(400, f"{what}: a number is out of range for {spec.dtype}.") from None
    except (OverflowError, ValueError) as error:
        raise RequestError(400, f"{what}: {shorten(error)}.") from None


def _convert(value, shape, dtype, where):
    """One example's value checked against the example shape (sizes None = any)."""
    if shape:
        if not isinstance(value, list):
            raise RequestError(
                400,
                f"{where}: expected a list of {_count(shape[0])} values, got {_json_type(value)}.",
            )
        if shape[0] is not None and len(value) != shape[0]:
            raise RequestError(400, f"{where}: expected {shape[0]} values, got {len(value)}.")
        items = [_convert(item, shape[1:], dtype, where) for item in value]
        if len({repr(np.shape(item)) for item in items}) > 1:
            raise RequestError(400, f"{where}: the nested lists are ragged.")
        return items
    if dtype == "DT_STRING":
        if isinstance(value, str):
            return value.encode("utf-8", errors="surrogatepass")
        if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
            try:
                return base64.b64decode(value["b64"], validate=True)
            except (binascii.Error, ValueError):
                raise RequestError(400, f"{where}: 'b64' is not valid base64.") from None
        raise RequestError(
            400, f'{where}: expected a string or {{"b64": ...}}, got {_json_type(value)}.'
        )
    if dtype == "DT_BOOL":
        if not isinstance(value, bool):
            raise RequestError(400, f"{where}: expected true or false, got {_json_type(value)}.")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(400, f"{where}: expected a number, got {_json_type(value)}.")
    if dtype.startswith(("DT_INT", "DT_UINT")) and not (
        isinstance(value, int) or float(value).is_integer()
    ):
        raise RequestError(400, f"{where}: expected an integer, got {value!r}.")
    if isinstance(value, float) and not math.isfinite(value):
        raise RequestError(400, f"{where}: {value!r} is not a finite number.")
    return value


class ResponseTooLarge(Exception):
    """An answer whose JSON would be over `limit` bytes: at least `lower_bound`, about
    `estimate`."""

    def __init__(self, limit, lower_bound, estimate):
        super().__init__(f"the answer would be about {estimate} bytes; the limit is {limit}")
        self.limit, self.lower_bound, self.estimate = limit, lower_bound, estimate


def format_predict_response(request_format, outputs):
    """{output name: numpy array `[B, ...]`} -> the JSON object to answer with, as Python values."""
    return json.loads(encode_predict_response(request_format, outputs))


def encode_predict_response(request_format, outputs, max_bytes=None):
    """{output name: numpy array `[B, ...]`} -> the UTF-8 JSON answer (what
    `format_predict_response` gives, encoded
    compactly), or `ResponseTooLarge` once it passes `max_bytes` (None: no limit).

    The answer is encoded a row at a time into one buffer: no Python copy of
    the whole answer is built first, encoding stops as soon as the limit is
    passed, and each step is short, so a thread encoding a large answer lets
    the event loop's thread run between steps (one `json.dumps` of it all
    would hold the GIL throughout).
    """
    arrays = list(outputs.values())
    elements = sum(array.size for array in arrays)
    # Each number or string takes at least two bytes (a digit and a comma, or two quotes).
    lower_bound = 2 * elements
    if max_bytes is not None and lower_bound > max_bytes:
        raise ResponseTooLarge(max_bytes, lower_bound, lower_bound)
    buffer, written, encoded_elements = io.BytesIO(), 0, 0
    for piece, piece_elements in _json_pieces(_response_layout(request_format, outputs)):
        data = piece.encode("utf-8")
        written += len(data)
        encoded_elements += piece_elements
        if max_bytes is not None and written > max_bytes:
            estimate = max(written, written * elements // max(encoded_elements, 1))
            raise ResponseTooLarge(max_bytes, written, estimate)
        buffer.write(data)
    # getvalue() hands over the buffer itself rather than a copy.
    return buffer.getvalue()


class _Row:
    """Example `index` of `array`, encoded when its turn comes."""

    __slots__ = ("array", "index")

    def __init__(self, array, index):
        self.array, self.index = array, index


def _response_layout(request_format, outputs):
    """The answer's JSON structure with the output arrays (or their rows) still as numpy at its
    leaves."""
    names = list(outputs)
    if request_format == "columnar":
        return {"outputs": outputs[names[0]] if len(names) == 1 else dict(outputs)}
    if len(names) == 1:
        return {"predictions": outputs[names[0]]}
    count = len(outputs[names[0]])
    return {
        "predictions": [
            {name: _Row(outputs[name], index) for name in names} for index in range(count)
        ]
    }


_encode_json = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
_LEAF_ELEMENTS = 4096  # most values of a one-dimensional array encoded in one step


def _json_pieces(value):
    """(JSON text, number of array elements in it) pieces that concatenate to `value`'s compact
    encoding."""
    if isinstance(value, dict):
        yield "{", 0
        for index, (key, item) in enumerate(value.items()):
            yield ("," if index else "") + _encode_json(key) + ":", 0
            yield from _json_pieces(item)
        yield "}", 0
    elif isinstance(value, list):
        yield "[", 0
        for index, item in enumerate(value):
            if index:
                yield ",", 0
            yield from _json_pieces(item)
        yield "]", 0
    elif isinstance(value, _Row):
        if value.array.ndim == 1:
            yield _encode_json(_to_json(value.array[value.index : value.index + 1])[0]), 1
        else:
            yield from _json_pieces(value.array[value.index])
    elif value.ndim == 0:
        yield _encode_json(_to_json(value)), 1
    elif value.ndim == 1:
        yield "[", 0
        for start in range(0, len(value), _LEAF_ELEMENTS):
            chunk = value[start : start + _LEAF_ELEMENTS]
            # The chunk's own brackets dropped: its values continue the list.
            yield ("," if start else "") + _encode_json(_to_json(chunk))[1:-1], chunk.size
        yield "]", 0
    else:
        yield "[", 0
        for index in range(len(value)):
            if index:
                yield ",", 0
            yield from _json_pieces(value[index])
        yield "]", 0


def _to_json(array):
    if array.dtype == object or array.dtype.kind == "S":
        return _strings_to_json(array.tolist())
    if array.dtype.kind == "f":
        # JSON has no NaN or infinity; TensorFlow Serving writes them as strings too.
        return _floats_to_json(array.tolist())
    return array.tolist()


def _strings_to_json(value):
    if isinstance(value, list):
        return [_strings_to_json(item) for item in value]
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(value).decode("ascii")}


def _floats_to_json(value):
    if isinstance(value, list):
        return [_floats_to_json(item) for item in value]
    return value if math.isfinite(value) else str(value)


def _count(size):
    """A dimension's size in an error message: the number, or "any number of" for None."""
    return "any number of" if size is None else size


def _json_type(value):
    for kind, name in (
        (bool, "a boolean"),
        (int, "a number"),
        (float, "a number"),
        (str, "a string"),
        (list, "a list"),
        (dict, "an object"),
        (type(None), "null"),
    ):
        if isinstance(value, kind):
            return name
    return type(value).__name__
