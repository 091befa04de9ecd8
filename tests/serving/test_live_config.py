"""The models a running server serves change as TensorFlow Serving's do: a
polled model config file and gRPC's HandleReloadConfigRequest (sent with
tensorflow-serving-api's own messages) add, remove and reconfigure models,
a config that cannot be served leaves the current one serving and says why,
and models that stay never fail a request while others come and go. The
metadata APIs serve a version's assets.extra files beside TensorFlow
Serving's signature_def, to a client that asks for them.

The SavedModels are version_models.py's, which answer their own version
number, so every answer shows which version served it.
"""

import contextlib
import json
import logging
import os
import shutil
import threading
import time
import weakref

import grpc
import httpx
import pytest
import tensorflow as tf
from google.protobuf import json_format, struct_pb2
from starlette.testclient import TestClient
from tensorflow.core.protobuf import error_codes_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from keras_transformer.serving import ModelRepository, ServerSettings, create_app
from keras_transformer.serving.model_config import ModelConfig, ModelConfigError, VersionPolicy
from keras_transformer.serving.repository import (
    ASSETS_EXTRA_FILE_BYTES,
    load_saved_model,
)
from tests.serving.serving_helpers import ServerProcess, free_port, join_threads, start_threads
from tests.serving.version_models import write_version_model

RPC_TIMEOUT = 60.0
LOGGER = "keras_transformer.serving"


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """Versions 1 to 3 of a tiny model, saved once, to copy into base paths."""
    root = str(tmp_path_factory.mktemp("live_config_library"))
    for version in (1, 2, 3):
        write_version_model(root, version, signatures=("serving_default", "greedy"))
    return root


@pytest.fixture(scope="module")
def loader(library):
    """Loads each library version once, whatever base path it was copied to; a version folder
    holding a file BROKEN fails to load, as a truncated export does."""
    loaded, lock = {}, threading.Lock()

    def load(path):
        if os.path.exists(os.path.join(path, "BROKEN")):
            raise ValueError(f"broken export at {path}")
        version = os.path.basename(os.path.normpath(path))
        with lock:
            if version not in loaded:
                loaded[version] = load_saved_model(os.path.join(library, version))
        return loaded[version]

    return load


def publish(library, base, version):
    """Copies library version `version` to `base/VERSION` whole (staged, then renamed)."""
    os.makedirs(base, exist_ok=True)
    staging = os.path.join(base, f".staging-{version}")
    shutil.copytree(os.path.join(library, str(version)), staging)
    os.rename(staging, os.path.join(base, str(version)))
    return os.path.join(base, str(version))


@pytest.fixture
def bases(tmp_path, library):
    """Base paths a (versions 1, 2), b (1) and c (1)."""
    paths = {name: str(tmp_path / name) for name in ("a", "b", "c")}
    for version in (1, 2):
        publish(library, paths["a"], version)
    publish(library, paths["b"], 1)
    publish(library, paths["c"], 1)
    return paths


def config_text(models):
    """A model config file's text listing `models`, (name, base path) pairs."""
    entries = "".join(
        f'  config {{\n    name: "{name}"\n    base_path: "{base}"\n'
        '    model_platform: "tensorflow"\n  }\n'
        for name, base in models
    )
    return f"model_config_list {{\n{entries}}}\n"


def write_file(path, text):
    # Written beside and renamed, as a deployment replaces a file: a poll never reads half.
    with open(f"{path}.tmp", "w", encoding="utf-8") as config_file:
        config_file.write(text)
    os.replace(f"{path}.tmp", path)


def served_versions(repository, name):
    return sorted(repository.models[name].served)


def wait_until(condition, what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    pytest.fail(f"not within {timeout} s: {what}")


def answer_version(served):
    """The version number the served SavedModel answers with."""
    return int(served.run("serving_default", {"text": tf.constant([b"x"]).numpy()})["version"][0])


def error_lines(caplog):
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == LOGGER and record.levelno >= logging.ERROR
    ]


