"""A real `apps.serve` process on 127.0.0.1 under load from 16 clients: no errors,
every answer equal to the SavedModel's own, and a version switch in the middle
that loses no request."""

import collections
import os
import random
import threading
import time

import httpx
import numpy as np
import pytest

from tests.serving.serving_helpers import (
    TEXT_POOL,
    join_threads,
    publish_copy,
    start_threads,
    text_json,
)

CLIENTS = 16
# Enough for the switch to land mid-load (the clients keep going until version 2 has answered);
# throughput and latency under longer load: benchmarks/serve_load.py.
REQUESTS = 300
SWITCH_AFTER = 100  # requests answered before version 2 of the translator is published
TRANSLATOR = "translator_copy"  # the served copy of the translator that gets version 2


@pytest.fixture(scope="module")
def server(api_server):
    """The session's real server (tests/serving/conftest.py): the load goes to the classifier
    and to TRANSLATOR, a private copy of the translator that the load test publishes a version
    to; the server polls its folders every second, takes 64 KiB and 8 examples a request."""
    return api_server


@pytest.mark.timeout(600)  # the session's exports and the server start inside it when it runs first
def test_refusals_over_http_keep_the_server_up(server, direct_answers):
    text = "the cat sat on the mat"
    expected_probabilities, expected_label = direct_answers[("classifier", 1)][text]
    url = server.url + "/v1/models/classifier:predict"
    with httpx.Client(timeout=60) as client:  # one keep-alive connection throughout
        for body, status in [
            (b'{"instances": ["' + b"x" * 70000 + b'"]}', 413),
            (b'{"instances": ', 400),
            (b'{"instances": ["caf\xe9"]}', 400),
            (b'{"instances": [' + b'"a",' * 8 + b'"a"]}', 413),
            (b'{"instances": [{"text": 1}]}', 400),
            (b'{"inputs": {"texts": ["a"]}}', 400),
        ]:
            response = client.post(url, content=body)
            assert response.status_code == status, response.text
            assert set(response.json()) == {"error"}
            good = client.post(url, json={"instances": [text]})
            assert good.status_code == 200
            np.testing.assert_allclose(
                good.json()["predictions"][0]["probabilities"],
                expected_probabilities,
                atol=1e-5,
                rtol=0,
            )
            assert good.json()["predictions"][0]["label"] == expected_label.decode()

        def chunks():  # no Content-Length
            for _ in range(100):
                yield b"y" * 1000

        assert client.post(url, content=chunks()).status_code == 413
        assert client.get(server.url + "/v1/models/nobody").status_code == 404
        assert client.get(server.url + "/healthz").status_code == 200
    assert server.process.poll() is None


