"""The Starlette app in process: TensorFlow Serving's routes, answers equal to the
SavedModel's own, every refusal with its status code, the request log, batching
and a version switch."""

import base64
import contextlib
import functools
import logging
import os
import re
import shutil
import threading

import numpy as np
import pytest
import tensorflow as tf
from starlette.testclient import TestClient

from keras_transformer.serving import ModelRepository, ServerSettings, create_app
from keras_transformer.serving.model_config import model_configs
from keras_transformer.serving.repository import ServedVersion, load_saved_model
from tests.serving.serving_helpers import (
    NON_UTF8_TEXT,
    TEXT_POOL,
    assert_classifier_answer,
    call_direct,
    fail_on_marked_texts,
    join_threads,
    publish_copy,
    start_threads,
    text_json,
)

SOME_TEXTS = [
    "the cat sat on the mat",
    "",
    "la casa es azul",
    NON_UTF8_TEXT,
    "zebra quantum xylophone",
]


@pytest.fixture(scope="module")
def shared_loader(exports, direct_models):
    """Loads each SavedModel folder once for all the apps of this module; the exports' own
    version folders are the SavedModels `direct_models` already loaded (the files are the same).
    `.loaded` maps folders to loaded SavedModels."""
    loaded = {
        exports.version_dir(model): direct_models[(model, 1)]
        for model in ("classifier", "translator")
    }

    def load(path):
        path = str(path)
        if path not in loaded:
            loaded[path] = load_saved_model(path)
        return loaded[path]

    load.loaded = loaded
    return load


@pytest.fixture(scope="module")
def serve(exports, shared_loader):
    """`with serve(**settings) as client:` a TestClient of an app serving the
    classifier and the translator (its lifespan has loaded them)."""

    @contextlib.contextmanager
    def serve(models=None, **settings):
        models = models or {"classifier": exports.classifier, "translator": exports.translator}
        repository = ModelRepository(
            model_configs(models, signatures=("greedy", "attention")),
            loader=shared_loader,
            poll_seconds=0,
        )
        with TestClient(
            create_app(repository, ServerSettings(**settings)), raise_server_exceptions=False
        ) as client:
            client.repository = repository
            yield client

    return serve


@pytest.fixture(scope="module")
def client(serve):
    with serve(max_body_bytes=4096, max_instances=8) as client:
        yield client


def predict(client, model, body, version=None):
    path = f"/v1/models/{model}" + (f"/versions/{version}" if version else "") + ":predict"
    return client.post(path, json=body)


# Status, metadata, health


def test_healthz(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"ready": True, "models": {"classifier": 1, "translator": 1}}


def test_healthz_is_503_until_every_model_has_a_version(serve, exports, tmp_path):
    empty = tmp_path / "nothing_yet"
    empty.mkdir()
    with serve({"classifier": exports.classifier, "late": str(empty)}) as client:
        response = client.get("/healthz")
        assert response.status_code == 503
        assert response.json() == {"ready": False, "models": {"classifier": 1, "late": None}}
        assert client.post("/v1/models/late:predict", json={"instances": ["a"]}).status_code == 404
        assert predict(client, "classifier", {"instances": ["a"]}).status_code == 200


