"""TensorFlow Serving's gRPC API, through the official client code (the stubs of
`tensorflow-serving-api`, `tf.make_tensor_proto`): the same answers as REST
and as the SavedModel called directly, TensorFlow Serving's status codes for
every refusal, and one set of batching queues shared with REST."""

import asyncio
import contextlib
import functools
import logging
import re
import threading
import time

import grpc
import httpx
import numpy as np
import pytest
import tensorflow as tf
from starlette.testclient import TestClient
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from keras_transformer.serving import ModelRepository, ServerSettings, create_app
from keras_transformer.serving.grpc_api import tensor_inputs, write_tensor
from keras_transformer.serving.model_config import ModelConfig
from keras_transformer.serving.protocol import RequestError, TensorSpec
from keras_transformer.serving.repository import ServedVersion
from tests.serving.serving_helpers import (
    NON_UTF8_TEXT,
    TEXT_POOL,
    assert_classifier_answer,
    fail_on_marked_texts,
    free_port,
    join_threads,
    serve_process,
    serve_refusal,
    start_threads,
    text_bytes,
    text_json,
)
from tests.serving.test_app import shared_loader  # noqa: F401  its loader: one load per SavedModel and module

SOME_TEXTS = [
    "the cat sat on the mat",
    "",
    "la casa es azul",
    NON_UTF8_TEXT,
    "zebra quantum xylophone",
]
RPC_TIMEOUT = 120.0  # seconds; every call is bounded


class Stubs:
    """The official client's stubs on a channel to the gRPC API."""

    def __init__(self, channel):
        self.channel = channel
        self.prediction = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        self.models = model_service_pb2_grpc.ModelServiceStub(channel)

    def predict(self, request):
        return self.prediction.Predict(request, timeout=RPC_TIMEOUT)


