"""apps/serve.py refuses bad arguments with a clear message, before starting anything.

Two refusals run as real processes (their exit status and stderr); the others run `apps.serve`'s
`main` in this process (`serve_refusal`: the same status and message, without an interpreter
start per case)."""

import pytest

from tests.serving.serving_helpers import serve_process, serve_refusal


@pytest.fixture
def folder(tmp_path):
    path = tmp_path / "model"
    path.mkdir()
    return str(path)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("classifier", "expected NAME=PATH, got 'classifier'"),
        ("=some/path", "expected NAME=PATH"),
        ("classifier=", "expected NAME=PATH"),
        ("my/model=some/path", "model name 'my/model' may only hold"),
        ("a:predict=some/path", "model name 'a:predict' may only hold"),
    ],
)
def test_bad_model_spec_is_a_usage_error(spec, message):
    result = serve_refusal("--model", spec)
    assert result.returncode == 2
    assert "--model" in result.stderr and message in result.stderr


def test_model_is_required():
    result = serve_process()
    assert result.returncode == 2 and "--model" in result.stderr and "required" in result.stderr


def test_missing_folder(tmp_path):
    missing = str(tmp_path / "nowhere")
    result = serve_process("--model", f"classifier={missing}")
    assert result.returncode != 0
    assert result.stderr.strip() == f"error: model 'classifier': no folder at {missing}"


def test_a_name_given_twice(folder):
    result = serve_refusal("--model", f"m={folder}", "--model", f"m={folder}")
    assert result.returncode != 0
    assert result.stderr.startswith("error: a model name is given twice")


@pytest.mark.parametrize(
    "flag", ["--max-body-bytes", "--max-instances", "--max-batch-size", "--num-threads"]
)
def test_sizes_must_be_positive(folder, flag):
    result = serve_refusal("--model", f"m={folder}", flag, "0")
    assert result.returncode != 0
    assert result.stderr.strip() == f"error: {flag} must be at least 1, got 0"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--port", "http"], "--port/--grpc-port: invalid int value"),
        (["--log-level", "loud"], "--log-level: invalid choice"),
        (
            ["--poll-seconds", "often"],
            "--file_system_poll_wait_seconds/--poll-seconds: invalid float value",
        ),
    ],
)
def test_malformed_values_are_usage_errors(folder, args, message):
    result = serve_refusal("--model", f"m={folder}", *args)
    assert result.returncode == 2 and message in result.stderr


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_port_out_of_range(folder, port):
    result = serve_refusal("--model", f"m={folder}", "--port", port)
    assert result.returncode != 0
    assert result.stderr.strip() == f"error: --port must be between 0 and 65535, got {port}"


@pytest.mark.parametrize(
    "flag", ["--header-timeout", "--body-timeout", "--idle-timeout", "--shutdown-grace"]
)
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_timeouts_must_be_positive_and_finite(folder, flag, value):
    result = serve_refusal("--model", f"m={folder}", flag, value)
    assert result.returncode != 0
    assert (
        result.stderr.strip()
        == f"error: {flag} must be a positive number of seconds, got {float(value):g}"
    )


def test_max_connections_must_be_positive(folder):
    result = serve_refusal("--model", f"m={folder}", "--max-connections", "0")
    assert result.returncode != 0
    assert result.stderr.strip() == "error: --max-connections must be at least 1, got 0"
