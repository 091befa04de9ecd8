"""Prometheus metrics at /monitoring/prometheus/metrics, on the in-process app: requests counted by
model, version, signature and status with their latency, batch sizes and queued examples, version
states and load failures, and no new series however many unknown names clients send."""

import contextlib
import functools
import os
import random
import shutil
import string
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from keras_transformer.serving import ModelRepository, ServerSettings, create_app
from keras_transformer.serving.repository import ServedVersion
from tests.serving.serving_helpers import join_threads, start_threads
from tests.serving.test_app import (
    predict,
    serve,  # noqa: F401  the app fixture, shared
    shared_loader,  # noqa: F401  its loader, one load per SavedModel
)

METRICS_PATH = "/monitoring/prometheus/metrics"
PREFIX = "keras_transformer_serving_"
REQUESTS = PREFIX + "request_duration_seconds"


def scrape(client):
    """{(sample name, ((label, value), ...) sorted): value} of one scrape, checked to be Prometheus
    text.
    """
    response = client.get(METRICS_PATH)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def sample(samples, name, default=None, **labels):
    return samples.get((name, tuple(sorted(labels.items()))), default)


def request_count(samples, api="rest", model="-", version="-", signature="-", status=200):
    return sample(
        samples,
        REQUESTS + "_count",
        0.0,
        api=api,
        model=model,
        version=version,
        signature=signature,
        status=str(status),
    )


def request_series(samples):
    """The label sets of the request counts."""
    return {labels for name, labels in samples if name == REQUESTS + "_count"}


@contextlib.contextmanager
def app_client(models, loader, **repository_options):
    """A TestClient of an app serving `models` with default settings, its repository as
    `.repository`.
    """
    repository = ModelRepository(models, loader=loader, poll_seconds=0, **repository_options)
    with TestClient(
        create_app(repository, ServerSettings()), raise_server_exceptions=False
    ) as client:
        client.repository = repository
        yield client


def test_requests_are_counted_by_model_version_signature_and_status(serve):  # noqa: F811
    with serve() as client:
        for text in ["the cat sat on the mat", "la casa es azul", ""]:
            assert predict(client, "classifier", {"instances": [text]}).status_code == 200
        greedy = {"signature_name": "greedy", "instances": ["el perro come pan"]}
        assert predict(client, "translator", greedy, version=1).status_code == 200
        assert client.post("/v1/models/classifier:predict", content=b"{not json").status_code == 400
        assert (
            predict(
                client, "classifier", {"signature_name": "nope", "instances": ["a"]}
            ).status_code
            == 400
        )
        assert predict(client, "no_such_model", {"instances": ["a"]}).status_code == 404
        assert client.get("/v1/models/translator").status_code == 200
        assert client.post(METRICS_PATH).status_code == 405
        samples = scrape(client)
        openmetrics = client.get(
            METRICS_PATH, headers={"accept": "application/openmetrics-text; version=1.0.0"}
        )

    assert openmetrics.status_code == 200
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    assert openmetrics.text.endswith("# EOF\n")

    assert request_count(samples, model="classifier", version="1", signature="serving_default") == 3
    assert request_count(samples, model="translator", version="1", signature="greedy") == 1
    # Refused before their signature was known (bad JSON) or because it is unknown.
    assert request_count(samples, model="classifier", version="1", status=400) == 2
    assert request_count(samples, status=404) == 1
    # the status request: no version or signature named
    assert request_count(samples, model="translator") == 1
    assert request_count(samples, status=405) == 1
    assert request_series(samples) == {
        tuple(
            sorted(
                dict(
                    api="rest", model=model, version=version, signature=signature, status=status
                ).items()
            )
        )
        for model, version, signature, status in [
            ("classifier", "1", "serving_default", "200"),
            ("translator", "1", "greedy", "200"),
            ("classifier", "1", "-", "400"),
            ("-", "-", "-", "404"),
            ("translator", "-", "-", "200"),
            ("-", "-", "-", "405"),
        ]
    }

    labels = dict(
        api="rest", model="classifier", version="1", signature="serving_default", status="200"
    )
    buckets = sorted(
        (float(dict(key)["le"]), value)
        for (name, key), value in samples.items()
        if name == REQUESTS + "_bucket" and {k: v for k, v in key if k != "le"} == labels
    )
    assert buckets[-1] == (float("inf"), 3.0)
    counts = [count for _, count in buckets]
    assert counts == sorted(counts)
    assert 0 < sample(samples, REQUESTS + "_sum", **labels) < 60


def random_name(rng):
    return "".join(
        rng.choice(string.ascii_letters + string.digits + "_-.") for _ in range(rng.randint(1, 40))
    )


