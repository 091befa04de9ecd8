"""The attention explorer over HTTP: the page, its assets and its model list
are served only with `--explorer` (ServerSettings.explorer), which also makes
the exports' `attention` signature public with a small per-request cap, and a
translator's `translate`, whose controls the model list reports.
The page itself is driven in a real browser by tests/browser/test_explorer_browser.py."""

import json
import os
import re

import httpx
import numpy as np
import pytest
from starlette.testclient import TestClient

from keras_transformer.serving import ModelRepository, ServerSettings, create_app
from keras_transformer.serving.model_config import model_configs
from tests.serving.serving_helpers import CLASS_NAMES, call_direct

PAGE_ROUTES = [
    "/",
    "/explorer/models",
    "/explorer/assets/explorer.js",
    "/explorer/assets/explorer.css",
]


@pytest.fixture(scope="module")
def serve(exports, direct_models_loader):
    def serve(models=None, signatures=(), **settings):
        models = models or {"classifier": exports.classifier, "translator": exports.translator}
        repository = ModelRepository(
            model_configs(models, signatures), loader=direct_models_loader, poll_seconds=0
        )
        return TestClient(
            create_app(repository, ServerSettings(**settings)), raise_server_exceptions=False
        )

    return serve


def test_without_the_explorer_setting_no_page_is_served(serve):
    with serve() as client:
        for route in PAGE_ROUTES:
            response = client.get(route)
            assert (response.status_code, response.json()) == (
                404,
                {"error": f"No such route: {route}"},
            )


def test_the_page_and_its_assets_are_served_from_the_package(serve):
    with serve(explorer=True) as client:
        page = client.get("/")
        assert (
            page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
        )
        # The page names only its own assets, by relative URL (the server may sit behind a path
        # prefix).
        assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert sorted(assets) == ["explorer/assets/explorer.css", "explorer/assets/explorer.js"]
        for asset, content_type in zip(sorted(assets), ("text/css", "text/javascript")):
            response = client.get("/" + asset)
            assert response.status_code == 200 and response.headers["content-type"].startswith(
                content_type
            )
            # Offline: nothing fetched from another host.
            assert "://" not in response.text.replace("http://www.w3.org", "")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        for missing in (
            "/explorer/assets/index.html",
            "/explorer/assets/__init__.py",
            "/explorer/assets/..%2Fapp.py",
        ):
            response = client.get(missing)
            assert response.status_code == 404 and "No such route" in response.json()["error"]


def test_the_model_list_names_each_model_its_version_and_kind(serve, exports, tmp_path):
    empty = tmp_path / "no_versions_yet"
    empty.mkdir()
    models = {
        "classifier": exports.classifier,
        "translator": exports.translator,
        "waiting": str(empty),
    }
    with serve(models, explorer=True) as client:
        response = client.get("/explorer/models")
    assert response.status_code == 200
    assert response.json() == {
        "models": [
            {
                "name": "classifier",
                "version": 1,
                "kind": "classifier",
                "attention": False,
                "class_names": CLASS_NAMES,
                # A Transformer alone (tests/serving/serving_helpers.py), reading 16 tokens.
                "parts": {
                    "transformer_weight": 1.0,
                    "transformer_tokens": 16,
                    "bag_weight": None,
                    "bag_tokens": None,
                    "encoder": True,
                },
                "attention_notice": None,
                "request_controls": None,
            },
            {
                "name": "translator",
                "version": 1,
                "kind": "translator",
                "attention": False,
                "class_names": None,
                # Its `translate` is not public here: the page sends to serving_default.
                "request_controls": None,
            },
            {
                "name": "waiting",
                "version": None,
                "kind": None,
                "attention": False,
                "class_names": None,
                "request_controls": None,
            },
        ]
    }


def recorded_controls(exports):
    """The `"request_controls"` the translator's export wrote beside its SavedModel, read here
    without the library."""
    path = os.path.join(exports.version_dir("translator"), "assets.extra", "translator.json")
    with open(path, encoding="utf-8") as config_file:
        return json.load(config_file)["request_controls"]


def test_the_model_list_gives_a_served_translate_signatures_controls(serve, exports):
    with serve(signatures=["translate"], explorer=True) as client:
        listed = {model["name"]: model for model in client.get("/explorer/models").json()["models"]}
    controls = listed["translator"]["request_controls"]
    assert controls == recorded_controls(exports)
    # The serving exports' translator searches with a beam of 2 (serving_helpers.py): the page
    # offers 1 to 2, and 2 first.
    assert controls["signature"] == "translate"
    assert controls["inputs"]["beam_width"] == {
        "dtype": "int32",
        "default": 2,
        "minimum": 1,
        "maximum": 2,
    }
    assert controls["inputs"]["num_translations"]["maximum"] == "beam_width"
    assert listed["classifier"]["request_controls"] is None


