"""Generated request bodies against the in-process app: never a 5xx, always a JSON
error for a refusal, every classifier answer the SavedModel's own values, and
the app answers good requests afterwards. The edge strings the generator
rarely produces are listed one by one in test_edge_strings.py.

The suite sends FUZZ_EXAMPLES generated requests (350: every kind of refusal, and some
thirty good requests, among them); set the environment variable to send more,
e.g. `FUZZ_EXAMPLES=1000 .venv/bin/python -m pytest tests/serving/test_fuzz.py`, as
the suite did before."""

import base64
import json
import os

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from starlette.testclient import TestClient

from keras_transformer.serving import ModelRepository, ServerSettings, create_app
from tests.serving.serving_helpers import CLASS_NAMES, assert_classifier_answer, call_direct

# Mostly the classifier (cheap model calls), a few other routes.
ROUTES = ["/v1/models/classifier:predict"] * 10 + [
    "/v1/models/classifier/versions/1:predict",
    "/v1/models/translator:predict",
    "/v1/models/classifier/versions/2:predict",
    "/v1/models/nobody:predict",
    "/v1/models/classifier/versions/x:predict",
    "/v1/models/classifier:regress",
    "/v1/models/classifier",
    "/v1/models/classifier/metadata",
]
SIGNATURES = ["serving_default", "attention", "greedy", "", "Serving_Default"]
# Hypothesis's examples, derandomized: the same requests every run.
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "350"))

# Strings with lone surrogates and control characters, which JSON can carry
# (as \ud800 escapes) but UTF-8 cannot.
odd_text = st.text(
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, categories=["Cs"])
    | st.characters(max_codepoint=0x1F)
    | st.characters(),
    max_size=12,
)
text = st.text(max_size=30) | odd_text
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(text, children, max_size=4),
    max_leaves=16,
)
b64_values = st.fixed_dictionaries(
    {
        "b64": st.binary(max_size=20).map(lambda raw: base64.b64encode(raw).decode())
        | text
        | json_values
    }
)
instance = (
    text
    | b64_values
    | json_values
    | st.fixed_dictionaries({"text": text | b64_values | json_values})
)


@st.composite
def predict_shaped(draw):
    """A dict shaped like a predict body, with values right or wrong."""
    body = {}
    if draw(st.booleans()):
        body["instances"] = draw(st.lists(instance, max_size=10) | json_values)
    if draw(st.booleans()):
        body["inputs"] = draw(
            st.lists(instance, max_size=10)
            | st.dictionaries(
                st.sampled_from(["text", "txt", "b64"]) | text,
                st.lists(instance, max_size=10) | json_values,
                max_size=3,
            )
            | json_values
        )
    if draw(st.integers(0, 3)) == 0:
        body["signature_name"] = draw(st.sampled_from(SIGNATURES) | text | json_values)
    if draw(st.integers(0, 5)) == 0:
        body.update(draw(st.dictionaries(text, json_values, max_size=2)))
    return body


@st.composite
def good_predict(draw):
    """A well-formed predict body (the route decides whether it is served)."""
    values = draw(
        st.lists(text | b64_values.filter(lambda value: isinstance(value["b64"], str)), max_size=8)
    )
    body = draw(
        st.sampled_from([{"instances": values}, {"inputs": values}, {"inputs": {"text": values}}])
    )
    if draw(st.booleans()):
        body["signature_name"] = draw(st.sampled_from(["serving_default", "attention"]))
    return body


def encode(value):
    return json.dumps(value).encode("utf-8")  # ASCII: lone surrogates travel as \ud800 escapes


@st.composite
def mutated(draw):
    """A predict-shaped body's bytes with a few bytes replaced, inserted or cut."""
    raw = bytearray(encode(draw(predict_shaped())))
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(0, len(raw)))
        action = draw(st.sampled_from(["replace", "insert", "cut"]))
        byte = draw(st.integers(0, 255))
        if action == "insert" or position == len(raw):
            raw.insert(position, byte)
        elif action == "replace":
            raw[position] = byte
        else:
            del raw[position:]
    return bytes(raw)


