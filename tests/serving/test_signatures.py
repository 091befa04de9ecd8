"""Only what should be public: a served version exposes `serving_default` and
the signatures an operator names (`--signatures NAME` for every model,
`MODEL:NAME` for one); the exports' others (`attention`, megabytes of JSON
per example) get TensorFlow Serving's "not found in signature def" 400 and
are absent from the metadata. The filter is applied where a version loads."""

import logging

import httpx
import numpy as np
import pytest
from starlette.testclient import TestClient

from keras_transformer.serving import ModelRepository, create_app
from keras_transformer.serving.model_config import model_configs, with_signatures
from tests.serving.serving_helpers import call_direct


def not_found(signature, served):
    return {
        "error": f'Serving signature name: "{signature}" not found in signature def; this model has {served}.'
    }


@pytest.fixture(scope="module")
def serve(exports, direct_models_loader):
    def serve(*signatures):
        configs = model_configs(
            {"classifier": exports.classifier, "translator": exports.translator}
        )
        repository = ModelRepository(
            with_signatures(configs, signatures), loader=direct_models_loader, poll_seconds=0
        )
        return TestClient(create_app(repository), raise_server_exceptions=False)

    return serve


def predict(client, model, signature, texts=("the cat sat on the mat",)):
    return client.post(
        f"/v1/models/{model}:predict", json={"signature_name": signature, "instances": list(texts)}
    )


def metadata_signatures(client, model):
    return set(
        client.get(f"/v1/models/{model}/metadata").json()["metadata"]["signature_def"][
            "signature_def"
        ]
    )


# Unnamed, a version serves serving_default and its classification or regression signatures
# (the classifier's `classify`, for TensorFlow Serving's Classify), nothing else.
DEFAULT_PUBLIC = {"classifier": ["classify", "serving_default"], "translator": ["serving_default"]}


def test_by_default_only_serving_default_and_classify_are_served(serve, direct_models):
    with serve() as client:
        for model in ("classifier", "translator"):
            assert metadata_signatures(client, model) == set(DEFAULT_PUBLIC[model])
            response = predict(client, model, "attention")
            assert (response.status_code, response.json()) == (
                400,
                not_found("attention", DEFAULT_PUBLIC[model]),
            )
        response = predict(client, "translator", "greedy")
        assert (response.status_code, response.json()) == (
            400,
            not_found("greedy", ["serving_default"]),
        )
        # The served version holds only the public signatures, whichever API asks.
        served = client.app.state.service.servable("translator")
        assert (
            set(served.signatures)
            == set(served.inputs)
            == set(served.outputs)
            == {"serving_default"}
        )
        response = predict(client, "translator", "serving_default")
        assert response.status_code == 200
        expected = call_direct(direct_models[("translator", 1)], ["the cat sat on the mat"])[
            "translation"
        ]
        assert response.json()["predictions"] == [text.decode() for text in expected]


def test_named_signatures_for_every_model_or_one(serve, direct_models, caplog):
    caplog.set_level(logging.WARNING, logger="keras_transformer.serving")
    with serve("attention", "translator:greedy") as client:
        assert metadata_signatures(client, "classifier") == {
            "serving_default",
            "attention",
            "classify",
        }
        assert metadata_signatures(client, "translator") == {
            "serving_default",
            "attention",
            "greedy",
        }
        response = predict(client, "translator", "greedy")
        expected = call_direct(
            direct_models[("translator", 1)], ["the cat sat on the mat"], "greedy"
        )
        assert response.status_code == 200
        assert response.json()["predictions"] == [text.decode() for text in expected["translation"]]
        response = predict(client, "classifier", "attention", ["goal"])
        expected = call_direct(direct_models[("classifier", 1)], ["goal"], "attention")
        assert response.status_code == 200
        np.testing.assert_allclose(
            response.json()["predictions"][0]["attention_scores"],
            expected["attention_scores"][0],
            atol=1e-6,
            rtol=0,
        )
    assert "no signature" not in caplog.text
    # A name the export lacks serves nothing and is logged where the version loads.
    with serve("greedy") as client:
        response = predict(client, "classifier", "greedy")
        assert (response.status_code, response.json()) == (
            400,
            not_found("greedy", DEFAULT_PUBLIC["classifier"]),
        )
    assert "model=classifier version=1 has no signature greedy" in caplog.text


@pytest.mark.timeout(600)  # the session's exports and the server start inside it when it runs first
def test_the_server_serves_the_signatures_its_flag_names(api_server):
    """`apps.serve --signatures translator:greedy` (tests/serving/conftest.py's `api_server`)."""
    server = api_server
    with httpx.Client(base_url=server.url, timeout=60) as client:
        assert predict(client, "translator", "greedy").status_code == 200
        for model in ("classifier", "translator"):
            response = predict(client, model, "attention")
            assert (
                response.status_code == 400
                and "not found in signature def" in response.json()["error"]
            )
        assert metadata_signatures(client, "translator") == {"serving_default", "greedy"}
        assert metadata_signatures(client, "classifier") == set(DEFAULT_PUBLIC["classifier"])
    assert "Traceback" not in server.log()