@pytest.mark.timeout(600)  # the session's exports and the server start inside it when it runs first
def test_the_explorer_flag_serves_the_page_and_a_capped_attention_signature(
    explorer_server, direct_models, exports
):
    """`apps.serve --explorer`: tests/serving/conftest.py's `explorer_server`, which the browser
    tests share (its third model, `doomed`, is one a browser test takes away)."""
    server = explorer_server
    texts = ["the cat sat on the mat", "la casa es azul", "", "dios luz"]
    with httpx.Client(base_url=server.url, timeout=60) as client:
        assert client.get("/").status_code == 200
        listed = client.get("/explorer/models").json()["models"]
        assert [
            (model["name"], model["attention"]) for model in listed if model["name"] != "doomed"
        ] == [("classifier", True), ("translator", True)]
        # A translator's `translate` is served too, and its controls listed for the page.
        assert [model["request_controls"] for model in listed if model["name"] != "doomed"] == [
            None,
            recorded_controls(exports),
        ]
        body = {"signature_name": "translate", "inputs": {"text": texts, "num_translations": 2}}
        response = client.post("/v1/models/translator:predict", json=body)
        assert response.status_code == 200, response.text
        assert np.shape(response.json()["outputs"]["scores"]) == (len(texts), 2)
        signatures = client.get("/v1/models/classifier/metadata").json()["metadata"]
        assert "translate" not in signatures["signature_def"]["signature_def"]
        for model in ("classifier", "translator"):
            body = {"signature_name": "attention", "inputs": {"text": texts}}
            response = client.post(f"/v1/models/{model}:predict", json=body)
            assert response.status_code == 200
            expected = call_direct(direct_models[(model, 1)], texts, "attention")
            outputs = response.json()["outputs"]
            assert set(outputs) == set(expected)
            for name, value in expected.items():
                if value.dtype == object:
                    assert outputs[name] == [[token.decode() for token in row] for row in value]
                else:
                    np.testing.assert_allclose(outputs[name], value, atol=1e-6, rtol=0)
            # One more example than the cap: refused, naming the limit.
            body = {"signature_name": "attention", "instances": texts + ["cat"]}
            response = client.post(f"/v1/models/{model}:predict", json=body)
            assert (response.status_code, response.json()) == (
                413,
                {"error": "5 examples in one request; the limit is 4."},
            )
            # serving_default keeps the server's own limit.
            response = client.post(f"/v1/models/{model}:predict", json={"instances": texts * 3})
            assert response.status_code == 200 and len(response.json()["predictions"]) == 12
    log = server.log()
    assert "Attention explorer at http://127.0.0.1:" in log and "Traceback" not in log
    # A classifier has no `translate`, which is no mistake of the operator's to warn of (each
    # model here has every other signature the flag makes public).
    assert "has no signature" not in log


def test_the_flag_and_its_cap_are_in_the_help():
    from keras_transformer.cli.serve import build_parser
    from keras_transformer.serving.explorer import ATTENTION_MAX_INSTANCES

    assert f"at most {ATTENTION_MAX_INSTANCES} examples a request" in " ".join(
        build_parser().format_help().split()
    )


def test_the_translator_attention_signature_gives_every_map_the_page_draws(direct_models):
    outputs = call_direct(
        direct_models[("translator", 1)], ["y dijo dios sea la luz", "la casa es azul"], "attention"
    )
    for example in range(2):
        source = [token for token in outputs["source_tokens"][example] if token]
        target = [token for token in outputs["target_tokens"][example] if token]
        decoder_inputs = [token for token in outputs["decoder_input_tokens"][example] if token]
        # The decoder reads [START] and its own output but the last token.
        assert decoder_inputs == [b"[START]"] + target[:-1]
        encoder = outputs["encoder_self_attention"][example]
        decoder = outputs["decoder_self_attention"][example]
        assert encoder.shape[-2:] == (outputs["source_tokens"].shape[1],) * 2
        assert decoder.shape[-2:] == (outputs["target_tokens"].shape[1],) * 2
        # Distributions over the real tokens; the decoder's only over those already read.
        np.testing.assert_allclose(
            encoder[:, :, : len(source), : len(source)].sum(axis=-1), 1.0, atol=1e-5
        )
        np.testing.assert_allclose(encoder[:, :, : len(source), len(source) :], 0.0, atol=1e-6)
        steps = len(target)
        np.testing.assert_allclose(decoder[:, :, :steps, :steps].sum(axis=-1), 1.0, atol=1e-5)
        np.testing.assert_allclose(np.triu(decoder[:, :, :steps, :steps], k=1), 0.0, atol=1e-6)