# The config file, polled


@pytest.fixture
def file_repository(tmp_path, bases, loader):
    """A repository of a and b read from a config file (not yet polling)."""
    path = str(tmp_path / "models.config")
    write_file(path, config_text([("a", bases["a"]), ("b", bases["b"])]))
    repository = ModelRepository(
        [ModelConfig("a", bases["a"]), ModelConfig("b", bases["b"])],
        loader=loader,
        poll_seconds=0.05,
        config_file=path,
        config_poll_seconds=0.05,
    )
    repository.refresh_all()
    yield repository, path
    repository.stop_polling()


def test_the_polled_file_adds_and_removes_models(file_repository, bases):
    repository, path = file_repository
    repository.start_polling()
    write_file(path, config_text([("a", bases["a"]), ("b", bases["b"]), ("c", bases["c"])]))
    wait_until(lambda: "c" in repository.models, "model c added")
    # A model appears with a version loaded, never empty.
    assert answer_version(repository.models["c"].current) == 1
    held = repository.models["a"].current  # a request in flight on a when a is removed
    write_file(path, config_text([("b", bases["b"]), ("c", bases["c"])]))
    wait_until(lambda: "a" not in repository.models, "model a removed")
    assert sorted(repository.models) == ["b", "c"]
    # The request in flight finishes on the version it held; then the version is freed.
    assert held.retired and answer_version(held) == 2
    released = weakref.ref(held)
    del held
    wait_until(lambda: released() is None, "model a's version freed")


def test_an_unchanged_file_is_not_applied_again(file_repository, caplog):
    repository, _ = file_repository
    caplog.set_level(logging.INFO, logger=LOGGER)
    models = repository.models
    repository.poll_config_file()  # its first read: the same models as at the start
    assert repository.models == models and all(
        repository.models[name] is models[name] for name in models
    )
    assert not [r for r in caplog.records if "Model config applied" in r.getMessage()]
    current = repository.models
    repository.poll_config_file()
    assert repository.models is current  # the same text is not parsed nor applied again


@pytest.mark.parametrize(
    "broken_text, fragment",
    [
        (lambda bases: 'model_config_list { config { name: "a" ', ":1:"),
        (lambda bases: config_text([("a b", bases["a"])]), "may only hold"),
        (lambda bases: "", "no models"),
        (
            lambda bases: 'custom_model_config { type_url: "x" }',
            "custom_model_config is not supported",
        ),
        (
            lambda bases: config_text([("a", bases["a"]), ("a", bases["b"])]),
            "is listed twice (first at line 2)",
        ),
        (
            lambda bases: config_text([("a", bases["a"]), ("gone", bases["a"] + "-gone")]),
            "no folder at base_path",
        ),
    ],
    ids=["syntax", "name", "empty", "custom", "twice", "missing"],
)
def test_a_broken_file_keeps_the_config_serving_and_says_why_once(
    file_repository, bases, caplog, broken_text, fragment
):
    repository, path = file_repository
    repository.poll_config_file()
    models = dict(repository.models)
    write_file(path, broken_text(bases))
    caplog.set_level(logging.INFO, logger=LOGGER)
    for _ in range(3):
        repository.poll_config_file()
    errors = error_lines(caplog)
    assert len(errors) == 1 and fragment in errors[0] and path in errors[0], errors
    assert "current one still serves" in errors[0]
    assert repository.models == models
    assert answer_version(repository.models["a"].current) == 2
    # Fixed, it is applied at the next poll.
    write_file(path, config_text([("a", bases["a"])]))
    repository.poll_config_file()
    assert sorted(repository.models) == ["a"]