@pytest.mark.parametrize("path", ["/v1/models/translator", "/v1/models/translator/versions/1"])
def test_status(client, path):
    response = client.get(path)
    assert response.status_code == 200
    assert response.json() == {
        "model_version_status": [
            {
                "version": "1",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }


def tensor_info(dtype, *sizes):
    return {
        "dtype": dtype,
        "tensor_shape": {
            "dim": [{"size": str(size), "name": ""} for size in sizes],
            "unknown_rank": False,
        },
    }


def test_classifier_metadata(client):
    response = client.get("/v1/models/classifier/metadata")
    assert response.status_code == 200
    body = response.json()
    assert body["model_spec"] == {"name": "classifier", "signature_name": "", "version": "1"}
    signatures = body["metadata"]["signature_def"]["signature_def"]
    # classify is public unnamed: its method is classification, read from saved_model.pb
    assert set(signatures) == {"serving_default", "attention", "classify"}
    assert signatures["classify"] == {
        "inputs": {"inputs": tensor_info("DT_STRING", -1)},
        "outputs": {
            "classes": tensor_info("DT_STRING", -1, 3),
            "scores": tensor_info("DT_FLOAT", -1, 3),
        },
        "method_name": "tensorflow/serving/classify",
    }
    assert signatures["serving_default"] == {
        "inputs": {"text": tensor_info("DT_STRING", -1)},
        "outputs": {
            "label": tensor_info("DT_STRING", -1),
            "probabilities": tensor_info("DT_FLOAT", -1, 3),
        },
        "method_name": "tensorflow/serving/predict",
    }
    # attention: tokens [None, T], scores [None, layers 1, heads 2, T, T]; T = the longest text's
    # tokens
    assert signatures["attention"]["outputs"] == {
        "attention_scores": tensor_info("DT_FLOAT", -1, 1, 2, -1, -1),
        "tokens": tensor_info("DT_STRING", -1, -1),
    }


def test_translator_metadata_by_version(client):
    response = client.get("/v1/models/translator/versions/1/metadata")
    assert response.status_code == 200
    signatures = response.json()["metadata"]["signature_def"]["signature_def"]
    assert set(signatures) == {"serving_default", "greedy", "attention"}
    for name in ("serving_default", "greedy"):
        assert signatures[name]["inputs"] == {"text": tensor_info("DT_STRING", -1)}
        assert signatures[name]["outputs"] == {"translation": tensor_info("DT_STRING", -1)}


# Predict: answers equal to the SavedModel called directly


def test_classifier_row_predict_equals_direct_call(client, direct_models):
    response = predict(
        client, "classifier", {"instances": [text_json(text) for text in SOME_TEXTS]}
    )
    assert response.status_code == 200
    predictions = response.json()["predictions"]
    expected = call_direct(direct_models[("classifier", 1)], SOME_TEXTS)
    assert len(predictions) == len(SOME_TEXTS)
    for index, prediction in enumerate(predictions):
        assert set(prediction) == {"probabilities", "label"}
        assert_classifier_answer(
            prediction, (expected["probabilities"][index], expected["label"][index])
        )


def test_classifier_columnar_predict_equals_direct_call(client, direct_models):
    body = {"inputs": {"text": [text_json(text) for text in SOME_TEXTS]}}
    response = predict(client, "classifier", body, version=1)
    assert response.status_code == 200
    outputs = response.json()["outputs"]
    expected = call_direct(direct_models[("classifier", 1)], SOME_TEXTS)
    np.testing.assert_allclose(
        outputs["probabilities"], expected["probabilities"], atol=1e-6, rtol=0
    )
    assert outputs["label"] == [label.decode() for label in expected["label"]]


def test_translator_predict_every_signature_equals_direct_call(client, direct_models):
    direct = direct_models[("translator", 1)]
    texts = [text_json(text) for text in SOME_TEXTS]
    response = predict(client, "translator", {"instances": texts})
    assert response.status_code == 200
    expected = call_direct(direct, SOME_TEXTS)["translation"]
    assert response.json() == {"predictions": [value.decode("utf-8") for value in expected]}

    response = predict(
        client, "translator", {"signature_name": "greedy", "inputs": texts}, version=1
    )
    assert response.status_code == 200
    expected = call_direct(direct, SOME_TEXTS, "greedy")["translation"]
    assert response.json() == {"outputs": [value.decode("utf-8") for value in expected]}

    response = predict(
        client, "translator", {"signature_name": "attention", "inputs": {"text": texts}}
    )
    assert response.status_code == 200
    outputs = response.json()["outputs"]
    expected = call_direct(direct, SOME_TEXTS, "attention")
    assert set(outputs) == {
        "source_tokens",
        "target_tokens",
        "decoder_input_tokens",
        "cross_attention",
        "decoder_self_attention",
        "encoder_self_attention",
    }
    for name in ("source_tokens", "target_tokens"):
        assert outputs[name] == [[token.decode("utf-8") for token in row] for row in expected[name]]
    np.testing.assert_allclose(
        outputs["cross_attention"], expected["cross_attention"], atol=1e-6, rtol=0
    )


def test_empty_instances_give_empty_predictions(client):
    response = predict(client, "classifier", {"instances": []})
    assert response.status_code == 200 and response.json() == {"predictions": []}


def test_every_pool_text_alone_equals_its_direct_answer(client, direct_answers):
    for text in TEXT_POOL:
        prediction = predict(client, "classifier", {"instances": [text_json(text)]}).json()[
            "predictions"
        ][0]
        assert_classifier_answer(prediction, direct_answers[("classifier", 1)][text])
    for start in range(0, len(TEXT_POOL), 8):  # the client's limit is 8 instances
        texts = TEXT_POOL[start : start + 8]
        translations = predict(
            client, "translator", {"instances": [text_json(text) for text in texts]}
        ).json()
        assert translations["predictions"] == [
            direct_answers[("translator", 1)][text].decode() for text in texts
        ]


# Refusals, each with TensorFlow Serving's status code and a JSON error


def assert_error(response, status, *fragments):
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert list(body) == ["error"] and isinstance(body["error"], str)
    for fragment in fragments:
        assert fragment in body["error"], body["error"]


def test_unknown_model_and_version_are_404(client):
    assert_error(predict(client, "nobody", {"instances": ["a"]}), 404, "nobody")
    assert_error(client.get("/v1/models/nobody"), 404, "nobody")
    assert_error(client.get("/v1/models/nobody/metadata"), 404, "nobody")
    assert_error(
        predict(client, "classifier", {"instances": ["a"]}, version=2), 404, "classifier", "2"
    )
    assert_error(client.get("/v1/models/classifier/versions/2"), 404, "version 2")
    assert_error(client.get("/v1/models/classifier/versions/2/metadata"), 404, "classifier", "2")
    assert_error(client.get("/v2/models/classifier"), 404)
    assert_error(client.get("/v1/models/classifier/labels"), 404)


@pytest.mark.parametrize(
    "path, status",
    [
        ("/v1/models/%ff:predict", 404),
        ("/v1/models/a%2Fb:predict", 404),
        ("/v1/models/:predict", 404),
        ("/v1/models/", 404),
        ("/v1/models/classifier/versions/:predict", 404),
        ("/v1/models/classifier::predict", 404),
        ("/v1/models/classifier/versions/99999999999999999999999:predict", 404),
        ("/v1/models/classifier:", 400),
    ],
)
def test_odd_paths_are_refused_with_json(client, path, status):
    assert_error(client.post(path, json={"instances": ["a"]}), status)


@pytest.mark.parametrize("version", ["abc", "0", "-1", "1.5"])
def test_a_version_must_be_a_positive_integer(client, version):
    assert_error(
        predict(client, "classifier", {"instances": ["a"]}, version=version), 400, repr(version)
    )


def test_bad_bodies_are_400(client):
    url = "/v1/models/classifier:predict"
    assert_error(client.post(url, content=b'{"instances": ["a"'), 400, "JSON parse error")
    assert_error(client.post(url, content=b'{"instances": ["caf\xe9"]}'), 400, "UTF-8")
    assert_error(client.post(url, content=b"[]"), 400, "JSON object")
    assert_error(client.post(url, content=b""), 400, "JSON parse error")
    assert_error(client.post(url, json={}), 400, "'instances'", "'inputs'")
    assert_error(client.post(url, json={"instances": ["a"], "extra": 1}), 400, "'extra'")
    assert_error(client.post(url, json={"instances": ["a", 7]}), 400, "example 1")
    assert_error(client.post(url, json={"instances": [{"b64": "***"}]}), 400, "example 0", "base64")
    assert_error(client.post(url, json={"inputs": {"txt": ["a"]}}), 400, "'txt'")
    assert_error(
        client.post(url, json={"instances": ["a"], "signature_name": "nope"}),
        400,
        "nope",
        "serving_default",
    )
    assert_error(
        client.post(url, json={"instances": ["a"], "signature_name": 3}), 400, "signature_name"
    )
    # JSON can carry a lone surrogate, which the UTF-8 answer cannot: it comes back escaped.
    assert_error(
        client.post(url, content=b'{"instances": ["a"], "signature_name": "x\\ud800"}'),
        400,
        "x\\ud800",
    )


def test_limits_are_413(client):
    url = "/v1/models/translator:predict"
    assert_error(client.post(url, json={"instances": ["a"] * 9}), 413, "limit is 8")
    assert_error(client.post(url, json={"inputs": ["a"] * 9}), 413, "limit is 8")
    too_big = {"instances": ["x" * 5000]}
    assert_error(client.post(url, json=too_big), 413, "4096")

    def chunks():  # no Content-Length: the limit is checked while reading
        yield b'{"instances": ["'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"]}'

    assert_error(client.post(url, content=chunks()), 413, "4096")


def test_wrong_methods_and_verbs(client):
    assert_error(client.get("/v1/models/classifier:predict"), 405, "POST")
    assert_error(
        client.put("/v1/models/classifier:predict", json={"instances": ["a"]}), 405, "POST"
    )
    assert_error(client.post("/v1/models/classifier", json={}), 405, "GET")
    assert_error(client.delete("/v1/models/classifier/metadata"), 405, "GET")
    assert_error(client.post("/healthz"), 405)
    assert_error(
        client.post("/v1/models/classifier:explain", json={"examples": []}), 400, ":explain"
    )


def test_the_app_still_answers_after_refusals(client, direct_answers):
    for _ in range(2):
        client.post("/v1/models/classifier:predict", content=b"\xff{")
        client.post("/v1/models/classifier:predict", json={"instances": ["a"] * 100})
        client.get("/v1/models/nobody")
    response = predict(client, "classifier", {"instances": ["the cat sat on the mat"]})
    assert response.status_code == 200
    assert_classifier_answer(
        response.json()["predictions"][0],
        direct_answers[("classifier", 1)]["the cat sat on the mat"],
    )


def test_model_failures(client, monkeypatch):
    fail_on_marked_texts(monkeypatch)
    assert_error(
        predict(client, "classifier", {"instances": ["bad input"]}), 400, "the model refuses this"
    )
    assert (
        "second line"
        not in predict(client, "classifier", {"instances": ["bad input"]}).json()["error"]
    )
    assert_error(predict(client, "classifier", {"instances": ["server bug"]}), 500, "RuntimeError")
    assert "boom" not in predict(client, "classifier", {"instances": ["server bug"]}).text
    assert predict(client, "classifier", {"instances": ["fine"]}).status_code == 200


# The request log


LOG_LINE = re.compile(
    r"^(?P<method>[A-Z]+) (?P<path>\S+) model=(?P<model>\S+) version=(?P<version>\S+) "
    r"instances=(?P<instances>\S+) status=(?P<status>\d+) latency_ms=(?P<latency>[0-9.]+)$"
)


def test_one_log_line_per_request(client, caplog):
    caplog.set_level(logging.INFO, logger="keras_transformer.serving")
    predict(client, "classifier", {"instances": ["a", "b"]})
    predict(client, "translator", {"instances": ["a"]}, version=7)
    client.post("/v1/models/classifier:predict", content=b"{")
    client.get("/v1/models/translator/metadata")
    lines = [
        record.getMessage()
        for record in caplog.records
        if record.name == "keras_transformer.serving"
    ]
    assert len(lines) == 4, lines
    parsed = [LOG_LINE.match(line) for line in lines]
    assert all(parsed), lines
    fields = [
        (m["method"], m["path"], m["model"], m["version"], m["instances"], m["status"])
        for m in parsed
    ]
    assert fields == [
        ("POST", "/v1/models/classifier:predict", "classifier", "1", "2", "200"),
        ("POST", "/v1/models/translator/versions/7:predict", "translator", "7", "-", "404"),
        ("POST", "/v1/models/classifier:predict", "classifier", "1", "-", "400"),
        ("GET", "/v1/models/translator/metadata", "translator", "-", "-", "200"),
    ]
    assert all(float(m["latency"]) >= 0 for m in parsed)


# Batching


@pytest.fixture
def model_calls(monkeypatch):
    """The batch sizes of every model call, in order."""
    calls = []
    lock = threading.Lock()
    original = ServedVersion.run

    def counting(self, signature_name, inputs):
        with lock:
            # The batch size: every input's first axis (text, or a classify's inputs).
            calls.append(len(next(iter(inputs.values()))))
        return original(self, signature_name, inputs)

    monkeypatch.setattr(ServedVersion, "run", counting)
    return calls


def concurrent_predictions(client, model, texts, instances_per_request=1):
    """One thread per request, all released at once; returns the responses in request order."""
    requests = [
        texts[start : start + instances_per_request]
        for start in range(0, len(texts), instances_per_request)
    ]
    responses = [None] * len(requests)
    barrier = threading.Barrier(len(requests), timeout=60)

    def send(index):
        barrier.wait()
        responses[index] = predict(
            client, model, {"instances": [text_json(text) for text in requests[index]]}
        )

    join_threads(
        start_threads([functools.partial(send, index) for index in range(len(requests))], "client"),
        120,
    )
    assert all(response is not None and response.status_code == 200 for response in responses), (
        responses
    )
    return requests, responses


@pytest.mark.timeout(600)
def test_concurrent_requests_are_merged_and_each_gets_its_rows(serve, model_calls, direct_answers):
    texts = TEXT_POOL[:16]
    with serve(max_batch_size=64, batch_timeout_ms=300) as client:
        model_calls.clear()  # the warm-up calls of loading
        requests, responses = concurrent_predictions(client, "classifier", texts)
        for request, response in zip(requests, responses):
            (prediction,) = response.json()["predictions"]
            assert_classifier_answer(prediction, direct_answers[("classifier", 1)][request[0]])
        assert sum(model_calls) == len(texts)
        assert len(model_calls) < len(texts), model_calls

        model_calls.clear()
        requests, responses = concurrent_predictions(client, "translator", texts)
        for request, response in zip(requests, responses):
            assert response.json()["predictions"] == [
                direct_answers[("translator", 1)][request[0]].decode()
            ]
        assert sum(model_calls) == len(texts) and len(model_calls) < len(texts), model_calls


@pytest.mark.timeout(600)
def test_batches_respect_the_max_batch_size(serve, model_calls, direct_answers):
    texts = TEXT_POOL[:24]
    with serve(max_batch_size=5, batch_timeout_ms=300) as client:
        model_calls.clear()
        requests, responses = concurrent_predictions(
            client, "translator", texts, instances_per_request=2
        )
        for request, response in zip(requests, responses):
            expected = [direct_answers[("translator", 1)][text].decode() for text in request]
            assert response.json()["predictions"] == expected
        assert sum(model_calls) == len(texts)
        assert max(model_calls) <= 5 and len(model_calls) < len(requests), model_calls

        model_calls.clear()
        big = TEXT_POOL[:7]  # larger than a batch: runs alone, whole
        response = predict(client, "translator", {"instances": [text_json(text) for text in big]})
        assert response.json()["predictions"] == [
            direct_answers[("translator", 1)][t].decode() for t in big
        ]
        assert model_calls == [7]


@pytest.mark.timeout(600)
def test_a_bad_request_does_not_fail_the_requests_merged_with_it(
    serve, monkeypatch, direct_answers
):
    calls = []
    original = ServedVersion.run

    def refusing(self, signature_name, inputs):
        calls.append(len(inputs["text"]))
        if b"bad input" in inputs["text"].tolist():
            raise tf.errors.InvalidArgumentError(None, None, "the model refuses 'bad input'")
        return original(self, signature_name, inputs)

    texts = TEXT_POOL[3:15] + ["bad input"]
    with serve(max_batch_size=64, batch_timeout_ms=300) as client:
        monkeypatch.setattr(ServedVersion, "run", refusing)
        responses = [None] * len(texts)
        barrier = threading.Barrier(len(texts), timeout=60)

        def send(index):
            barrier.wait()
            responses[index] = predict(client, "classifier", {"instances": [texts[index]]})

        join_threads(
            start_threads(
                [functools.partial(send, index) for index in range(len(texts))], "client"
            ),
            120,
        )
    assert max(calls) > 1, calls  # the bad request was merged with others at least once
    assert_error(responses[-1], 400, "the model refuses 'bad input'")
    for text, response in zip(texts[:-1], responses[:-1]):
        assert response.status_code == 200, response.text
        assert_classifier_answer(
            response.json()["predictions"][0], direct_answers[("classifier", 1)][text]
        )


def test_without_batching_one_call_per_request(serve, model_calls, direct_answers):
    texts = TEXT_POOL[:12]
    with serve(batching=False) as client:
        model_calls.clear()
        requests, responses = concurrent_predictions(client, "classifier", texts)
        for request, response in zip(requests, responses):
            assert_classifier_answer(
                response.json()["predictions"][0], direct_answers[("classifier", 1)][request[0]]
            )
        assert model_calls == [1] * len(texts)


# Versions


def test_version_switch_and_a_broken_version(
    serve, shared_loader, exports, direct_models, direct_answers, tmp_path
):
    base = str(tmp_path / "translator")
    shutil.copytree(exports.translator, base)
    # Versions 1 and 2 are copies of the folders `direct_models` loaded: the loader hands out
    # those (loading a translator again costs seconds); what is tested here is the switch.
    shared_loader.loaded[os.path.join(base, "1")] = direct_models[("translator", 1)]
    shared_loader.loaded[os.path.join(base, "2")] = direct_models[("translator", 2)]
    texts = ["the cat sat on the mat", "la casa es azul", "", "stocks rose sharply today"]
    body = {"instances": texts}
    with serve({"translator": base}) as client:
        assert predict(client, "translator", body).json()["predictions"] == [
            direct_answers[("translator", 1)][text].decode() for text in texts
        ]
        assert publish_copy(exports.spare_translator, base).endswith(os.sep + "2")
        assert client.repository.models["translator"].refresh() is True

        expected = [direct_answers[("translator", 2)][text].decode() for text in texts]
        assert predict(client, "translator", body).json()["predictions"] == expected
        assert predict(client, "translator", body, version=2).json()["predictions"] == expected
        assert_error(predict(client, "translator", body, version=1), 404, "1")
        assert client.get("/v1/models/translator").json() == {
            "model_version_status": [
                {
                    "version": "2",
                    "state": "AVAILABLE",
                    "status": {"error_code": "OK", "error_message": ""},
                },
                {
                    "version": "1",
                    "state": "END",
                    "status": {"error_code": "OK", "error_message": ""},
                },
            ]
        }
        assert client.get("/v1/models/translator/metadata").json()["model_spec"]["version"] == "2"

        # A version that cannot load is reported; version 2 keeps serving.
        broken = os.path.join(base, "3")
        os.makedirs(broken)
        with open(os.path.join(broken, "saved_model.pb"), "wb") as model_file:
            model_file.write(b"not a SavedModel")
        assert client.repository.models["translator"].refresh() is False
        status = client.get("/v1/models/translator/versions/3").json()["model_version_status"]
        assert status[0]["version"] == "3" and status[0]["state"] == "END"
        assert (
            status[0]["status"]["error_code"] == "UNKNOWN" and status[0]["status"]["error_message"]
        )
        assert predict(client, "translator", body).json()["predictions"] == expected
        assert client.get("/healthz").json()["models"] == {"translator": 2}


def test_b64_round_trip_of_a_non_utf8_text(client, direct_answers):
    """A text that is not UTF-8 travels as b64 and gets the answer the raw bytes get."""
    body = {"instances": [{"b64": base64.b64encode(NON_UTF8_TEXT).decode()}]}
    response = predict(client, "classifier", body)
    assert response.status_code == 200
    assert_classifier_answer(
        response.json()["predictions"][0], direct_answers[("classifier", 1)][NON_UTF8_TEXT]
    )