def test_unknown_names_from_clients_add_no_series(serve):  # noqa: F811
    rng = random.Random(15)
    with serve() as client:
        service = client.app.state.service

        def send_unknown():
            """Requests naming models, versions and signatures that are not served, of every kind."""
            yield predict(client, random_name(rng), {"instances": ["a"]})
            yield client.get(f"/v1/models/{random_name(rng)}/versions/{rng.randint(1, 10**12)}")
            yield client.get(f"/v1/models/classifier/versions/{rng.randint(2, 10**12)}/metadata")
            yield predict(
                client, "classifier", {"signature_name": random_name(rng), "instances": ["a"]}
            )
            yield client.get(f"/{random_name(rng)}/{random_name(rng)}")

        def observe_unknown_grpc():
            service.metrics.observe_request(
                "grpc",
                random_name(rng),
                rng.randint(1, 10**12),
                random_name(rng),
                "NOT_FOUND",
                0.001,
            )
            service.metrics.observe_request(
                "grpc", "classifier", 1, random_name(rng), "INVALID_ARGUMENT", 0.001
            )

        statuses = {
            response.status_code for response in send_unknown()
        }  # one of each first: their series
        observe_unknown_grpc()
        # a scrape is counted once answered: the next one shows the series of scrapes
        scrape(client)
        before = scrape(client)
        for _ in range(20):  # 100 requests and 40 gRPC reports
            statuses |= {response.status_code for response in send_unknown()}
            observe_unknown_grpc()
        after = scrape(client)

    assert statuses == {400, 404}
    assert request_series(after) == request_series(before)
    # Counted in the series there were: per round, an unknown model's predict and status and an
    # unknown path.
    assert request_count(after, status=404) - request_count(before, status=404) == 60
    assert (
        request_count(after, model="classifier", status=404)
        - request_count(before, model="classifier", status=404)
        == 20
    )
    assert request_count(after, model="classifier", version="1", status=400) == 21
    assert request_count(after, api="grpc", status="NOT_FOUND") == 21
    assert (
        request_count(after, api="grpc", model="classifier", version="1", status="INVALID_ARGUMENT")
        == 21
    )
    assert len(after) == len(before)


@pytest.mark.timeout(300)
def test_batch_sizes_queued_examples_and_requests_in_flight(serve, monkeypatch):  # noqa: F811
    release = threading.Event()
    original = ServedVersion.run

    def held(self, signature_name, inputs):
        assert release.wait(60), "never released"
        return original(self, signature_name, inputs)

    queued_requests, examples_each = 5, 2
    labels = dict(model="classifier", version="1", signature="serving_default")
    responses = []

    def send(count):
        responses.append(
            predict(client, "classifier", {"instances": ["the cat sat on the mat"] * count})
        )

    # One model thread: while the first request is held in the model, the others queue behind it.
    with serve(num_threads=1, max_batch_size=64) as client:
        monkeypatch.setattr(ServedVersion, "run", held)
        threads = start_threads([functools.partial(send, 1)], "first")
        try:
            wait_for(lambda: sample(scrape(client), PREFIX + "batch_size_count", **labels) == 1)
            threads += start_threads(
                [functools.partial(send, examples_each)] * queued_requests, "queued"
            )
            # Every request arrived: the held one, the queued ones and the scrape.
            wait_for(
                lambda: (
                    sample(scrape(client), PREFIX + "in_flight_requests", api="rest")
                    == queued_requests + 2
                )
            )
            busy = scrape(client)
        finally:
            release.set()
            join_threads(threads, 120)
        idle = scrape(client)

    assert [response.status_code for response in responses] == [200] * (1 + queued_requests)
    assert sample(busy, PREFIX + "queued_examples", **labels) == queued_requests * examples_each
    assert sample(idle, PREFIX + "in_flight_requests", api="rest") == 1
    # The queued requests ran as one batch once the model thread was free.
    assert sample(idle, PREFIX + "batch_size_count", **labels) == 2
    assert sample(idle, PREFIX + "batch_size_sum", **labels) == 1 + queued_requests * examples_each
    assert sample(idle, PREFIX + "batch_size_bucket", le="1.0", **labels) == 1
    assert sample(idle, PREFIX + "batch_size_bucket", le="8.0", **labels) == 1
    assert sample(idle, PREFIX + "batch_size_bucket", le="16.0", **labels) == 2
    assert sample(idle, PREFIX + "queued_examples", 0.0, **labels) == 0


def wait_for(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not true within {timeout:.0f} s"
        time.sleep(0.02)


def test_versions_and_load_failures(exports, shared_loader, tmp_path):  # noqa: F811
    base = str(tmp_path / "classifier")
    shutil.copytree(exports.classifier, base)
    broken = os.path.join(base, "2")
    os.makedirs(broken)
    with open(os.path.join(broken, "saved_model.pb"), "wb") as model_file:
        model_file.write(b"not a SavedModel")

    models = {"classifier": base, "translator": exports.translator}
    with app_client(models, shared_loader, retry_seconds=0.01) as client:
        first = scrape(client)
        time.sleep(0.05)  # past the retry delay: the next refresh tries version 2 again
        assert client.repository.models["classifier"].refresh() is False
        second = scrape(client)

    assert sample(first, PREFIX + "model_load_failures_total", model="classifier") == 1
    assert sample(second, PREFIX + "model_load_failures_total", model="classifier") == 2
    assert sample(second, PREFIX + "model_load_failures_total", model="translator") == 0
    assert sample(second, PREFIX + "model_versions", model="classifier", state="AVAILABLE") == 1
    assert sample(second, PREFIX + "model_versions", model="classifier", state="END") == 1
    assert sample(second, PREFIX + "model_versions", model="translator", state="AVAILABLE") == 1
    assert sample(second, PREFIX + "newest_available_version", model="classifier") == 1


def test_each_app_has_its_own_registry(exports, shared_loader):  # noqa: F811
    """Two apps in one process (as the tests build many) count their own requests."""
    models = {"classifier": exports.classifier}
    with app_client(models, shared_loader) as first, app_client(models, shared_loader) as second:
        for _ in range(3):
            assert predict(first, "classifier", {"instances": ["a"]}).status_code == 200
        assert predict(second, "classifier", {"instances": ["a"]}).status_code == 200
        counts = [
            request_count(
                scrape(client), model="classifier", version="1", signature="serving_default"
            )
            for client in (first, second)
        ]
    assert counts == [3, 1]
