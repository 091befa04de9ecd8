"""keras_transformer.serving.protocol: JSON bodies to input arrays and back, and every refusal."""

import base64
import json
import math

import numpy as np
import pytest

from keras_transformer.serving.protocol import (
    RequestError,
    TensorSpec,
    format_predict_response,
    parse_body,
    parse_predict_request,
)

TEXT = {"text": TensorSpec("text", "DT_STRING", [None])}
# A signature with two inputs of other dtypes and shapes.
PAIR = {
    "ids": TensorSpec("ids", "DT_INT32", [None, 2]),
    "weight": TensorSpec("weight", "DT_FLOAT", [None]),
}


def refused(function, *args):
    with pytest.raises(RequestError) as caught:
        function(*args)
    return caught.value


# parse_body


def test_parse_body_returns_the_object():
    assert parse_body(b'{"instances": ["a", "b"]}') == {"instances": ["a", "b"]}


def test_parse_body_refuses_non_utf8_and_names_the_byte():
    error = refused(parse_body, b'{"instances": ["caf\xe9"]}')
    assert error.status == 400
    assert "UTF-8" in error.message and "byte 19" in error.message and "b64" in error.message


@pytest.mark.parametrize(
    "raw", [b"", b"{", b'{"instances": [}', b"{'a': 1}", b'{"a": 1} trailing', b"\x00"]
)
def test_parse_body_refuses_malformed_json(raw):
    error = refused(parse_body, raw)
    assert error.status == 400 and error.message.startswith("JSON parse error")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_parse_body_refuses_non_json_numbers(constant):
    error = refused(parse_body, f'{{"instances": [{constant}]}}'.encode())
    assert error.status == 400 and constant in error.message


@pytest.mark.parametrize(
    "raw, kind",
    [
        (b"[1, 2]", "a list"),
        (b'"text"', "a string"),
        (b"3", "a number"),
        (b"null", "null"),
        (b"true", "a boolean"),
    ],
)
def test_parse_body_needs_an_object(raw, kind):
    error = refused(parse_body, raw)
    assert error.status == 400 and kind in error.message