def plan_requests(seed=0):
    """(model, texts, columnar) for each request: 2/3 classifier, 1 to 3 texts from the pool."""
    rng = random.Random(seed)
    plan = []
    for _ in range(REQUESTS):
        model = "classifier" if rng.random() < 2 / 3 else TRANSLATOR
        texts = [rng.choice(TEXT_POOL) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
        plan.append((model, texts, rng.random() < 0.3))
    return plan


def request_body(texts, columnar):
    values = [text_json(text) for text in texts]
    return (
        {"inputs": {"text": values}}
        if columnar
        else {"instances": values, "signature_name": "serving_default"}
    )


def answers_of(model, body, columnar):
    """Per text, the answer: a translation, or (probabilities, label)."""
    if columnar:
        outputs = body["outputs"]
        if model == TRANSLATOR:
            return list(outputs)
        return list(zip(outputs["probabilities"], outputs["label"]))
    if model == TRANSLATOR:
        return list(body["predictions"])
    return [
        (prediction["probabilities"], prediction["label"]) for prediction in body["predictions"]
    ]


@pytest.mark.timeout(900)
def test_load_with_a_version_switch(server, exports, direct_answers):
    plan = plan_requests()
    translator_v1, translator_v2 = (
        direct_answers[("translator", 1)],
        direct_answers[("translator", 2)],
    )
    differing = {text for text in TEXT_POOL if translator_v1[text] != translator_v2[text]}
    assert differing, "the two translator versions must answer some text differently"

    lock = threading.Lock()
    next_index = [0]
    done = [0]
    switch = {"published": None, "first_v2_answer": None}
    records = []  # (model, texts, answers, sent at, answered at)
    failures = []
    extra = collections.Counter()

    def take():
        if failures:  # stop at the first failure rather than hammer a broken server
            return None
        with lock:
            index = next_index[0]
            next_index[0] += 1
        if index < len(plan):
            return plan[index]
        # The planned requests are done but version 2 has not answered yet
        # (loading it takes a while on a busy machine): the same mix goes on.
        if switch["first_v2_answer"] is None and time.monotonic() < deadline:
            extra["requests"] += 1
            return plan[index % len(plan)]
        return None

    def client_loop():
        with httpx.Client(base_url=server.url, timeout=120) as client:
            while (item := take()) is not None:
                model, texts, columnar = item
                sent = time.monotonic()
                try:
                    response = client.post(
                        f"/v1/models/{model}:predict", json=request_body(texts, columnar)
                    )
                except httpx.HTTPError as error:
                    failures.append((model, texts, repr(error)))
                    return
                answered = time.monotonic()
                if response.status_code != 200:
                    failures.append((model, texts, response.status_code, response.text))
                    return
                answers = answers_of(model, response.json(), columnar)
                with lock:
                    records.append((model, texts, answers, sent, answered))
                    done[0] += 1
                    if (
                        model == TRANSLATOR
                        and switch["first_v2_answer"] is None
                        and any(
                            text in differing and answer == translator_v2[text].decode()
                            for text, answer in zip(texts, answers)
                        )
                    ):
                        switch["first_v2_answer"] = answered

    def publisher():
        while done[0] < SWITCH_AFTER:
            if failures or time.monotonic() > deadline:
                return
            time.sleep(0.05)
        publish_copy(exports.spare_translator, server.models[TRANSLATOR])
        switch["published"] = time.monotonic()

    started = time.monotonic()
    deadline = started + 240
    threads = start_threads([client_loop] * CLIENTS + [publisher], "load")
    # A request that hangs is cut by the client's timeout (120 s), after the deadline at most.
    join_threads(threads, deadline - started + 150)
    elapsed = time.monotonic() - started

    assert not failures, failures[:5]
    assert len(records) == REQUESTS + sum(extra.values())
    assert switch["published"] is not None and switch["first_v2_answer"] is not None, (
        f"version 2 never answered within {deadline - started:.0f} s:\n{server.log()[-3000:]}"
    )

    classifier_answers = 0
    for model, texts, answers, sent, _answered in records:
        assert len(answers) == len(texts)
        for text, answer in zip(texts, answers):
            if model == "classifier":
                probabilities, label = direct_answers[("classifier", 1)][text]
                np.testing.assert_allclose(answer[0], probabilities, atol=1e-5, rtol=0)
                assert answer[1] == label.decode(), (text, answer)
                classifier_answers += 1
                continue
            assert answer in (translator_v1[text].decode(), translator_v2[text].decode()), (
                text,
                answer,
            )
            if text in differing and answer == translator_v1[text].decode():
                # Version 1 never answers a request sent after version 2 answered one.
                assert sent < switch["first_v2_answer"], (text, sent - started)
    assert classifier_answers > 0

    with httpx.Client(base_url=server.url, timeout=60) as client:
        status = client.get(f"/v1/models/{TRANSLATOR}").json()["model_version_status"]
        assert [(entry["version"], entry["state"]) for entry in status] == [
            ("2", "AVAILABLE"),
            ("1", "END"),
        ]
        assert client.get("/healthz").json()["models"] == {
            "classifier": 1,
            "translator": 1,
            TRANSLATOR: 2,
        }
    assert server.process.poll() is None
    log = server.log()
    assert f"model={TRANSLATOR} version=2 available" in log
    assert "Traceback" not in log and " ERROR " not in log
    print(
        f"{len(records)} requests ({sum(extra.values())} after the plan) in {elapsed:.1f} s; "
        f"version 2 published at {switch['published'] - started:.1f} s, "
        f"first answered at {switch['first_v2_answer'] - started:.1f} s"
    )
    assert os.path.isdir(os.path.join(server.models[TRANSLATOR], "2"))
