"""Version folders and URL versions: only ASCII digits name a version, and a
version that failed to load (still being copied in) is retried on later polls.
Numbers past Python's int-string conversion limit (in a URL, a JSON body or a
Content-Length) get a JSON error, never a 500.

The SavedModels here are stand-ins: a version folder holds a `saved_model.pb`
whose text says whether the copy is complete, and the loader refuses the
incomplete ones as TensorFlow refuses a truncated file.
"""

import os
import time

import pytest
from starlette.testclient import TestClient

from keras_transformer.serving import ModelRepository, create_app

COMPLETE = b"complete"


class StandInModel:
    """What the repository needs of a loaded SavedModel: no signatures to warm up."""

    signatures = {}


def stand_in_loader(path):
    with open(os.path.join(path, "saved_model.pb"), "rb") as model_file:
        contents = model_file.read()
    if contents != COMPLETE:
        raise ValueError(f"Truncated saved_model.pb in {path}")
    return StandInModel()


def write_version(base, folder, contents=COMPLETE):
    os.makedirs(os.path.join(base, folder), exist_ok=True)
    with open(os.path.join(base, folder, "saved_model.pb"), "wb") as model_file:
        model_file.write(contents)


def finish_copy(base, folder):
    # Appends in place, as a copy does: the version folder's own entries (and
    # so its mtime) stay as they were.
    with open(os.path.join(base, folder, "saved_model.pb"), "ab") as model_file:
        model_file.write(COMPLETE[len(b"comp") :])


def wait_for_version(model, version, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if model.current is not None and model.current.version == version:
            return
        time.sleep(0.02)
    pytest.fail(f"Version {version} was not served within {timeout} s; states: {model.states}")


@pytest.mark.parametrize("stray", ["²", "١", "①", "1²"])
def test_a_non_ascii_digit_folder_does_not_stop_new_versions(tmp_path, stray):
    base = str(tmp_path)
    write_version(base, "1")
    os.makedirs(os.path.join(base, stray))
    repository = ModelRepository({"classifier": base}, loader=stand_in_loader, poll_seconds=0)
    model = repository.models["classifier"]
    assert model.refresh() is True and model.current.version == 1
    write_version(base, "2")
    assert model.refresh() is True and model.current.version == 2
    # "١" is not version 1 either: no status for it, and version 2 serves.
    assert sorted(model.states) == [1, 2]


def test_a_version_completed_after_failing_loads_on_a_later_poll(tmp_path):
    base = str(tmp_path)
    write_version(base, "1")
    repository = ModelRepository(
        {"classifier": base},
        loader=stand_in_loader,
        poll_seconds=0.02,
        retry_seconds=0.05,
        max_retry_seconds=0.2,
    )
    model = repository.models["classifier"]
    assert model.refresh() is True
    write_version(base, "2", contents=b"comp")
    assert model.refresh() is False
    assert (
        model.current.version == 1
        and model.states[2][0] == "END"
        and "Truncated" in model.states[2][1]
    )
    finish_copy(base, "2")
    repository.start_polling()
    try:
        wait_for_version(model, 2)
    finally:
        repository.stop_polling()
    assert model.states[2] == ("AVAILABLE", "")


def test_failed_version_is_retried_with_backoff(tmp_path):
    base = str(tmp_path)
    write_version(base, "1", contents=b"comp")
    attempts = []

    def counting_loader(path):
        attempts.append(path)
        return stand_in_loader(path)

    repository = ModelRepository(
        {"classifier": base},
        loader=counting_loader,
        poll_seconds=0,
        retry_seconds=0.5,
        max_retry_seconds=10.0,
    )
    model = repository.models["classifier"]
    assert model.refresh() is False
    # Within the backoff a poll does not try again.
    assert model.refresh() is False and len(attempts) == 1
    time.sleep(0.6)
    assert model.refresh() is False and len(attempts) == 2
    # The second failure waits twice as long.
    time.sleep(0.6)
    assert model.refresh() is False and len(attempts) == 2


def test_when_the_newest_version_cannot_load_the_newest_that_can_serves(tmp_path):
    base = str(tmp_path)
    write_version(base, "1")
    write_version(base, "2")
    write_version(base, "3", contents=b"comp")
    repository = ModelRepository(
        {"classifier": base}, loader=stand_in_loader, poll_seconds=0, retry_seconds=0.05
    )
    model = repository.models["classifier"]
    assert model.refresh() is True
    assert model.current.version == 2 and model.states[3][0] == "END"
    finish_copy(base, "3")
    time.sleep(0.1)
    assert model.refresh() is True and model.current.version == 3


@pytest.fixture
def client(tmp_path):
    write_version(str(tmp_path), "1")
    repository = ModelRepository(
        {"classifier": str(tmp_path)}, loader=stand_in_loader, poll_seconds=0
    )
    with TestClient(create_app(repository), raise_server_exceptions=False) as client:
        yield client


def assert_json_error(response, status):
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]


@pytest.mark.parametrize("version", ["²", "١", "𝟙", "①", "1²", "٣"])
@pytest.mark.parametrize("suffix", [":predict", "", "/metadata"])
def test_a_non_ascii_digit_url_version_is_a_json_400(client, version, suffix):
    path = f"/v1/models/classifier/versions/{version}{suffix}"
    if suffix == ":predict":
        response = client.post(path, json={"instances": ["a"]})
    else:
        response = client.get(path)
    assert_json_error(response, 400)
    assert "positive integer" in response.json()["error"]


def test_a_url_version_past_the_int_conversion_limit_is_a_json_404(client):
    response = client.post(
        f"/v1/models/classifier/versions/{'9' * 5000}:predict", json={"instances": ["a"]}
    )
    assert_json_error(response, 404)
    assert "5000 digits" in response.json()["error"]


def test_a_json_integer_past_the_int_conversion_limit_is_a_json_400(client):
    body = b'{"instances": [' + b"7" * 5000 + b"]}"
    response = client.post(
        "/v1/models/classifier:predict", content=body, headers={"content-type": "application/json"}
    )
    assert_json_error(response, 400)
    assert "digits" in response.json()["error"]


def test_a_content_length_past_the_int_conversion_limit_is_a_json_413(client):
    response = client.post(
        "/v1/models/classifier:predict",
        content=b'{"instances": ["a"]}',
        headers={"content-type": "application/json", "content-length": "9" * 5000},
    )
    assert_json_error(response, 413)
    assert "5000 digits" in response.json()["error"]