bodies = st.one_of(
    good_predict().map(encode),
    predict_shaped().map(encode),
    json_values.map(encode),
    mutated(),
    st.binary(max_size=200),
    st.sampled_from(
        [
            b"\xff\xfe",
            b"\xc3(",
            b'{"instances": ["\xed\xa0\x80"]}',
            b"\x00" * 10,
            b'{"instances": ["a"], "signature_name": "\\ud800"}',
            b"[" * 5000,
            b'{"a":' * 3000,
            b'{"instances": [1e999]}',
            b'{"inputs": {"text": "\\udfff"}}',
        ]
    ),
)


def request_texts(body):
    """The texts of an accepted classifier request, as bytes, read from its JSON
    the way TensorFlow Serving's protocol defines it (not with the server's code)."""
    values = body.get("instances", body.get("inputs"))
    if isinstance(values, dict) and set(values) != {"b64"}:
        values = values["text"]
    texts = []
    for value in values:
        if isinstance(value, dict) and set(value) != {"b64"}:
            value = value["text"]
        texts.append(
            base64.b64decode(value["b64"])
            if isinstance(value, dict)
            else value.encode("utf-8", "surrogatepass")
        )
    return texts


def check_classifier_values(body, answer, loaded):
    """A 200 answer of the classifier: the SavedModel's own values, row by row."""
    if body.get("signature_name", "serving_default") != "serving_default":
        return
    texts = request_texts(body)
    if "predictions" in answer:
        probabilities = [prediction["probabilities"] for prediction in answer["predictions"]]
        labels = [prediction["label"] for prediction in answer["predictions"]]
    else:
        probabilities, labels = answer["outputs"]["probabilities"], answer["outputs"]["label"]
    assert len(probabilities) == len(labels) == len(texts)
    if not texts:
        return
    probabilities = np.asarray(probabilities, dtype=np.float64)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    assert labels == [CLASS_NAMES[index] for index in probabilities.argmax(axis=1)]
    expected = call_direct(loaded, texts)
    np.testing.assert_allclose(probabilities, expected["probabilities"], atol=1e-5, rtol=0)
    assert labels == [label.decode("utf-8") for label in expected["label"]]


@pytest.mark.timeout(900)
def test_generated_bodies_never_get_a_5xx(exports, direct_models, direct_answers):
    repository = ModelRepository(
        {"classifier": exports.classifier, "translator": exports.translator}, poll_seconds=0
    )
    app = create_app(
        repository, ServerSettings(max_body_bytes=4096, max_instances=8, batch_timeout_ms=1.0)
    )
    sent = []
    with TestClient(app, raise_server_exceptions=False) as client:

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(
            route=st.sampled_from(ROUTES),
            body=bodies,
            method=st.sampled_from(["POST"] * 9 + ["GET", "PUT"]),
        )
        def send(route, body, method):
            response = client.request(
                method, route, content=body, headers={"content-type": "application/json"}
            )
            sent.append(response.status_code)
            assert response.status_code < 500, (route, body, response.text)
            assert response.headers["content-type"].startswith("application/json"), response.text
            answer = response.json()
            if response.status_code >= 400:
                assert (
                    set(answer) == {"error"}
                    and isinstance(answer["error"], str)
                    and answer["error"]
                )
            else:
                assert set(answer) & {"predictions", "outputs", "model_version_status", "metadata"}
                if (
                    method == "POST"
                    and route.startswith("/v1/models/classifier")
                    and route.endswith(":predict")
                ):
                    check_classifier_values(
                        json.loads(body), answer, direct_models[("classifier", 1)]
                    )

        send()
        assert len(sent) >= EXAMPLES
        # Not only refusals: some generated bodies were good requests (one in 20 or more).
        assert sent.count(200) >= EXAMPLES // 20, sorted(set(sent))
        assert {400, 404, 405, 413} <= set(sent), sorted(set(sent))

        text = "the cat sat on the mat"
        response = client.post("/v1/models/classifier:predict", json={"instances": [text]})
        assert response.status_code == 200
        assert_classifier_answer(
            response.json()["predictions"][0], direct_answers[("classifier", 1)][text]
        )
        assert client.get("/healthz").status_code == 200
