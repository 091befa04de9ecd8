"""The translator's `translate` signature over REST and gRPC: its per-request
controls (beam width, number of translations, sampling) as inputs, the ones a
request leaves out filled in from the export's `translator.json`, and a value
out of range or of the wrong type refused with a 400 / INVALID_ARGUMENT that
names the input, before the model runs. The answers are compared with the
same SavedModel called directly."""

import contextlib

import grpc
import numpy as np
import pytest
import tensorflow as tf
from starlette.testclient import TestClient
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from keras_transformer.serving import ModelRepository, ServerSettings, create_app
from keras_transformer.serving.model_config import ModelConfig
from tests.serving.serving_helpers import free_port
from tests.serving.test_app import shared_loader  # noqa: F401  its loader: one load per SavedModel

TEXTS = ["the cat sat on the mat", "la casa es azul", ""]
# The serving exports' translator has a beam width of 2 (tests/serving/serving_helpers.py).
DEFAULTS = {
    "beam_width": 2,
    "num_translations": 1,
    "sampling": False,
    "temperature": 1.0,
    "top_k": 0,
    "top_p": 1.0,
    "seed": 0,
}
PREDICT = "/v1/models/translator:predict"


@pytest.fixture(scope="module")
def app(exports, shared_loader):  # noqa: F811  the fixture imported above
    """(REST TestClient, gRPC stub) of an app serving the translator with `translate` public."""
    configs = [ModelConfig("translator", exports.translator, signatures=("translate",))]
    repository = ModelRepository(configs, loader=shared_loader, poll_seconds=0)
    port = free_port()
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(
            TestClient(
                create_app(repository, ServerSettings(grpc_port=port)),
                raise_server_exceptions=False,
            )
        )
        channel = stack.enter_context(grpc.insecure_channel(f"127.0.0.1:{port}"))
        yield client, prediction_service_pb2_grpc.PredictionServiceStub(channel)


def direct(direct_models, texts, **controls):
    """The SavedModel's own `translate` answer: (translations as str `[B, K]`, scores)."""
    signature = direct_models[("translator", 1)].signatures["translate"]
    specs = signature.structured_input_signature[1]
    arguments = {
        name: tf.constant(value, specs[name].dtype)
        for name, value in {**DEFAULTS, **controls}.items()
    }
    outputs = signature(text=tf.constant(texts), **arguments)
    translations = [[text.decode() for text in row] for row in outputs["translations"].numpy()]
    return translations, outputs["scores"].numpy()


def rest(client, body):
    return client.post(PREDICT, json={"signature_name": "translate", **body})


def test_rest_columnar_controls_left_out_take_the_exports_defaults(app, direct_models):
    client, _ = app
    response = rest(client, {"inputs": {"text": TEXTS, "num_translations": 2}})
    assert response.status_code == 200, response.text
    outputs = response.json()["outputs"]
    translations, scores = direct(direct_models, TEXTS, num_translations=2)
    assert outputs["translations"] == translations
    np.testing.assert_allclose(outputs["scores"], scores, rtol=1e-6)
    # No control at all: serving_default's answer in the first column.
    response = rest(client, {"inputs": {"text": TEXTS}})
    beam = direct_models[("translator", 1)].signatures["serving_default"](text=tf.constant(TEXTS))
    assert [row[0] for row in response.json()["outputs"]["translations"]] == [
        text.decode() for text in beam["translation"].numpy()
    ]


def test_rest_row_format_carries_the_controls_in_every_instance(app, direct_models):
    client, _ = app
    controls = {"sampling": True, "seed": 5, "temperature": 2.0, "num_translations": 2}
    response = rest(client, {"instances": [{"text": text, **controls} for text in TEXTS]})
    assert response.status_code == 200, response.text
    translations, scores = direct(direct_models, TEXTS, **controls)
    predictions = response.json()["predictions"]
    assert [prediction["translations"] for prediction in predictions] == translations
    np.testing.assert_allclose([p["scores"] for p in predictions], scores, rtol=1e-6)


@pytest.mark.parametrize(
    "inputs, fragment",
    [
        ({"beam_width": 3}, "Input 'beam_width' must be between 1 and 2, got 3"),
        ({"beam_width": 0}, "Input 'beam_width' must be between 1 and 2, got 0"),
        (
            {"beam_width": 1, "num_translations": 2},
            "Input 'num_translations' must be between 1 and 1 (Input 'beam_width'), got 2",
        ),
        ({"top_p": 0}, "Input 'top_p' must be above 0.0 and at most 1.0, got 0.0"),
        ({"beam_width": "two"}, "input 'beam_width', example 0: expected a number"),
        ({"beam_width": 1.5}, "input 'beam_width', example 0: expected an integer"),
        ({"sampling": 1}, "input 'sampling', example 0: expected true or false"),
        ({"beam_width": [2, 2]}, "input 'beam_width' is one value per request"),
        ({"width": 2}, "the signature's inputs are"),
    ],
)
def test_rest_refuses_bad_controls_naming_the_input(app, inputs, fragment):
    client, _ = app
    response = rest(client, {"inputs": {"text": TEXTS, **inputs}})
    assert response.status_code == 400, response.text
    assert fragment in response.json()["error"]


def test_rest_instances_must_agree_on_a_control(app):
    client, _ = app
    instances = [{"text": "a", "beam_width": 1}, {"text": "b", "beam_width": 2}]
    response = rest(client, {"instances": instances})
    assert response.status_code == 400
    assert "Input 'beam_width' is one value per request" in response.json()["error"]


def grpc_request(texts, **controls):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "translator"
    request.model_spec.signature_name = "translate"
    request.inputs["text"].CopyFrom(tf.make_tensor_proto(texts, dtype=tf.string))
    for name, (value, dtype) in controls.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value, dtype=dtype))
    return request


def test_grpc_controls_answer_as_the_signature(app, direct_models):
    _, stub = app
    response = stub.Predict(
        grpc_request(TEXTS, beam_width=(1, tf.int32), num_translations=(1, tf.int32)),
        timeout=120,
    )
    translations = tf.make_ndarray(response.outputs["translations"])
    wanted, scores = direct(direct_models, TEXTS, beam_width=1)
    assert [[text.decode() for text in row] for row in translations] == wanted
    np.testing.assert_allclose(tf.make_ndarray(response.outputs["scores"]), scores, rtol=1e-6)


@pytest.mark.parametrize(
    "controls, fragment",
    [
        ({"beam_width": (3, tf.int32)}, "Input 'beam_width' must be between 1 and 2, got 3"),
        ({"num_translations": (3, tf.int32)}, "Input 'num_translations' must be between 1 and 2"),
        ({"beam_width": (2, tf.int64)}, "Input 'beam_width' has dtype DT_INT64"),
        ({"beam_width": ([2], tf.int32)}, "Input 'beam_width' has shape [1]"),
    ],
)
def test_grpc_refuses_bad_controls_as_invalid_argument(app, controls, fragment):
    _, stub = app
    with pytest.raises(grpc.RpcError) as raised:
        stub.Predict(grpc_request(TEXTS, **controls), timeout=120)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert fragment in raised.value.details(), raised.value.details()