def test_a_reload_lasts_until_the_file_is_polled_again(file_repository, bases):
    # As TensorFlow Serving: each poll of the file serves the file's config.
    repository, _ = file_repository
    repository.poll_config_file()
    assert repository.reload_config([ModelConfig("c", bases["c"])]) == {}
    assert sorted(repository.models) == ["c"]
    repository.poll_config_file()
    assert sorted(repository.models) == ["a", "b"]


def test_adjust_configs_applies_to_every_config_read_later(file_repository, bases):
    repository, _ = file_repository

    def only_models_named_a_or_b(configs):
        unknown = [config.name for config in configs if config.name not in ("a", "b")]
        if unknown:
            raise ModelConfigError(f"--signatures names models a and b only, not {unknown}")
        return [
            ModelConfig(config.name, config.base_path, signatures=("greedy",)) for config in configs
        ]

    repository.adjust_configs = only_models_named_a_or_b
    repository.poll_config_file()
    assert sorted(repository.models["a"].current.signatures) == ["greedy", "serving_default"]
    with pytest.raises(ModelConfigError, match="not \\['c'\\]"):
        repository.reload_config([ModelConfig("c", bases["c"])])
    assert sorted(repository.models) == ["a", "b"]


@pytest.mark.timeout(300)
def test_the_server_polls_its_config_file(tmp_path, bases):
    # The one process of this file: the command line's flags reach the repository.
    path = str(tmp_path / "models.config")
    write_file(path, config_text([("a", bases["a"])]))
    server = ServerProcess(
        {},
        tmp_path / "server.log",
        [
            "--model_config_file",
            path,
            "--model_config_file_poll_wait_seconds",
            "0.2",
            "--signatures",
            "greedy",
        ],
    )
    try:
        write_file(path, config_text([("a", bases["a"]), ("b", bases["b"])]))
        deadline = time.monotonic() + 60
        while httpx.get(f"{server.url}/healthz", timeout=10).json()["models"].get("b") != 1:
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.1)
        # --signatures applies to the model read later too.
        answer = httpx.post(
            f"{server.url}/v1/models/b:predict",
            json={"signature_name": "greedy", "instances": ["x"]},
            timeout=30,
        )
        assert answer.status_code == 200 and answer.json()["predictions"] == [1], answer.text
        write_file(path, config_text([("b", bases["b"])]) + "}")
        time.sleep(1.5)  # several polls of the broken file
        answer = httpx.post(f"{server.url}/v1/models/a:predict", json={"instances": ["x"]})
        assert answer.json() == {"predictions": [2]}
        log = server.log()
        assert log.count("Model config not reloaded") == 1 and "Traceback" not in log, log
    finally:
        server.stop()


# Changes under the repository


def test_a_policy_change_loads_before_it_unloads(bases, loader):
    repository = ModelRepository(
        [ModelConfig("a", bases["a"], VersionPolicy("specific", versions=frozenset({1})))],
        loader=loader,
        poll_seconds=0,
    )
    repository.refresh_all()
    model = repository.models["a"]
    assert served_versions(repository, "a") == [1]
    seen = []
    original = model._unload_all_but

    def unload_all_but(keep, folders):
        seen.append((sorted(model.served), dict(model.labels)))  # just before the unload
        return original(keep, folders)

    model._unload_all_but = unload_all_but
    policy = VersionPolicy("specific", versions=frozenset({2}))
    config = ModelConfig("a", bases["a"], policy, version_labels={"stable": 2})
    assert repository.apply_config([config]) == {}
    assert repository.models["a"] is model and served_versions(repository, "a") == [2]
    # Version 2 loaded and the label moved before version 1 went.
    assert seen == [([1, 2], {"stable": 2})]
    # A policy wanting only a version that cannot load keeps what serves.
    os.makedirs(os.path.join(bases["a"], "3"))
    open(os.path.join(bases["a"], "3", "BROKEN"), "w").close()
    policy = VersionPolicy("specific", versions=frozenset({3}))
    repository.apply_config([ModelConfig("a", bases["a"], policy)])
    assert served_versions(repository, "a") == [2]
    assert repository.models["a"].states[3][0] == "END"