def predict_request(model, texts, signature=None, version=None, output_filter=()):
    """A PredictRequest as TensorFlow Serving's client examples build it."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    if signature is not None:
        request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = version
    request.inputs["text"].CopyFrom(
        tf.make_tensor_proto([text_bytes(text) for text in texts], dtype=tf.string)
    )
    request.output_filter.extend(output_filter)
    return request


def outputs_of(response):
    return {name: tf.make_ndarray(tensor) for name, tensor in response.outputs.items()}


def assert_grpc_error(call, code, fragment):
    with pytest.raises(grpc.RpcError) as raised:
        call()
    assert raised.value.code() == code, (raised.value.code(), raised.value.details())
    assert fragment in raised.value.details(), raised.value.details()
    return raised.value.details()


# A real server process


@pytest.fixture(scope="module")
def server(api_server):
    """The session's real server (tests/serving/conftest.py), with stubs on its client channel;
    its stop with that channel open is checked where the session ends."""
    api_server.stubs = Stubs(api_server.grpc_channel)
    return api_server


@pytest.mark.timeout(600)  # the session's exports and the server start inside it when it runs first
def test_classifier_over_grpc_equals_rest_and_direct(server, direct_answers):
    response = server.stubs.predict(predict_request("classifier", SOME_TEXTS))
    assert response.model_spec.name == "classifier"
    assert response.model_spec.version.value == 1
    assert response.model_spec.signature_name == "serving_default"
    outputs = outputs_of(response)
    assert sorted(outputs) == ["label", "probabilities"]
    assert outputs["probabilities"].dtype == np.float32 and outputs["probabilities"].shape == (
        len(SOME_TEXTS),
        3,
    )
    rest = httpx.post(
        f"{server.url}/v1/models/classifier:predict",
        json={"instances": [text_json(text) for text in SOME_TEXTS]},
        timeout=RPC_TIMEOUT,
    )
    assert rest.status_code == 200, rest.text
    for index, text in enumerate(SOME_TEXTS):
        answer = {
            "probabilities": outputs["probabilities"][index],
            "label": outputs["label"][index].decode(),
        }
        assert_classifier_answer(answer, direct_answers[("classifier", 1)][text])
        assert_classifier_answer(
            rest.json()["predictions"][index],
            (outputs["probabilities"][index], outputs["label"][index]),
        )


def test_translator_over_grpc_equals_rest_and_direct(server, direct_answers, direct_models):
    response = server.stubs.predict(predict_request("translator", SOME_TEXTS, version=1))
    translations = outputs_of(response)["translation"].tolist()
    assert translations == [direct_answers[("translator", 1)][text] for text in SOME_TEXTS]
    rest = httpx.post(
        f"{server.url}/v1/models/translator:predict",
        json={"instances": [text_json(text) for text in SOME_TEXTS]},
        timeout=RPC_TIMEOUT,
    )
    assert rest.json()["predictions"] == [translation.decode() for translation in translations]

    from tests.serving.serving_helpers import call_direct

    greedy = server.stubs.predict(predict_request("translator", SOME_TEXTS, signature="greedy"))
    assert greedy.model_spec.signature_name == "greedy"
    direct = call_direct(direct_models[("translator", 1)], SOME_TEXTS, signature="greedy")
    assert outputs_of(greedy)["translation"].tolist() == direct["translation"].tolist()


def test_output_filter(server):
    response = server.stubs.predict(
        predict_request("classifier", SOME_TEXTS[:2], output_filter=["label"])
    )
    assert list(response.outputs) == ["label"]
    full = outputs_of(server.stubs.predict(predict_request("classifier", SOME_TEXTS[:2])))
    assert outputs_of(response)["label"].tolist() == full["label"].tolist()


def test_metadata_matches_rest(server):
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "translator"
    request.metadata_field.append("signature_def")
    response = server.stubs.prediction.GetModelMetadata(request, timeout=RPC_TIMEOUT)
    assert response.model_spec.name == "translator" and response.model_spec.version.value == 1
    signature_defs = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(signature_defs)
    rest = httpx.get(f"{server.url}/v1/models/translator/metadata", timeout=RPC_TIMEOUT).json()
    rest_defs = rest["metadata"]["signature_def"]["signature_def"]
    assert sorted(signature_defs.signature_def) == sorted(rest_defs)
    for name, rest_def in rest_defs.items():
        signature_def = signature_defs.signature_def[name]
        assert signature_def.method_name == rest_def["method_name"]
        for grpc_infos, rest_infos in (
            (signature_def.inputs, rest_def["inputs"]),
            (signature_def.outputs, rest_def["outputs"]),
        ):
            assert sorted(grpc_infos) == sorted(rest_infos)
            for key, info in grpc_infos.items():
                assert types_pb2.DataType.Name(info.dtype) == rest_infos[key]["dtype"]
                assert [str(dim.size) for dim in info.tensor_shape.dim] == [
                    dim["size"] for dim in rest_infos[key]["tensor_shape"]["dim"]
                ]
    serving_default = signature_defs.signature_def["serving_default"]
    assert serving_default.inputs["text"].dtype == tf.string.as_datatype_enum
    assert [dim.size for dim in serving_default.inputs["text"].tensor_shape.dim] == [-1]


def test_model_status(server):
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "classifier"
    response = server.stubs.models.GetModelStatus(request, timeout=RPC_TIMEOUT)
    (status,) = response.model_version_status
    assert status.version == 1
    assert status.state == get_model_status_pb2.ModelVersionStatus.AVAILABLE
    assert status.status.error_code == 0 and status.status.error_message == ""
    request.model_spec.version.value = 1
    assert (
        server.stubs.models.GetModelStatus(request, timeout=RPC_TIMEOUT)
        .model_version_status[0]
        .version
        == 1
    )
    request.model_spec.version.value = 3
    assert_grpc_error(
        lambda: server.stubs.models.GetModelStatus(request, timeout=RPC_TIMEOUT),
        grpc.StatusCode.NOT_FOUND,
        "Could not find version 3 of model classifier",
    )


def test_refusals_over_a_real_server(server):
    stubs = server.stubs
    assert_grpc_error(
        lambda: stubs.predict(predict_request("nobody", ["a"])),
        grpc.StatusCode.NOT_FOUND,
        "Servable not found for request: Latest(nobody)",
    )
    assert_grpc_error(
        lambda: stubs.predict(predict_request("classifier", ["a"], version=2)),
        grpc.StatusCode.NOT_FOUND,
        "Servable not found for request: Specific(classifier, 2)",
    )
    assert_grpc_error(
        lambda: stubs.predict(predict_request("classifier", ["a"] * 9)),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "9 examples in one request; the limit is 8",
    )
    assert_grpc_error(
        lambda: stubs.predict(predict_request("classifier", ["a"], signature="nope")),
        grpc.StatusCode.INVALID_ARGUMENT,
        'Serving signature name: "nope" not found in signature def',
    )
    assert_grpc_error(
        lambda: stubs.prediction.Classify(classification_pb2.ClassificationRequest(), timeout=30),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Missing ModelSpec",
    )
    # The server still answers, and its log holds no traceback for any of these.
    assert stubs.predict(predict_request("classifier", ["a"])).model_spec.version.value == 1
    assert "Traceback" not in server.log()


# The app in process


@pytest.fixture(scope="module")
def serve(exports, shared_loader):  # noqa: F811  the fixture imported above
    """`with serve(**settings) as (client, stubs):` the app serving the classifier and the
    translator
    over REST (a TestClient) and gRPC (stubs on a free port)."""

    @contextlib.contextmanager
    def serve(**settings):
        configs = [
            ModelConfig("classifier", exports.classifier, version_labels={"stable": 1}),
            ModelConfig("translator", exports.translator),
        ]
        repository = ModelRepository(configs, loader=shared_loader, poll_seconds=0)
        port = free_port()
        app = create_app(repository, ServerSettings(grpc_port=port, **settings))
        with (
            TestClient(app, raise_server_exceptions=False) as client,
            grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
        ):
            yield client, Stubs(channel)

    return serve


@pytest.fixture(scope="module")
def app(serve):
    with serve(max_body_bytes=4096, max_instances=8) as (client, stubs):
        yield client, stubs


def float_request(model="classifier"):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.inputs["text"].CopyFrom(tf.make_tensor_proto([1.0, 2.0]))
    return request


def with_input(tensor, model="classifier", name="text"):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.inputs[name].CopyFrom(tensor)
    return request


def unfilled_strings():
    tensor = tf.make_tensor_proto([b"a", b"b", b"c"], dtype=tf.string)
    tensor.tensor_shape.dim[0].size = 2  # three values for two elements
    return tensor


def two_inputs():
    request = predict_request("classifier", ["a"])
    request.inputs["extra"].CopyFrom(tf.make_tensor_proto([b"b"], dtype=tf.string))
    return request


def labelled():
    request = predict_request("classifier", ["a"])
    request.model_spec.version_label = "canary"
    return request


@pytest.mark.parametrize(
    "request_factory, fragment",
    [
        (lambda: predict_request("", ["a"]), "model_spec.name is empty"),
        (
            lambda: predict_request("translator", ["a"], signature="beam"),
            'Serving signature name: "beam" not found',
        ),
        (float_request, "Input 'text' has dtype DT_FLOAT; the signature expects DT_STRING"),
        (
            lambda: with_input(tf.make_tensor_proto([[b"a"]], dtype=tf.string)),
            "Input 'text' has shape [1, 1]; the signature expects ['?']",
        ),
        (
            lambda: with_input(tf.make_tensor_proto(b"a", dtype=tf.string)),
            "Input 'text' has shape []",
        ),
        (
            lambda: with_input(tf.make_tensor_proto([b"a"], dtype=tf.string), name="words"),
            "The signature's inputs are ['text']; missing ['text']; unknown 'words'",
        ),
        (two_inputs, "unknown 'extra'"),
        (
            lambda: with_input(unfilled_strings()),
            "Input 'text': its values do not fill its shape [2] as dtype DT_STRING",
        ),
        (
            lambda: predict_request("classifier", ["a"], output_filter=["logits"]),
            "output tensor alias not found in signature: 'logits'",
        ),
        (
            lambda: predict_request("classifier", ["a"], output_filter=["label", "label"]),
            "duplicate output tensor alias: 'label'",
        ),
        (labelled, "Unrecognized servable version label: canary"),
    ],
)
def test_bad_predict_requests_are_invalid_argument(app, request_factory, fragment):
    _, stubs = app
    assert_grpc_error(
        lambda: stubs.predict(request_factory()), grpc.StatusCode.INVALID_ARGUMENT, fragment
    )


def test_a_version_label_resolves_to_its_version(app):
    _, stubs = app
    request = predict_request("classifier", ["the cat sat on the mat"])
    request.model_spec.version_label = "stable"
    assert stubs.predict(request).model_spec.version.value == 1
    status_request = get_model_status_pb2.GetModelStatusRequest()
    status_request.model_spec.name = "classifier"
    status_request.model_spec.version_label = "stable"
    statuses = stubs.models.GetModelStatus(status_request, timeout=RPC_TIMEOUT).model_version_status
    assert [(status.version, status.state) for status in statuses] == [
        (1, get_model_status_pb2.ModelVersionStatus.State.AVAILABLE)
    ]


def test_grpc_calls_are_counted_in_the_metrics(app):
    from tests.serving.test_metrics import request_count, scrape

    client, stubs = app
    before = scrape(client)
    for _ in range(3):
        stubs.predict(predict_request("classifier", ["the cat sat on the mat"]))
    assert_grpc_error(
        lambda: stubs.predict(predict_request("nope", ["a"])), grpc.StatusCode.NOT_FOUND, "nope"
    )
    after = scrape(client)

    def added(**labels):
        return request_count(after, api="grpc", **labels) - request_count(
            before, api="grpc", **labels
        )

    assert added(model="classifier", version="1", signature="serving_default", status="OK") == 3
    assert added(status="NOT_FOUND") == 1  # an unknown model is not a label value


def test_an_answer_over_the_response_cap_is_resource_exhausted(serve):
    texts = ["the cat sat on the mat"] * 8
    with serve(max_response_bytes=200) as (_, stubs):
        assert_grpc_error(
            lambda: stubs.predict(predict_request("classifier", texts)),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "",
        )
        assert len(stubs.predict(predict_request("classifier", texts[:1])).outputs) == 2


def test_a_long_client_string_is_quoted_short(app):
    _, stubs = app
    details = assert_grpc_error(
        lambda: stubs.predict(predict_request("classifier", ["a"], output_filter=["x" * 500])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "output tensor alias not found",
    )
    assert "x" * 65 not in details and "x" * 64 in details


def test_a_long_model_name_is_cut_from_the_details(app):
    _, stubs = app
    details = assert_grpc_error(
        lambda: stubs.predict(predict_request("m" * 3000, ["a"])),
        grpc.StatusCode.NOT_FOUND,
        "Servable not found for request: Latest(mmm",
    )
    assert len(details) == 1003 and details.endswith("...")


def test_limits_are_resource_exhausted(app):
    _, stubs = app
    assert_grpc_error(
        lambda: stubs.predict(predict_request("classifier", ["a"] * 9)),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "9 examples in one request; the limit is 8",
    )
    # One value given for a billion elements: refused by its shape, before anything is allocated.
    huge = tf.make_tensor_proto([b"a"], dtype=tf.string)
    huge.tensor_shape.dim[0].size = 10**9
    assert_grpc_error(
        lambda: stubs.predict(with_input(huge)),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "1000000000 examples in one request",
    )
    # A message over max_body_bytes (4096) is refused by gRPC itself.
    assert_grpc_error(
        lambda: stubs.predict(predict_request("classifier", ["a" * 5000])),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "larger than max",
    )
    assert stubs.predict(predict_request("classifier", ["a" * 3000])).outputs["label"].string_val


def test_metadata_refusals(app):
    _, stubs = app
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "classifier"
    metadata = stubs.prediction.GetModelMetadata
    assert_grpc_error(
        lambda: metadata(request, timeout=30),
        grpc.StatusCode.INVALID_ARGUMENT,
        "must name a metadata_field",
    )
    request.metadata_field.append("signature_def")
    request.metadata_field.append("graph")
    assert_grpc_error(
        lambda: metadata(request, timeout=30),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Metadata field 'graph' is not supported",
    )
    request.model_spec.name = "nobody"
    assert_grpc_error(
        lambda: metadata(request, timeout=30), grpc.StatusCode.NOT_FOUND, "Latest(nobody)"
    )
    status = get_model_status_pb2.GetModelStatusRequest()
    status.model_spec.name = "nobody"
    assert_grpc_error(
        lambda: stubs.models.GetModelStatus(status, timeout=30),
        grpc.StatusCode.NOT_FOUND,
        "Latest(nobody)",
    )


@pytest.mark.parametrize(
    "status, code",
    [
        (503, grpc.StatusCode.UNAVAILABLE),
        (504, grpc.StatusCode.DEADLINE_EXCEEDED),
        (413, grpc.StatusCode.RESOURCE_EXHAUSTED),
        (500, grpc.StatusCode.INTERNAL),
        (418, grpc.StatusCode.INTERNAL),
    ],
)
def test_service_refusals_carry_tensorflow_serving_codes(app, monkeypatch, status, code):
    client, stubs = app

    async def refusing(*args, **kwargs):
        raise RequestError(status, f"refused with {status}")

    monkeypatch.setattr(client.app.state.service, "predict", refusing)
    assert_grpc_error(
        lambda: stubs.predict(predict_request("classifier", ["a"])), code, f"refused with {status}"
    )


def test_model_failures(app, monkeypatch, caplog):
    _, stubs = app
    fail_on_marked_texts(monkeypatch)
    details = assert_grpc_error(
        lambda: stubs.predict(predict_request("classifier", ["bad input"])),
        grpc.StatusCode.INVALID_ARGUMENT,
        "the model refuses this",
    )
    assert "second line" not in details
    details = assert_grpc_error(
        lambda: stubs.predict(predict_request("classifier", ["server bug"])),
        grpc.StatusCode.INTERNAL,
        "RuntimeError",
    )
    assert "boom" not in details
    assert stubs.predict(predict_request("classifier", ["fine"])).outputs["label"].string_val


def test_a_bug_in_the_handler_is_internal_and_logged(app, monkeypatch, caplog):
    _, stubs = app

    def broken(*args):
        raise KeyError("a bug")

    monkeypatch.setattr("keras_transformer.serving.grpc_api.tensor_inputs", broken)
    caplog.set_level(logging.INFO, logger="keras_transformer.serving")
    details = assert_grpc_error(
        lambda: stubs.predict(predict_request("classifier", ["a"])),
        grpc.StatusCode.INTERNAL,
        "Internal error",
    )
    assert "a bug" not in details
    assert any(record.exc_info and record.exc_info[0] is KeyError for record in caplog.records)


def test_a_cancelled_call_cancels_its_handler(app, monkeypatch, caplog):
    """gRPC cancels the handler when its client cancels or its deadline passes, and so the service's
    `predict`: what lets queued work whose client left be dropped."""
    client, stubs = app
    started, cancelled = threading.Event(), threading.Event()

    async def waiting(*args, **kwargs):
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    monkeypatch.setattr(client.app.state.service, "predict", waiting)
    caplog.set_level(logging.INFO, logger="keras_transformer.serving")
    call = stubs.prediction.Predict.future(
        predict_request("classifier", ["a"]), timeout=RPC_TIMEOUT
    )
    assert started.wait(30)
    call.cancel()
    assert cancelled.wait(30)
    _wait_for_log_lines(caplog, "status=CANCELLED", 1)

    # A client's deadline passing does the same: it gets DEADLINE_EXCEEDED and the work is
    # cancelled.
    started.clear()
    cancelled.clear()
    assert_grpc_error(
        lambda: stubs.prediction.Predict(predict_request("classifier", ["a"]), timeout=1.0),
        grpc.StatusCode.DEADLINE_EXCEEDED,
        "Deadline Exceeded",
    )
    assert started.is_set() and cancelled.wait(30)
    # The handler logs its line after the cancellation reaches it; wait for it here so that it
    # cannot land in
    # the log the next test captures.
    _wait_for_log_lines(caplog, "status=CANCELLED", 2)


def _wait_for_log_lines(caplog, text, count):
    deadline = time.monotonic() + 30
    while sum(text in record.getMessage() for record in caplog.records) < count:
        assert time.monotonic() < deadline, [record.getMessage() for record in caplog.records]
        time.sleep(0.05)


LOG_LINE = re.compile(
    r"^GRPC (?P<method>\w+) model=(?P<model>\S+) version=(?P<version>\S+) instances=(?P<instances>\S+) "
    r"status=(?P<status>[A-Z_]+) latency_ms=(?P<latency>[0-9.]+)$"
)


def test_one_log_line_per_call_and_no_traceback_for_client_faults(app, caplog):
    _, stubs = app
    caplog.set_level(logging.INFO, logger="keras_transformer.serving")
    stubs.predict(predict_request("classifier", ["a", "b"]))
    with contextlib.suppress(grpc.RpcError):
        stubs.predict(predict_request("translator", ["a"], version=7))
    with contextlib.suppress(grpc.RpcError):
        stubs.predict(float_request())
    status = get_model_status_pb2.GetModelStatusRequest()
    status.model_spec.name = "translator"
    stubs.models.GetModelStatus(status, timeout=30)
    records = [record for record in caplog.records if record.name == "keras_transformer.serving"]
    assert not any(record.exc_info for record in records)
    parsed = [LOG_LINE.match(record.getMessage()) for record in records]
    assert all(parsed), [record.getMessage() for record in records]
    assert [
        (m["method"], m["model"], m["version"], m["instances"], m["status"]) for m in parsed
    ] == [
        ("Predict", "classifier", "1", "2", "OK"),
        ("Predict", "translator", "-", "-", "NOT_FOUND"),
        ("Predict", "classifier", "1", "-", "INVALID_ARGUMENT"),
        ("GetModelStatus", "translator", "-", "-", "OK"),
    ]


@pytest.mark.timeout(600)
def test_grpc_and_rest_calls_share_batches_and_each_gets_its_rows(
    serve, monkeypatch, direct_answers
):
    calls = []
    lock = threading.Lock()
    original = ServedVersion.run

    def recording(self, signature_name, inputs):
        with lock:
            calls.append(set(inputs["text"].tolist()))
        return original(self, signature_name, inputs)

    rest_texts = [TEXT_POOL[index] for index in range(3, 9)]
    grpc_texts = [TEXT_POOL[index : index + 2] for index in range(10, 22, 2)]  # two texts per call
    answers = {}
    # A window long enough that, on a loaded machine, the gRPC calls (slower to parse)
    # still reach a batch the REST calls opened.
    with serve(max_batch_size=64, batch_timeout_ms=1000) as (client, stubs):
        monkeypatch.setattr(ServedVersion, "run", recording)
        barrier = threading.Barrier(len(rest_texts) + len(grpc_texts), timeout=60)

        def send_rest(text):
            barrier.wait()
            response = client.post(
                "/v1/models/translator:predict", json={"instances": [text_json(text)]}
            )
            answers[text] = response.json()["predictions"]

        def send_grpc(texts):
            barrier.wait()
            translations = outputs_of(stubs.predict(predict_request("translator", texts)))[
                "translation"
            ]
            answers[tuple(texts)] = [translation.decode() for translation in translations]

        targets = [functools.partial(send_rest, text) for text in rest_texts]
        targets += [functools.partial(send_grpc, texts) for texts in grpc_texts]
        join_threads(start_threads(targets, "client"), 120)
    expected = direct_answers[("translator", 1)]
    for text in rest_texts:
        assert answers[text] == [expected[text].decode()]
    for texts in grpc_texts:
        assert answers[tuple(texts)] == [expected[text].decode() for text in texts]
    rest_bytes = {text_bytes(text) for text in rest_texts}
    grpc_bytes = {text_bytes(text) for texts in grpc_texts for text in texts}
    assert any(call & rest_bytes and call & grpc_bytes for call in calls), calls


# Unit: a PredictRequest's inputs against a signature of two inputs


SPECS = {
    "ids": TensorSpec("ids", "DT_INT32", [None, None]),
    "weights": TensorSpec("weights", "DT_FLOAT", [None, 3]),
}


def test_tensor_inputs_of_two_inputs():
    ids = np.arange(8, dtype=np.int32).reshape(2, 4)
    weights = np.ones((2, 3), dtype=np.float32)
    arrays, batch_size = tensor_inputs(
        {"ids": tf.make_tensor_proto(ids), "weights": tf.make_tensor_proto(weights)},
        SPECS,
        max_instances=8,
        max_elements=100,
    )
    assert batch_size == 2
    np.testing.assert_array_equal(arrays["ids"], ids)
    np.testing.assert_array_equal(arrays["weights"], weights)


@pytest.mark.parametrize(
    "ids, weights, status, fragment",
    [
        (
            np.zeros((2, 4), np.int32),
            np.zeros((3, 3), np.float32),
            400,
            "The inputs disagree on the number of examples: {'ids': 2, 'weights': 3}",
        ),
        (
            np.zeros((2, 4), np.int32),
            np.zeros((2, 4), np.float32),
            400,
            "Input 'weights' has shape [2, 4]; the signature expects ['?', 3]",
        ),
        (
            np.zeros((9, 1), np.int32),
            np.zeros((9, 3), np.float32),
            413,
            "9 examples in one request; the limit is 8",
        ),
        (
            np.zeros((2, 4), np.int64),
            np.zeros((2, 3), np.float32),
            400,
            "Input 'ids' has dtype DT_INT64",
        ),
    ],
)
def test_tensor_inputs_refusals(ids, weights, status, fragment):
    tensors = {"ids": tf.make_tensor_proto(ids), "weights": tf.make_tensor_proto(weights)}
    with pytest.raises(RequestError) as raised:
        tensor_inputs(tensors, SPECS, max_instances=8, max_elements=100)
    assert raised.value.status == status and fragment in raised.value.message, raised.value.message


def test_tensor_inputs_bound_the_elements_a_few_bytes_ask_for():
    ids = tf.make_tensor_proto(np.int32(7))
    ids.tensor_shape.dim.add().size = 2
    ids.tensor_shape.dim.add().size = 10**9  # one value, two billion elements
    tensors = {"ids": ids, "weights": tf.make_tensor_proto(np.zeros((2, 3), np.float32))}
    with pytest.raises(RequestError) as raised:
        tensor_inputs(tensors, SPECS, max_instances=8, max_elements=100)
    assert raised.value.status == 400
    assert (
        "Input 'ids' has 2000000000 elements; this server takes at most 100" in raised.value.message
    )


def test_tensor_inputs_with_a_wrong_tensor_content_length():
    ids = tf.make_tensor_proto(np.zeros((2, 4), np.int32))
    ids.tensor_content = ids.tensor_content[:-1]
    tensors = {"ids": ids, "weights": tf.make_tensor_proto(np.zeros((2, 3), np.float32))}
    with pytest.raises(RequestError) as raised:
        tensor_inputs(tensors, SPECS, max_instances=8, max_elements=100)
    assert (
        "Input 'ids': its values do not fill its shape [2, 4] as dtype DT_INT32"
        in raised.value.message
    )


# apps.serve's flags for the gRPC port: --port, as TensorFlow Serving's, and --grpc-port


@pytest.mark.parametrize("flag", ["--port", "--grpc-port"])
def test_a_taken_grpc_port_is_a_one_line_error(tmp_path, flag):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve_process(
            "--model", f"m={tmp_path}", "--rest_api_port", str(free_port()), flag, str(port)
        )
    assert result.returncode != 0
    assert (
        result.stderr.strip()
        == f"error: {flag} {port}: cannot listen on 127.0.0.1: Address already in use"
    )


def test_a_port_taken_after_the_check_still_stops_the_start(exports, monkeypatch):
    """The bind inside the app's start (the port may be taken between the check and it)."""
    import socket

    with socket.socket() as taken:
        # As another gRPC server would hold it: one that also shares by SO_REUSEPORT.
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        app = create_app(
            ModelRepository({"classifier": exports.classifier}, poll_seconds=0),
            ServerSettings(grpc_port=port),
        )
        with pytest.raises(
            OSError, match=f"The gRPC API cannot listen on 127.0.0.1:{port}: is the port taken"
        ):
            with TestClient(app):
                pass


