"""Edge-case instance texts through the in-process app, one by one: what the
model receives (the bytes below), and answers checked by value against the
SavedModel called directly and against the same bytes sent as {"b64": ...}.

A lone surrogate ("\\ud800" in the JSON) is served, not refused: JSON can
carry it but UTF-8 cannot, so the server passes on its 3-byte encoding
(Python's "surrogatepass", the WTF-8 form), exactly as if the client had sent
those bytes as {"b64": ...}; the model's tokenizer reads them as invalid UTF-8
(the non-UTF-8 texts of serving_helpers get the same treatment).
"""

import base64
import json

import numpy as np
import pytest
from starlette.testclient import TestClient

from keras_transformer.serving import ModelRepository, ServerSettings, create_app
from keras_transformer.serving.model_config import model_configs
from keras_transformer.serving.repository import load_saved_model
from tests.serving.serving_helpers import CLASS_NAMES, call_direct

CLASSIFIER_URL = "/v1/models/classifier:predict"
TRANSLATOR_URL = "/v1/models/translator:predict"


def wtf8(text):
    """The bytes a JSON string reaches the model as (lone surrogates kept as 3 bytes each)."""
    return text.encode("utf-8", "surrogatepass")


# (test id, the JSON string sent). The model must get `wtf8(text)`.
EDGE_TEXTS = [
    ("lone-high-surrogate", "\ud800"),
    ("lone-low-surrogate", "\udfff"),
    ("surrogate-in-a-sentence", "the cat \ud83d sat on the mat"),
    ("surrogates-reversed", "\ude00\ud83d"),
    ("nul", "la\x00casa"),
    ("only-nul", "\x00"),
    ("control-characters", "\x01\x07\x08\x0b\x0c\x1b\x7f stocks"),
    ("c1-controls", "\x85\x9f market"),
    ("bom", "\ufeffthe team won"),
    ("crlf", "el perro\r\ncome pan\r\n"),
    ("line-separators", "the\u2028final\u2029team"),
    ("zero-width", "ca\u200bt\u200d mat\u2060"),
    ("non-bmp-emoji", "🙂🚀 the cat 👩‍👩‍👧 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"),
    ("rtl", "שלום עולם مرحبا بالعالم \u202ela casa\u202c"),
    ("combining", "cafe\u0301 crème n\u0303 a\u0308\u0308\u0308\u0308"),
    ("compatibility-forms", "ﬁnal ① Ｆｕｌｌｗｉｄｔｈ ㎏"),
    ("json-number-text", "1e999"),
    ("json-constant-text", "NaN"),
    ("json-literal-text", "null"),
    ("huge-integer-text", "123456789012345678901234567890"),
    ("backslashes-and-quotes", '\\ud800 "quoted" \\'),
    ("long-word", "x" * 3000),
    ("long-text", "the cat sat on the mat " * 400),
    ("private-use-and-noncharacter", "\ue000\uffff\U0010ffff"),
    ("empty", ""),
]


@pytest.fixture(scope="module")
def client(exports, direct_models):
    # Serve the SavedModels already loaded by `direct_models` (the files are the same).
    loaded = {
        exports.version_dir(model): direct_models[(model, 1)]
        for model in ("classifier", "translator")
    }

    def loader(path):
        return loaded.get(str(path)) or load_saved_model(path)

    repository = ModelRepository(
        model_configs(
            {"classifier": exports.classifier, "translator": exports.translator},
            signatures=("attention",),
        ),
        loader=loader,
        poll_seconds=0,
    )
    settings = ServerSettings(max_body_bytes=1 << 20, max_instances=64, batch_timeout_ms=1.0)
    with TestClient(create_app(repository, settings), raise_server_exceptions=False) as client:
        yield client


def post_json(client, url, body):
    # json.dumps escapes lone surrogates as \ud800, as a JSON client would send them.
    return client.post(
        url, content=json.dumps(body).encode("ascii"), headers={"content-type": "application/json"}
    )


def b64(raw):
    return {"b64": base64.b64encode(raw).decode("ascii")}