def test_a_new_base_path_serves_once_it_has_a_version(bases, loader, library, tmp_path):
    repository = ModelRepository([ModelConfig("a", bases["a"])], loader=loader, poll_seconds=0)
    repository.refresh_all()
    old = repository.models["a"]
    empty = str(tmp_path / "empty")
    os.makedirs(empty)
    unavailable = repository.apply_config([ModelConfig("a", empty)])
    # The old one serves until the new base path has a version.
    assert "a" in unavailable and repository.models["a"] is old
    assert answer_version(repository.models["a"].current) == 2
    publish(library, empty, 3)
    repository.refresh_all()
    assert repository.models["a"] is not old and old.detached
    assert answer_version(repository.models["a"].current) == 3
    # Signatures changed, same base path: the versions loaded are reused, not loaded again.
    loads = []
    repository._loader = lambda path: loads.append(path) or loader(path)
    repository.apply_config([ModelConfig("a", empty, signatures=("greedy",))])
    assert sorted(repository.models["a"].current.signatures) == ["greedy", "serving_default"]
    assert loads == []


def test_two_configs_of_one_name_are_refused(bases, loader):
    repository = ModelRepository([ModelConfig("a", bases["a"])], loader=loader, poll_seconds=0)
    with pytest.raises(ModelConfigError, match="listed twice"):
        repository.apply_config([ModelConfig("a", bases["a"]), ModelConfig("a", bases["b"])])


# gRPC's HandleReloadConfigRequest, and requests while models come and go


def reload_request(models):
    """A ReloadConfigRequest built with TensorFlow Serving's messages: {name: (base path,
    specific versions or None, {label: version})}."""
    request = model_management_pb2.ReloadConfigRequest()
    for name, (base, versions, labels) in models.items():
        config = request.config.model_config_list.config.add()
        config.name = name
        config.base_path = base
        config.model_platform = "tensorflow"
        if versions:
            config.model_version_policy.specific.versions.extend(versions)
        for label, version in labels.items():
            config.version_labels[label] = version
    return request


def predict_request(model, label=None):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    if label:
        request.model_spec.version_label = label
    request.inputs["text"].CopyFrom(tf.make_tensor_proto([b"x"], dtype=tf.string))
    return request


