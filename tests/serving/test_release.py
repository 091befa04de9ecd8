"""A replaced or removed version is released: after a swap (requests having run
on the old version, batching on) nothing holds the old `ServedVersion`, and it
is freed at the swap rather than at Python's next full collection. A version
folder deleted while serving is unloaded, as TensorFlow Serving does, even the
last one; a base path that disappears changes nothing."""

import gc
import os
import shutil
import weakref

import pytest
from starlette.testclient import TestClient

from keras_transformer.serving import ModelRepository, ServerSettings, create_app
from keras_transformer.serving.model_config import ModelConfig, VersionPolicy
from tests.serving.serving_helpers import publish_copy
from tests.serving.version_models import write_version_model

BODY = {"instances": ["the cat", "la casa"]}


@pytest.fixture
def gc_off():
    """Python's cyclic collector off for the test: only an explicit collection frees cycles."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def graph_of(served):
    """A weak reference to the graph of `served`'s serving function: the
    graphs and functions of a loaded SavedModel are held in reference
    cycles, and their memory (the runtime's copy of each function included)
    goes back only once they are collected."""
    return weakref.ref(served.signatures["serving_default"].graph)


def test_a_replaced_version_is_freed_at_the_swap(exports, tmp_path, gc_off):
    base = str(tmp_path / "classifier")
    shutil.copytree(exports.classifier, base)
    repository = ModelRepository({"classifier": base}, poll_seconds=0)
    app = create_app(repository, ServerSettings(batching=True, batch_timeout_ms=1.0))
    with TestClient(app, raise_server_exceptions=False) as client:
        model = repository.models["classifier"]
        for _ in range(3):
            response = client.post("/v1/models/classifier:predict", json=BODY)
            assert response.status_code == 200, response.text
        old, old_graph = weakref.ref(model.current), graph_of(model.current)
        publish_copy(exports.version_dir("classifier"), base)
        # With the collector off, the old version's functions are gone only
        # if nothing holds them and the swap itself collected their cycles.
        assert model.refresh() is True and model.current.version == 2
        assert old() is None, [type(referrer) for referrer in gc.get_referrers(old())]
        assert old_graph() is None
        response = client.post("/v1/models/classifier:predict", json=BODY)
        assert response.status_code == 200
        assert (
            client.get("/v1/models/classifier").json()["model_version_status"][1]["state"] == "END"
        )


def test_a_version_held_by_a_request_at_the_swap_is_freed_at_a_poll_after_it(tmp_path, gc_off):
    base = str(tmp_path / "model")
    write_version_model(base, 1)
    repository = ModelRepository({"model": base}, poll_seconds=0)
    model = repository.models["model"]
    assert model.refresh() is True
    in_flight = model.resolve()  # what a request running at the swap holds
    old_graph = graph_of(in_flight)
    write_version_model(base, 2)
    assert model.refresh() is True and model.current.version == 2
    assert old_graph() is not None and in_flight.retired
    del in_flight  # the request ends
    assert model.refresh() is False  # the next poll
    assert old_graph() is None


def serve_versions(base, policy):
    repository = ModelRepository([ModelConfig("model", base, policy)], poll_seconds=0)
    return repository, TestClient(create_app(repository), raise_server_exceptions=False)


def answered_version(client, path="/v1/models/model"):
    response = client.post(path + ":predict", json={"instances": ["a"]})
    return (
        response.json()["predictions"][0] if response.status_code == 200 else response.status_code
    )


def states(client):
    return {
        int(status["version"]): status["state"]
        for status in client.get("/v1/models/model").json()["model_version_status"]
    }


def test_a_deleted_version_folder_is_unloaded(tmp_path, gc_off):
    base = str(tmp_path / "model")
    for version in (1, 2, 3):
        write_version_model(base, version)
    repository, client = serve_versions(base, VersionPolicy("all"))
    with client:
        model = repository.models["model"]
        assert sorted(model.served) == [1, 2, 3]
        two = graph_of(model.served[2])
        shutil.rmtree(os.path.join(base, "2"))
        assert model.refresh() is True
        assert sorted(model.served) == [1, 3] and two() is None
        assert states(client) == {3: "AVAILABLE", 2: "END", 1: "AVAILABLE"}
        assert answered_version(client, "/v1/models/model/versions/2") == 404
        assert answered_version(client, "/v1/models/model/versions/1") == 1
        # The newest deleted: the one below it serves requests for the latest.
        shutil.rmtree(os.path.join(base, "3"))
        assert model.refresh() is True and answered_version(client) == 1


def test_deleting_the_only_version_unloads_it_and_a_new_one_serves_again(tmp_path, gc_off, caplog):
    base = str(tmp_path / "model")
    write_version_model(base, 1)
    repository, client = serve_versions(base, VersionPolicy())
    with client:
        model = repository.models["model"]
        one = graph_of(model.current)
        shutil.rmtree(os.path.join(base, "1"))
        assert model.refresh() is True
        # As TensorFlow Serving: no version left, nothing serves.
        assert model.current is None and one() is None
        assert "no version left to serve" in caplog.text
        assert answered_version(client) == 404
        assert client.get("/healthz").status_code == 503
        assert states(client) == {1: "END"}
        write_version_model(base, 2)
        assert model.refresh() is True and answered_version(client) == 2
        assert client.get("/healthz").status_code == 200


def test_a_missing_base_path_changes_nothing(tmp_path):
    base = str(tmp_path / "model")
    write_version_model(base, 1)
    repository, client = serve_versions(base, VersionPolicy())
    with client:
        model = repository.models["model"]
        # A network file system's hiccup looks like this; an empty folder does not.
        os.rename(base, base + ".away")
        assert model.refresh() is False
        assert answered_version(client) == 1
        os.rename(base + ".away", base)
        write_version_model(base, 2)
        assert model.refresh() is True and answered_version(client) == 2


def test_a_model_with_no_version_yet_has_no_status(tmp_path):
    base = tmp_path / "model"
    base.mkdir()
    repository, client = serve_versions(str(base), VersionPolicy())
    with client:
        # TensorFlow Serving's NOT_FOUND for a model with no version seen.
        response = client.get("/v1/models/model")
        assert response.status_code == 404
        assert response.json() == {"error": "Could not find any versions of model model."}
        assert client.get("/healthz").status_code == 503
