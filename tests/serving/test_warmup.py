"""The server replays a version's warm-up requests (`assets.extra/tf_serving_warmup_requests`)
as TensorFlow Serving does: before the version takes requests, each record once (or
`num_request_iterations` times), records for signatures it does not serve skipped; a file
that does not replay refuses the version, with the reason in its status, while the version
before it keeps serving; an export without the file gets one call per signature.

The loader hands out the tiny classifier export that `direct_models` loaded (the version
folders are copies of it); every model call goes through `ServedVersion.run`, which the
tests wrap to see what ran, and when."""

import logging
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from starlette.testclient import TestClient
from tensorflow_serving.apis import prediction_log_pb2

from keras_transformer.serving import ModelRepository, ServerSettings, create_app
from keras_transformer.serving.model_config import model_configs
from keras_transformer.serving.repository import ServedVersion
from tests.serving.serving_helpers import publish_copy

# The tiny classifier's records, in the file's order: four per signature (three texts alone,
# then a batch of four), signatures in name order.
SIGNATURE_BATCHES = [1, 1, 1, 4]


class ModelCalls(list):
    """Every model call's (signature, batch size, the version called, the version serving
    requests then: what `serving()` returns, None by default)."""

    def serving(self):
        return None


@pytest.fixture
def model_calls(monkeypatch):
    calls = ModelCalls()
    original = ServedVersion.run

    def recording(self, signature_name, inputs):
        (batch,) = {len(value) for value in inputs.values() if np.ndim(value)}
        calls.append((signature_name, batch, self.version, calls.serving()))
        return original(self, signature_name, inputs)

    monkeypatch.setattr(ServedVersion, "run", recording)
    return calls


@pytest.fixture
def classifier_base(exports, tmp_path):
    """A base path holding a copy of the tiny classifier's version 1."""
    base = str(tmp_path / "classifier")
    shutil.copytree(exports.classifier, base)
    return base


def repository_of(base, direct_models, signatures=()):
    return ModelRepository(
        model_configs({"classifier": base}, signatures=signatures),
        loader=lambda path: direct_models[("classifier", 1)],
        poll_seconds=0,
    )


def test_a_new_version_replays_its_warm_up_requests_before_it_serves(
    exports, direct_models, classifier_base, model_calls, caplog
):
    # `attention` is not named, so not served; `classify` is public as a classification.
    repository = repository_of(classifier_base, direct_models)
    model = repository.models["classifier"]
    model_calls.serving = lambda: model.current and model.current.version
    expected = [("classify", batch) for batch in SIGNATURE_BATCHES] + [
        ("serving_default", batch) for batch in SIGNATURE_BATCHES
    ]
    assert model.refresh() is True
    assert [call[:2] for call in model_calls] == expected
    assert {call[2:] for call in model_calls} == {(1, None)}

    # A hot swap: version 2 runs its records while version 1 still takes the requests.
    publish_copy(exports.version_dir("classifier"), classifier_base)
    model_calls.clear()
    with caplog.at_level(logging.DEBUG, logger="keras_transformer.serving"):
        assert model.refresh() is True
    assert [call[:2] for call in model_calls] == expected
    assert {call[2:] for call in model_calls} == {(2, 1)}
    assert model.current.version == 2
    # The `attention` records (0 to 3) name a signature this version does not serve.
    skipped = [record.getMessage() for record in caplog.records if "skipped" in record.message]
    assert skipped == [
        f"model=classifier version=2: warm-up record {index} skipped: signature attention is "
        "not served"
        for index in range(4)
    ]
    assert "model=classifier version=2 warmed up: 8 calls from 12 warm-up records" in caplog.text


def test_each_record_runs_num_request_iterations_times(exports, direct_models, model_calls):
    path = exports.version_dir("classifier")
    served = ServedVersion("classifier", 1, path, direct_models[("classifier", 1)])
    served.warm_up(num_request_iterations=2)
    # classify's records, then serving_default's, each twice in a row
    assert [(name, batch) for name, batch, *_ in model_calls] == [
        (name, batch)
        for name in ("classify", "serving_default")
        for batch in [1, 1, 1, 1, 1, 1, 4, 4]
    ]


