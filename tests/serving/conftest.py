"""Tiny random-weight exports for the server's tests, the direct answers of
those SavedModels, and a helper that runs `apps.serve` as a real process.

The exports are built once per session with the library's own functions
(vocabulary, tokenizer, models, `export_classifier`, `export_translator`) and
are small enough (width 16, one block, short sequences) to export in seconds.
Their weights are random, so the tests compare the server's answers with what
the same SavedModel answers when called directly, never with fixed texts.
"""

import shutil
import signal
import time

import pytest

from keras_transformer.serving.repository import load_saved_model
from tests.serving.serving_helpers import (
    TEXT_POOL,
    ServerProcess,
    build_exports,
    call_direct,
    free_port,
    load_direct,
    start_explorer_server,
)


@pytest.fixture(scope="session")
def exports(tmp_path_factory, randomize):
    return build_exports(tmp_path_factory, randomize)


@pytest.fixture(scope="session")
def direct_models(exports):
    """Loaded SavedModels by (model name, version): the reference the server is compared with."""
    return {
        ("classifier", 1): load_direct(exports.version_dir("classifier")),
        ("translator", 1): load_direct(exports.version_dir("translator")),
        ("translator", 2): load_direct(exports.spare_translator),
    }


@pytest.fixture(scope="session")
def direct_models_loader(exports, direct_models):
    """A `ModelRepository` loader that hands out the SavedModels `direct_models` already
    loaded (the files are the same) for version 1 of both exports, and loads any other path."""
    loaded = {
        exports.version_dir(model): direct_models[(model, 1)]
        for model in ("classifier", "translator")
    }
    return lambda path: loaded.get(str(path)) or load_saved_model(path)


@pytest.fixture(scope="session")
def direct_answers(direct_models):
    """Per text of TEXT_POOL, each model's direct answer, the text called alone (a batch of one):
    {(model, version): {text: answer}}; a classifier answer is (probabilities, label)."""
    answers = {}
    for key, loaded in direct_models.items():
        answers[key] = {}
        for text in TEXT_POOL:
            outputs = call_direct(loaded, [text])
            if key[0] == "classifier":
                answers[key][text] = (outputs["probabilities"][0], outputs["label"][0])
            else:
                answers[key][text] = outputs["translation"][0]
    return answers


@pytest.fixture
def start_server(tmp_path):
    """`start_server({name: base path}, *extra_args)` -> a running `ServerProcess`, stopped after
    the test.
    """
    started = []

    def start(models, *extra_args):
        server = ServerProcess(models, tmp_path / f"server{len(started)}.log", extra_args)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def api_server(exports, tmp_path_factory):
    """A real server of both exports and of `translator_copy`, a private copy of the translator
    (`.models["translator_copy"]`: its base path) that test_load.py publishes version 2 to; its
    gRPC API on (`.grpc_channel`: a client's channel to it); at most 8 examples and 64 KiB a
    request; the translator's `greedy` signature public; its folders polled every second.
    The server of test_grpc.py, test_load.py and test_signatures.py, whose tests leave the
    exports' two models as they found them: a server start (a process importing TensorFlow)
    costs seconds, and one serves them all."""
    import grpc

    root = tmp_path_factory.mktemp("api_server")
    copy = str(root / "translator_copy")
    shutil.copytree(exports.translator, copy)
    process = ServerProcess(
        {
            "classifier": exports.classifier,
            "translator": exports.translator,
            "translator_copy": copy,
        },
        root / "server.log",
        [
            "--grpc-port",
            str(free_port()),
            "--max-instances",
            "8",
            "--max-body-bytes",
            "65536",
            "--signatures",
            "translator:greedy",
            "--poll-seconds",
            "1",
        ],
    )
    process.models = {"translator_copy": copy}
    process.grpc_channel = grpc.insecure_channel(f"127.0.0.1:{process.grpc_port}")
    yield process
    # SIGTERM with a client's channel still open: the gRPC server stops within
    # its grace and the app shuts down cleanly (uvicorn then exits by the signal it got).
    started = time.monotonic()
    status = process.stop()
    with open(process.log_path, errors="replace") as log_file:
        log = log_file.read()
    assert status in (0, -signal.SIGTERM) and "Application shutdown complete" in log, (
        status,
        log[-3000:],
    )
    assert time.monotonic() - started < 15
    process.grpc_channel.close()


@pytest.fixture(scope="session")
def explorer_server(exports, tmp_path_factory):
    """`apps.serve --explorer` (see `start_explorer_server`), shared with tests/browser."""
    server = start_explorer_server(exports, tmp_path_factory)
    yield server
    server.stop()