def assert_classifier_values(prediction, expected_probabilities, expected_label):
    assert set(prediction) == {"probabilities", "label"}
    probabilities = np.asarray(prediction["probabilities"], dtype=np.float64)
    assert probabilities.shape == (len(CLASS_NAMES),)
    assert np.all(probabilities >= 0) and abs(probabilities.sum() - 1.0) < 1e-5, probabilities
    np.testing.assert_allclose(probabilities, expected_probabilities, atol=1e-6, rtol=0)
    assert prediction["label"] in CLASS_NAMES
    assert prediction["label"] == CLASS_NAMES[int(np.argmax(probabilities))]
    assert prediction["label"] == expected_label.decode("utf-8")


@pytest.mark.timeout(600)  # the session's exports are built inside it when it runs first
@pytest.mark.parametrize(
    "text", [text for _, text in EDGE_TEXTS], ids=[name for name, _ in EDGE_TEXTS]
)
def test_edge_text_gets_the_saved_models_answer(client, direct_models, text):
    raw = wtf8(text)
    direct = call_direct(direct_models[("classifier", 1)], [raw])
    expected = (direct["probabilities"][0], direct["label"][0])

    for body in (
        {"instances": [text]},
        {"instances": [{"text": text}]},
        {"inputs": [text]},
        {"instances": [b64(raw)]},
    ):
        response = post_json(client, CLASSIFIER_URL, body)
        assert response.status_code == 200, (body, response.text)
        answer = response.json()
        prediction = (
            answer["predictions"][0]
            if "predictions" in answer
            else {name: values[0] for name, values in answer["outputs"].items()}
        )
        assert_classifier_values(prediction, *expected)

    translation = call_direct(direct_models[("translator", 1)], [raw])["translation"][0]
    response = post_json(client, TRANSLATOR_URL, {"instances": [text]})
    assert response.status_code == 200, response.text
    assert response.json() == {"predictions": [translation.decode("utf-8")]}


@pytest.mark.timeout(600)  # the session's exports are built inside it when it runs first
def test_edge_texts_in_one_batch_each_get_their_own_answer(client, direct_models):
    texts = [text for _, text in EDGE_TEXTS]
    response = post_json(client, CLASSIFIER_URL, {"instances": texts})
    assert response.status_code == 200, response.text
    predictions = response.json()["predictions"]
    assert len(predictions) == len(texts)
    classifier = direct_models[("classifier", 1)]
    for text, prediction in zip(texts, predictions):
        alone = call_direct(classifier, [wtf8(text)])
        assert_classifier_values(prediction, alone["probabilities"][0], alone["label"][0])


def test_attention_tokens_of_a_lone_surrogate_come_back_as_b64(client, direct_models):
    """Token strings that are not UTF-8 cannot be JSON strings: they come back as {"b64": ...}."""
    text = "la \ud800 casa"
    response = post_json(
        client, TRANSLATOR_URL, {"signature_name": "attention", "inputs": {"text": [text]}}
    )
    assert response.status_code == 200, response.text
    expected = call_direct(direct_models[("translator", 1)], [wtf8(text)], "attention")
    source_tokens = response.json()["outputs"]["source_tokens"][0]
    decoded = [
        base64.b64decode(token["b64"]) if isinstance(token, dict) else token.encode("utf-8")
        for token in source_tokens
    ]
    assert decoded == list(expected["source_tokens"][0])


@pytest.mark.parametrize(
    "value, fragments",
    [
        ({"b64": "not base64!"}, ["example 1", "base64"]),
        ({"b64": "YQ"}, ["example 1", "base64"]),  # missing padding
        ({"b64": "YQ==\n"}, ["example 1", "base64"]),
        ({"b64": "=YQ="}, ["example 1", "base64"]),
        ({"b64": "Y\u00e9=="}, ["example 1", "base64"]),
        ({"b64": "\ud800"}, ["example 1", "base64"]),
        ({"b64": 7}, ["example 1", "an object"]),
        ({"b64": None}, ["example 1", "an object"]),
        ({"b64": ["YQ=="]}, ["example 1", "an object"]),
        ({"b64": "YQ==", "extra": "x"}, ["Instance 1", "'extra'"]),
        (12, ["example 1", "expected a string", "a number"]),
        (1.5e300, ["example 1", "expected a string", "a number"]),
        (True, ["example 1", "expected a string", "a boolean"]),
        (None, ["example 1", "expected a string", "null"]),
        (["a"], ["example 1", "expected a string", "a list"]),
    ],
)
def test_a_non_text_instance_is_a_400_naming_it(client, value, fragments):
    response = post_json(client, CLASSIFIER_URL, {"instances": ["the cat", value]})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    for fragment in fragments:
        assert fragment in error, error