@pytest.mark.parametrize(
    "args, message",
    [
        (["--grpc-port", "70000"], "error: --grpc-port must be between 0 and 65535, got 70000"),
        (["--port=-1"], "error: --port must be between 0 and 65535, got -1"),
        (
            ["--grpc-port", "9000", "--rest_api_port", "9000"],
            "error: --grpc-port and --rest_api_port are both 9000",
        ),
        (
            ["--port=9000", "--rest-api-port=9000"],
            "error: --port and --rest-api-port are both 9000",
        ),
        (["--port", "0"], "error: --port and --rest_api_port are both 0: nothing would listen"),
    ],
)
def test_grpc_port_values(tmp_path, args, message):
    result = serve_refusal("--model", f"m={tmp_path}", *args)
    assert result.returncode != 0 and result.stderr.strip() == message


@pytest.mark.parametrize(
    "array",
    [
        np.array([[0.25, -1.5, 3e-8]], dtype=np.float32),
        np.arange(6, dtype=np.float64).reshape(3, 2),
        np.array([7, -8], dtype=np.int32),
        np.array([[2**40]], dtype=np.int64),
        np.array([[2**40, -1]], dtype=np.int64),
        np.zeros((0, 3), dtype=np.float32),
        np.array([b"la casa", b"", NON_UTF8_TEXT], dtype=object),
        np.array([[b"a"], [b"b"]], dtype=object),
        np.array([], dtype=object),
        np.array([True, False]),  # written by tf.make_tensor_proto itself
        np.float32(1.5),
        np.array([1, 2], dtype=np.uint8),
    ],
)
def test_write_tensor_writes_what_make_tensor_proto_does(array):
    proto = predict_pb2.PredictResponse().outputs["x"]
    write_tensor(proto, array)
    assert proto == tf.make_tensor_proto(array)
    np.testing.assert_array_equal(tf.make_ndarray(proto), array)
