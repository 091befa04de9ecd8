"""The server answers a pretrained classifier's `embed` signature, once the operator
makes it public (`--signatures NAME:embed`), over REST (`"signature_name": "embed"`, row
and columnar formats) and gRPC `Predict`, with what the SavedModel answers when called
directly."""

import contextlib

import grpc
import numpy as np
import pytest
import tensorflow as tf
from starlette.testclient import TestClient
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from keras_transformer.serving import ModelRepository, ServerSettings, create_app
from keras_transformer.serving.model_config import model_configs, with_signatures
from tests.embedding_fixtures import (  # noqa: F401  embedding_export, embedding_saved_model: fixtures
    TEXTS,
    embedding_export,
    embedding_saved_model,
)
from tests.serving.serving_helpers import call_direct, free_port

RPC_TIMEOUT = 120.0


@pytest.fixture
def loaded(embedding_saved_model):  # noqa: F811  the fixture imported above
    return embedding_saved_model


@pytest.fixture
def serve(embedding_export, loaded):  # noqa: F811
    """`with serve(*signatures) as (client, stub):` the app serving the export as `encoder`,
    with `signatures` public, over REST (a TestClient) and gRPC (a stub on a free port)."""

    @contextlib.contextmanager
    def serve(*signatures):
        configs = with_signatures(model_configs({"encoder": embedding_export.base_dir}), signatures)
        repository = ModelRepository(configs, loader=lambda path: loaded, poll_seconds=0)
        port = free_port()
        app = create_app(repository, ServerSettings(grpc_port=port))
        with (
            TestClient(app, raise_server_exceptions=False) as client,
            grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
        ):
            yield client, prediction_service_pb2_grpc.PredictionServiceStub(channel)

    return serve


def test_embed_is_answered_over_rest_and_grpc_as_the_saved_model_answers(serve, loaded):
    expected = call_direct(loaded, TEXTS, "embed")["embedding"]
    with serve("encoder:embed") as (client, stub):
        rows = client.post(
            "/v1/models/encoder:predict", json={"signature_name": "embed", "instances": TEXTS}
        )
        assert rows.status_code == 200, rows.text
        # One output: each prediction is the embedding itself, as TensorFlow Serving answers.
        np.testing.assert_allclose(rows.json()["predictions"], expected, atol=1e-6, rtol=0)

        columns = client.post(
            "/v1/models/encoder:predict",
            json={"signature_name": "embed", "inputs": {"text": TEXTS[:3]}},
        )
        assert columns.status_code == 200, columns.text
        np.testing.assert_allclose(columns.json()["outputs"], expected[:3], atol=1e-6, rtol=0)

        request = predict_pb2.PredictRequest()
        request.model_spec.name = "encoder"
        request.model_spec.signature_name = "embed"
        request.inputs["text"].CopyFrom(tf.make_tensor_proto(TEXTS, dtype=tf.string))
        response = stub.Predict(request, timeout=RPC_TIMEOUT)
        assert list(response.outputs) == ["embedding"]
        assert response.model_spec.signature_name == "embed"
        answer = tf.make_ndarray(response.outputs["embedding"])
        assert answer.dtype == np.float32 and answer.shape == expected.shape
        np.testing.assert_allclose(answer, expected, atol=1e-6, rtol=0)

        metadata = client.get("/v1/models/encoder/metadata").json()["metadata"]
        outputs = metadata["signature_def"]["signature_def"]["embed"]["outputs"]
        assert outputs["embedding"]["dtype"] == "DT_FLOAT"
        sizes = [int(dim["size"]) for dim in outputs["embedding"]["tensor_shape"]["dim"]]
        assert sizes == [-1, expected.shape[1]]


def test_embed_is_not_served_unless_the_operator_names_it(serve):
    with serve() as (client, _):
        response = client.post(
            "/v1/models/encoder:predict", json={"signature_name": "embed", "instances": ["a"]}
        )
        assert response.status_code == 400
        assert 'signature name: "embed" not found' in response.json()["error"]