def test_parse_body_refuses_deep_nesting_without_crashing():
    error = refused(parse_body, b'{"instances": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")
    assert error.status == 400 and "deep" in error.message


# Row format, one string input


def test_row_bare_strings():
    request_format, arrays, batch_size = parse_predict_request(
        {"instances": ["a", "", "été"]}, TEXT, 8
    )
    assert request_format == "row" and batch_size == 3
    assert list(arrays) == ["text"]
    assert arrays["text"].dtype == object
    assert arrays["text"].tolist() == [b"a", b"", "été".encode()]


@pytest.mark.parametrize(
    "body_text, expected",
    [
        # The surrogate's own 3 bytes (WTF-8), the bytes a {"b64": ...} of them would give.
        ('["\\ud800"]', b"\xed\xa0\x80"),
        ('["a\\udfffb"]', b"a\xed\xbf\xbfb"),
        ('["\\ude00\\ud83d"]', b"\xed\xb8\x80\xed\xa0\xbd"),
        # A valid pair is one character, sent as UTF-8 (not as two surrogates).
        ('["\\ud83d\\ude00"]', "\U0001f600".encode("utf-8")),
        ('["\\u0000\\r\\n\\ufeff"]', b"\x00\r\n\xef\xbb\xbf"),
    ],
)
def test_json_escapes_reach_the_model_as_these_bytes(body_text, expected):
    body = parse_body(('{"instances": ' + body_text + "}").encode("ascii"))
    _, arrays, _ = parse_predict_request(body, TEXT, 8)
    assert arrays["text"].tolist() == [expected]
    _, columnar, _ = parse_predict_request({"inputs": body["instances"]}, TEXT, 8)
    assert columnar["text"].tolist() == [expected]


def test_row_b64_and_named_instances():
    raw = b"\xff\x00binary"
    body = {
        "instances": [
            {"b64": base64.b64encode(raw).decode()},
            {"text": "x"},
            {"text": {"b64": "eQ=="}},
        ]
    }
    _, arrays, batch_size = parse_predict_request(body, TEXT, 8)
    assert batch_size == 3
    assert arrays["text"].tolist() == [raw, b"x", b"y"]


def test_row_empty_list_is_an_empty_batch():
    _, arrays, batch_size = parse_predict_request({"instances": []}, TEXT, 8)
    assert batch_size == 0 and arrays["text"].shape == (0,)


def test_row_refuses_a_wrong_type_and_names_the_example():
    error = refused(parse_predict_request, {"instances": ["a", 3, "c"]}, TEXT, 8)
    assert error.status == 400
    assert "input 'text', example 1" in error.message and "a number" in error.message


@pytest.mark.parametrize(
    "value, kind", [(None, "null"), (True, "a boolean"), (["a"], "a list"), (1.5, "a number")]
)
def test_row_refuses_non_strings(value, kind):
    error = refused(parse_predict_request, {"instances": ["ok", value]}, TEXT, 8)
    assert error.status == 400 and "example 1" in error.message and kind in error.message


@pytest.mark.parametrize(
    "instance", [{"txt": "a"}, {"text": "a", "extra": "b"}, {}, {"b64": "eQ==", "text": "y"}]
)
def test_row_instance_with_wrong_keys_names_them(instance):
    error = refused(parse_predict_request, {"instances": ["ok", instance]}, TEXT, 8)
    assert error.status == 400
    assert (
        f"Instance 1 has keys {sorted(instance)}" in error.message and "['text']" in error.message
    )


@pytest.mark.parametrize("b64", ["not base64!", "abc", {"nested": 1}])
def test_row_refuses_bad_b64(b64):
    error = refused(parse_predict_request, {"instances": [{"b64": "eQ=="}, {"b64": b64}]}, TEXT, 8)
    assert error.status == 400 and "example 1" in error.message


def test_row_refuses_a_non_list():
    error = refused(parse_predict_request, {"instances": "a"}, TEXT, 8)
    assert (
        error.status == 400
        and "'instances' must be a list" in error.message
        and "a string" in error.message
    )


def test_instance_limit_is_413():
    assert parse_predict_request({"instances": ["a"] * 4}, TEXT, 4)[2] == 4
    error = refused(parse_predict_request, {"instances": ["a"] * 5}, TEXT, 4)
    assert error.status == 413 and "5" in error.message and "limit is 4" in error.message
    error = refused(parse_predict_request, {"inputs": ["a"] * 5}, TEXT, 4)
    assert error.status == 413


# Keys of the body


def test_unknown_key_is_named():
    error = refused(parse_predict_request, {"instances": ["a"], "instance": ["b"]}, TEXT, 8)
    assert error.status == 400 and "'instance'" in error.message


@pytest.mark.parametrize("body", [{}, {"instances": ["a"], "inputs": ["a"]}])
def test_exactly_one_of_instances_and_inputs(body):
    error = refused(parse_predict_request, body, TEXT, 8)
    assert error.status == 400 and "'instances'" in error.message and "'inputs'" in error.message


# Columnar format


@pytest.mark.parametrize("inputs", [["a", {"b64": "Yg=="}], {"text": ["a", {"b64": "Yg=="}]}])
def test_columnar_bare_and_named(inputs):
    request_format, arrays, batch_size = parse_predict_request({"inputs": inputs}, TEXT, 8)
    assert request_format == "columnar" and batch_size == 2
    assert arrays["text"].tolist() == [b"a", b"b"]


@pytest.mark.parametrize("inputs", [{"txt": ["a"]}, {"text": ["a"], "extra": ["b"]}, {}])
def test_columnar_wrong_keys_are_named(inputs):
    error = refused(parse_predict_request, {"inputs": inputs}, TEXT, 8)
    assert error.status == 400
    assert (
        f"'inputs' has keys {sorted(inputs)}; the signature's inputs are ['text']" in error.message
    )


def test_columnar_refuses_a_scalar():
    error = refused(parse_predict_request, {"inputs": "a"}, TEXT, 8)
    assert error.status == 400 and "Input 'text' must be a list" in error.message


# Several inputs, numbers


def test_several_inputs_row_and_columnar_agree():
    row = parse_predict_request(
        {"instances": [{"ids": [1, 2], "weight": 0.5}, {"ids": [3, 4], "weight": 2}]}, PAIR, 8
    )
    columnar = parse_predict_request(
        {"inputs": {"ids": [[1, 2], [3, 4]], "weight": [0.5, 2]}}, PAIR, 8
    )
    for _request_format, arrays, batch_size in (row, columnar):
        assert batch_size == 2
        assert arrays["ids"].dtype == np.int32 and arrays["ids"].tolist() == [[1, 2], [3, 4]]
        assert arrays["weight"].dtype == np.float32 and arrays["weight"].tolist() == [0.5, 2.0]
    assert row[0] == "row" and columnar[0] == "columnar"


def test_integer_valued_floats_are_integers():
    _, arrays, _ = parse_predict_request({"instances": [{"ids": [1.0, 2], "weight": 1}]}, PAIR, 8)
    assert arrays["ids"].tolist() == [[1, 2]]


@pytest.mark.parametrize(
    "instance, expected",
    [
        ("a", "Instance 0 must be an object"),
        ({"ids": [1, 2]}, "Instance 0 has keys ['ids']"),
        ({"ids": [1, 2], "weight": 1, "extra": 0}, "'extra'"),
        ({"ids": [1], "weight": 1}, "expected 2 values, got 1"),
        ({"ids": [1, 2.5], "weight": 1}, "expected an integer, got 2.5"),
        ({"ids": [1, True], "weight": 1}, "expected a number, got a boolean"),
        ({"ids": [1, "2"], "weight": 1}, "expected a number, got a string"),
        ({"ids": 1, "weight": 1}, "expected a list of 2 values, got a number"),
        (
            {"ids": [1, 2], "weight": "heavy"},
            "input 'weight', example 0: expected a number, got a string",
        ),
        ({"ids": [1, 2**40], "weight": 1}, "input 'ids'"),
        ({"ids": [1, 2], "weight": float("inf")}, "inf is not a finite number"),
        ({"ids": [1, 2], "weight": 1e39}, "input 'weight': a number is out of range for DT_FLOAT"),
    ],
)
def test_several_inputs_refusals_name_the_problem(instance, expected):
    error = refused(parse_predict_request, {"instances": [instance]}, PAIR, 8)
    assert error.status == 400
    assert expected in error.message


def test_columnar_refusals():
    error = refused(parse_predict_request, {"inputs": [[1, 2]]}, PAIR, 8)
    assert (
        error.status == 400
        and "'inputs' must be an object with keys ['ids', 'weight']" in error.message
    )
    error = refused(parse_predict_request, {"inputs": {"ids": [[1, 2]]}}, PAIR, 8)
    assert error.status == 400 and "'inputs' has keys ['ids']" in error.message
    error = refused(
        parse_predict_request, {"inputs": {"ids": [[1, 2], [3, 4]], "weight": [1.0]}}, PAIR, 8
    )
    assert error.status == 400 and "[1, 2]" in error.message and "disagree" in error.message


def test_ragged_and_unreadable_dtypes_are_refused():
    matrix = {"m": TensorSpec("m", "DT_FLOAT", [None, None])}
    assert parse_predict_request({"instances": [[1, 2], [3, 4]]}, matrix, 8)[1]["m"].shape == (2, 2)
    error = refused(parse_predict_request, {"instances": [[1, 2], [3]]}, matrix, 8)
    assert error.status == 400 and "different shapes" in error.message
    cube = {"c": TensorSpec("c", "DT_FLOAT", [None, None, None])}
    error = refused(parse_predict_request, {"instances": [[[1, 2], [3]]]}, cube, 8)
    assert error.status == 400 and "ragged" in error.message
    complex_input = {"z": TensorSpec("z", "DT_COMPLEX64", [None])}
    error = refused(parse_predict_request, {"instances": [1]}, complex_input, 8)
    assert error.status == 400 and "DT_COMPLEX64" in error.message


def test_bools():
    flags = {"flag": TensorSpec("flag", "DT_BOOL", [None])}
    assert parse_predict_request({"instances": [True, False]}, flags, 8)[1]["flag"].tolist() == [
        True,
        False,
    ]
    error = refused(parse_predict_request, {"instances": [True, 1]}, flags, 8)
    assert error.status == 400 and "example 1" in error.message and "true or false" in error.message


# format_predict_response


def test_response_single_output():
    outputs = {"translation": np.array([b"hello", b""], dtype=object)}
    assert format_predict_response("row", outputs) == {"predictions": ["hello", ""]}
    assert format_predict_response("columnar", outputs) == {"outputs": ["hello", ""]}


def test_response_several_outputs():
    outputs = {
        "probabilities": np.array([[0.25, 0.75], [1.0, 0.0]], dtype=np.float32),
        "label": np.array([b"b", b"a"], dtype=object),
    }
    assert format_predict_response("row", outputs) == {
        "predictions": [
            {"probabilities": [0.25, 0.75], "label": "b"},
            {"probabilities": [1.0, 0.0], "label": "a"},
        ]
    }
    assert format_predict_response("columnar", outputs) == {
        "outputs": {
            "probabilities": [[0.25, 0.75], [1.0, 0.0]],
            "label": ["b", "a"],
        }
    }


def test_response_float32_values_round_trip_through_json():
    values = np.array([[0.1, 1 / 3, 2e-8]], dtype=np.float32)
    response = json.loads(json.dumps(format_predict_response("row", {"p": values})))
    np.testing.assert_array_equal(np.array(response["predictions"], dtype=np.float32), values)


def test_response_non_finite_floats_are_strings():
    outputs = {"x": np.array([[np.nan, np.inf], [-np.inf, 1.5]], dtype=np.float32)}
    response = format_predict_response("columnar", outputs)
    assert response == {"outputs": [["nan", "inf"], ["-inf", 1.5]]}
    json.dumps(response, allow_nan=False)  # what the server's JSON encoder demands


def test_response_non_utf8_bytes_are_b64():
    raw = b"caf\xe9\xff"
    outputs = {"tokens": np.array([[b"ok", raw], [b"", "é".encode()]], dtype=object)}
    response = format_predict_response("row", outputs)
    assert response["predictions"][0][0] == "ok" and response["predictions"][1] == ["", "é"]
    assert set(response["predictions"][0][1]) == {"b64"}
    assert base64.b64decode(response["predictions"][0][1]["b64"]) == raw


def test_response_integers_and_empty_batch():
    assert format_predict_response("row", {"ids": np.array([[1, 2]], dtype=np.int64)}) == {
        "predictions": [[1, 2]]
    }
    empty = {"probabilities": np.zeros((0, 3), np.float32), "label": np.zeros((0,), object)}
    assert format_predict_response("row", empty) == {"predictions": []}
    assert format_predict_response("columnar", empty) == {
        "outputs": {"probabilities": [], "label": []}
    }


def test_response_is_plain_json():
    outputs = {
        "p": np.array([0.5], np.float32),
        "n": np.array([3], np.int32),
        "s": np.array([b"x"], object),
    }
    response = format_predict_response("row", outputs)
    for value in response["predictions"][0].values():
        assert type(value) in (float, int, str)
    assert not math.isnan(response["predictions"][0]["p"])