def test_an_export_without_the_file_runs_each_signature_once(
    exports, direct_models, tmp_path, monkeypatch
):
    """On one text: `classify`, which reads tf.Examples, refuses it and is left cold, and
    the version still loads, as TensorFlow Serving loads it with no warm-up file."""
    folder = str(tmp_path / "1")
    shutil.copytree(exports.version_dir("classifier"), folder)
    os.remove(os.path.join(folder, "assets.extra", "tf_serving_warmup_requests"))
    calls = []
    original = ServedVersion.run

    def recording(self, name, inputs):
        calls.append((name, [value.tolist() for value in inputs.values()]))
        return original(self, name, inputs)

    monkeypatch.setattr(ServedVersion, "run", recording)
    public = ("serving_default", "attention", "classify")
    served = ServedVersion("classifier", 1, folder, direct_models[("classifier", 1)], public)
    served.warm_up()
    assert sorted(calls) == [
        ("attention", [[b"warm up"]]),
        ("classify", [[b"warm up"]]),
        ("serving_default", [[b"warm up"]]),
    ]


def _predict_log(inputs, signature_name="serving_default"):
    log = prediction_log_pb2.PredictionLog()
    log.predict_log.request.model_spec.signature_name = signature_name
    for name, value in inputs.items():
        log.predict_log.request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    return log.SerializeToString()


def _write_records(path, records):
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)


def _first_record(path):
    return next(iter(tf.data.TFRecordDataset(path))).numpy()


def _cut_short(path):
    with open(path, "r+b") as records_file:
        # Into the last record's data: a file cut between records (or in a record's length)
        # reads as a shorter one, for TensorFlow Serving's reader as for TensorFlow's.
        records_file.truncate(os.path.getsize(path) - 1)


def _overwrite(path, contents):
    with open(path, "wb") as records_file:
        records_file.write(contents)


BROKEN_FILES = {
    # name: (writes the broken file over the good one at `path`, what the status then says)
    "cut short": (_cut_short, "is not a TFRecord file of warm-up requests: truncated record at"),
    "not a TFRecord file": (
        lambda path: _overwrite(path, b"a text file, not warm-up requests\n"),
        "is not a TFRecord file of warm-up requests: ",
    ),
    "not a PredictionLog": (
        lambda path: _write_records(path, [b"\xff\xff\xff\xff"]),
        "Warm-up record 0 of ",
    ),
    "too many records": (
        lambda path: _write_records(path, [_first_record(path)] * 1001),
        "holds more than 1000 warm-up records, TensorFlow Serving's maximum.",
    ),
    "a session_run_log": (
        lambda path: _write_records(
            path,
            [
                _first_record(path),
                prediction_log_pb2.PredictionLog(
                    session_run_log=prediction_log_pb2.SessionRunLog()
                ).SerializeToString(),
            ],
        ),
        "Warm-up record 1: a session_run_log, which TensorFlow Serving does not replay",
    ),
    "inputs the signature does not take": (
        lambda path: _write_records(
            path, [_predict_log({"texts": np.array([b"a text"], dtype=object)})]
        ),
        "Warm-up record 0 gives signature 'serving_default' the inputs ['texts']; it takes "
        "['text'].",
    ),
    "a request the model refuses": (
        lambda path: _write_records(path, [_predict_log({"text": np.array([7], np.int32)})]),
        "Warm-up record 0 fails on signature 'serving_default': ",
    ),
}


@pytest.mark.parametrize("broken", sorted(BROKEN_FILES))
def test_a_warm_up_file_that_does_not_replay_refuses_the_version(
    exports, direct_models, classifier_base, broken
):
    write_broken, reason = BROKEN_FILES[broken]
    repository = repository_of(classifier_base, direct_models)
    with TestClient(create_app(repository, ServerSettings())) as client:
        assert client.get("/healthz").json()["models"] == {"classifier": 1}
        folder = publish_copy(exports.version_dir("classifier"), classifier_base)
        write_broken(os.path.join(folder, "assets.extra", "tf_serving_warmup_requests"))
        assert repository.models["classifier"].refresh() is False

        (status,) = client.get("/v1/models/classifier/versions/2").json()["model_version_status"]
        assert status["state"] == "END"
        message = status["status"]["error_message"]
        assert message.startswith("WarmupRequestsError: ") and reason in message, message
        # The version before it keeps serving.
        assert client.get("/healthz").json()["models"] == {"classifier": 1}
        answer = client.post("/v1/models/classifier:predict", json={"instances": ["a text"]})
        assert answer.status_code == 200 and len(answer.json()["predictions"]) == 1