@contextlib.contextmanager
def serving(configs, loader, poll_seconds=0.05):
    """(repository, REST client, ModelService stub, PredictionService stub) of an app with its
    gRPC API on a free port."""
    repository = ModelRepository(configs, loader=loader, poll_seconds=poll_seconds)
    port = free_port()
    app = create_app(repository, ServerSettings(grpc_port=port))
    with (
        TestClient(app, raise_server_exceptions=False) as client,
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        yield (
            repository,
            client,
            model_service_pb2_grpc.ModelServiceStub(channel),
            prediction_service_pb2_grpc.PredictionServiceStub(channel),
        )


def rest_version(client, model, label=None):
    path = f"/v1/models/{model}" + (f"/labels/{label}" if label else "") + ":predict"
    response = client.post(path, json={"instances": ["x"]})
    return response.json()["predictions"][0] if response.status_code == 200 else response


def test_reload_config_request_adds_removes_and_changes_policies(bases, loader, caplog):
    with serving([ModelConfig("a", bases["a"])], loader) as (repository, client, models, _):
        assert rest_version(client, "a") == 2
        response = models.HandleReloadConfigRequest(
            reload_request({"a": (bases["a"], [1], {"stable": 1}), "b": (bases["b"], None, {})}),
            timeout=RPC_TIMEOUT,
        )
        assert (
            response.status.error_code == error_codes_pb2.OK and not response.status.error_message
        )
        assert rest_version(client, "a") == 1 and rest_version(client, "a", "stable") == 1
        assert rest_version(client, "b") == 1
        response = models.HandleReloadConfigRequest(
            reload_request({"b": (bases["b"], None, {})}), timeout=RPC_TIMEOUT
        )
        assert response.status.error_code == error_codes_pb2.OK
        assert client.post("/v1/models/a:predict", json={"instances": ["x"]}).status_code == 404
        assert sorted(repository.models) == ["b"]

        # Refused: the call fails with TensorFlow Serving's code, the current config serves.
        caplog.set_level(logging.INFO, logger=LOGGER)
        twice = reload_request({"b": (bases["b"], None, {})})
        twice.config.model_config_list.config.add().CopyFrom(
            twice.config.model_config_list.config[0]
        )
        custom = model_management_pb2.ReloadConfigRequest()
        custom.config.custom_model_config.type_url = "type.googleapis.com/x"
        for request, code, fragment in [
            (
                twice,
                grpc.StatusCode.INVALID_ARGUMENT,
                "ReloadConfigRequest: config #2: model 'b' is listed twice",
            ),
            (
                reload_request({"c": (bases["c"] + "-gone", None, {})}),
                grpc.StatusCode.INVALID_ARGUMENT,
                "no folder at base_path",
            ),
            (custom, grpc.StatusCode.INVALID_ARGUMENT, "custom_model_config is not supported"),
            (
                model_management_pb2.ReloadConfigRequest(),
                grpc.StatusCode.INVALID_ARGUMENT,
                "no models",
            ),
        ]:
            with pytest.raises(grpc.RpcError) as raised:
                models.HandleReloadConfigRequest(request, timeout=RPC_TIMEOUT)
            assert raised.value.code() == code and fragment in raised.value.details(), (
                raised.value.details()
            )
            # The server's log says why, as TensorFlow Serving's "ReloadConfig failed" does.
            why = error_lines(caplog)[-1]
            assert fragment in why and "the current config still serves" in why, why
            assert sorted(repository.models) == ["b"] and rest_version(client, "b") == 1
        # A model whose export does not load: as TensorFlow Serving, UNKNOWN naming it; it
        # stays configured (retried), and the others serve on.
        open(os.path.join(bases["c"], "1", "BROKEN"), "w").close()
        with pytest.raises(grpc.RpcError) as raised:
            models.HandleReloadConfigRequest(
                reload_request({"b": (bases["b"], None, {}), "c": (bases["c"], None, {})}),
                timeout=RPC_TIMEOUT,
            )
        assert raised.value.code() == grpc.StatusCode.UNKNOWN
        assert "1 model(s) did not become available: c (version 1: ValueError: broken export" in (
            raised.value.details()
        )
        assert rest_version(client, "b") == 1 and sorted(repository.models) == ["b", "c"]
        assert client.get("/v1/models/c").json()["model_version_status"][0]["state"] == "END"
        assert "did not become available: c" in error_lines(caplog)[-1]
        assert "Traceback" not in caplog.text


@pytest.mark.timeout(120)
def test_models_come_and_go_under_traffic_with_no_failed_request(bases, loader, library):
    configs = [ModelConfig("a", bases["a"]), ModelConfig("b", bases["b"])]
    with serving(configs, loader) as (repository, client, models, predictions):
        counts = {"a": 0, "b": 0, "c": 0}
        versions = {"a": set(), "b": set()}
        failures = []
        stop = threading.Event()

        def traffic(index):
            while not stop.is_set():
                for name in ("a", "b", "c"):
                    try:
                        response = predictions.Predict(predict_request(name), timeout=RPC_TIMEOUT)
                    except grpc.RpcError as error:
                        if name != "c":  # c comes and goes
                            failures.append((name, error.code(), error.details()))
                        continue
                    counts[name] += 1
                    if name in versions:
                        versions[name].add(tf.make_ndarray(response.outputs["version"])[0])

        threads = start_threads([lambda i=i: traffic(i) for i in range(3)], "traffic")
        try:
            policies = [[1], [2], None, [1, 2]]
            for step in range(8):
                wanted = {
                    "a": (bases["a"], policies[step % len(policies)], {}),
                    "b": (bases["b"], None, {}),
                }
                if step % 2 == 0:
                    wanted["c"] = (bases["c"], None, {})
                models.HandleReloadConfigRequest(reload_request(wanted), timeout=RPC_TIMEOUT)
                if step in (2, 5):  # a new version of b, picked up by the version poller
                    publish(library, bases["b"], 2 if step == 2 else 3)
                time.sleep(0.25)
            wait_until(lambda: repository.models["b"].current.version == 3, "b's version 3")
            time.sleep(0.3)
        finally:
            stop.set()
            join_threads(threads, 60)
        assert failures == []
        assert counts["a"] > 20 and counts["b"] > 20, counts
        assert versions["a"] == {1, 2} and versions["b"] == {1, 2, 3}, versions


# assets.extra in the metadata


def test_metadata_serves_assets_extra_beside_signature_def(bases, loader, caplog):
    extra = os.path.join(bases["a"], "2", "assets.extra")
    os.makedirs(os.path.join(extra, "folder"))
    settings = {"beam_width": 4, "length_penalty": 0.6, "languages": ["en", "es"], "x": None}
    files = {
        "translator.json": json.dumps(settings),
        "class_names.txt": "business\nsport\ntech\n",
        "broken.json": "{not json",
        "nan.json": '{"a": NaN}',
        "big.txt": "x" * (ASSETS_EXTRA_FILE_BYTES + 1),
        "weights.bin": "not served",
        "folder/inner.json": "{}",
    }
    for name, text in files.items():
        with open(os.path.join(extra, name), "w", encoding="utf-8") as extra_file:
            extra_file.write(text)
    with open(os.path.join(extra, "latin1.txt"), "wb") as extra_file:
        extra_file.write(b"caf\xe9")
    expected = {"class_names.txt": "business\nsport\ntech\n", "translator.json": settings}
    caplog.set_level(logging.WARNING, logger=LOGGER)
    configs = [ModelConfig("a", bases["a"], VersionPolicy("all"))]
    with serving(configs, loader) as (_, client, _, predictions):
        body = client.get("/v1/models/a/metadata").json()
        assert body["metadata"]["assets_extra"] == expected
        assert sorted(body["metadata"]["signature_def"]["signature_def"]) == ["serving_default"]
        # Version 1 has no assets.extra.
        assert (
            client.get("/v1/models/a/versions/1/metadata").json()["metadata"]["assets_extra"] == {}
        )

        request = get_model_metadata_pb2.GetModelMetadataRequest()
        request.model_spec.name = "a"
        request.metadata_field.append("signature_def")
        # A TensorFlow Serving client's answer: signature_def alone, as before.
        response = predictions.GetModelMetadata(request, timeout=RPC_TIMEOUT)
        assert list(response.metadata) == ["signature_def"]
        signature_defs = get_model_metadata_pb2.SignatureDefMap()
        assert response.metadata["signature_def"].Unpack(signature_defs)
        assert list(signature_defs.signature_def) == ["serving_default"]
        request.metadata_field.append("assets_extra")
        response = predictions.GetModelMetadata(request, timeout=RPC_TIMEOUT)
        assert sorted(response.metadata) == ["assets_extra", "signature_def"]
        assets_extra = struct_pb2.Struct()
        assert response.metadata["assets_extra"].Unpack(assets_extra)
        assert json_format.MessageToDict(assets_extra) == expected
    warned = "\n".join(r.getMessage() for r in caplog.records)
    for name in ("broken.json", "nan.json", "big.txt", "latin1.txt"):
        assert f"assets.extra/{name} is not served" in warned, warned
    assert "weights.bin" not in warned and "inner.json" not in warned
