"""TensorFlow Serving's command line (`tensorflow_model_server`'s flags) starts `keras-transformer
serve` unchanged, with the same meanings and defaults.

Two real servers started with TensorFlow Serving's documented command lines answer over
TensorFlow Serving's own client stubs; the other tests run `apps.serve`'s `main` in this process
up to the server's start (`started`), or to its refusal (`serve_refusal`)."""

import contextlib
import os
import re
import signal
import time
from unittest import mock

import grpc
import httpx
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

import keras_transformer.cli.serve
from keras_transformer.serving import ServerSettings
from tests.serving.serving_helpers import (
    NON_UTF8_TEXT,
    ServerProcess,
    assert_classifier_answer,
    free_port,
    serve_refusal,
    text_bytes,
    text_json,
)

TEXTS = [
    "the cat sat on the mat",
    "",
    "la casa es azul",
    NON_UTF8_TEXT,
    "stocks rose sharply today",
]
RPC_TIMEOUT = 60.0

# Every flag of TensorFlow Serving's model server (tensorflow_serving/model_servers/main.cc),
# written out here from its source: each must be one of ours or refused by name.
TF_SERVING_FLAGS = """
port grpc_socket_path rest_api_port rest_api_num_threads rest_api_timeout_in_ms
rest_api_enable_cors_support enable_batching allow_version_labels_for_unavailable_models
batching_parameters_file enable_per_model_batching_parameters model_config_file
model_config_file_poll_wait_seconds model_name model_base_path num_load_threads
num_unload_threads max_num_load_retries load_retry_interval_micros
file_system_poll_wait_seconds flush_filesystem_caches tensorflow_session_parallelism
tensorflow_session_config_file tensorflow_intra_op_parallelism tensorflow_inter_op_parallelism
use_alts_credentials ssl_config_file platform_config_file per_process_gpu_memory_fraction
saved_model_tags grpc_channel_arguments grpc_max_threads enable_model_warmup
num_request_iterations_for_warmup version monitoring_config_file
remove_unused_fields_from_bundle_metagraph prefer_tflite_model num_tflite_pools
num_tflite_interpreters_per_pool enable_signature_method_name_check xla_cpu_compilation_enabled
xla_gpu_compilation_enabled enable_profiler thread_pool_factory_config_file mixed_precision
skip_initialize_tpu enable_grpc_healthcheck_service enable_serialization_as_tensor_content
""".split()
IMPLEMENTED = {
    "port",
    "rest_api_port",
    "rest_api_num_threads",
    "rest_api_timeout_in_ms",
    "enable_batching",
    "batching_parameters_file",
    "model_config_file",
    "model_config_file_poll_wait_seconds",
    "model_name",
    "model_base_path",
    "file_system_poll_wait_seconds",
    "enable_model_warmup",
    "num_request_iterations_for_warmup",
    "version",
}
NOT_IMPLEMENTED = sorted(set(TF_SERVING_FLAGS) - IMPLEMENTED)

# TensorFlow Serving's example batching parameters file (its docs, "Batching Configuration").
DOCUMENTED_BATCHING_PARAMETERS = """max_batch_size { value: 128 }
batch_timeout_micros { value: 0 }
max_enqueued_batches { value: 1000000 }
num_batch_threads { value: 8 }
"""


# Two real servers, started together: their starts (a TensorFlow import each) overlap.


@pytest.fixture(scope="module")
def servers(exports, tmp_path_factory):
    """{"both": the server of TensorFlow Serving's documented command line with both ports,
    "grpc_only": the same without --rest_api_port}; each serves the classifier as `classifier`."""
    folder = tmp_path_factory.mktemp("tf_serving_command_line")
    base_path = os.path.abspath(exports.classifier)
    grpc_port, rest_port, grpc_only_port = free_port(), free_port(), free_port()
    started = {
        "both": ServerProcess.with_arguments(
            [
                f"--port={grpc_port}",
                f"--rest_api_port={rest_port}",
                "--model_name=classifier",
                f"--model_base_path={base_path}",
            ],
            folder / "both.log",
            rest_port,
            grpc_port,
        ),
        "grpc_only": ServerProcess.with_arguments(
            [
                f"--port={grpc_only_port}",
                "--model_name=classifier",
                f"--model_base_path={base_path}",
            ],
            folder / "grpc_only.log",
            0,
            grpc_only_port,
        ),
    }
    try:
        for server in started.values():
            server.wait_healthy()
        yield started
    finally:
        for server in started.values():
            server.stop()


def grpc_predict(port, texts):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "classifier"
    request.inputs["text"].CopyFrom(
        tf.make_tensor_proto([text_bytes(text) for text in texts], dtype=tf.string)
    )
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        response = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(
            request, timeout=RPC_TIMEOUT
        )
    return {name: tf.make_ndarray(tensor) for name, tensor in response.outputs.items()}


@pytest.mark.timeout(600)  # the session's exports are built inside it when it runs first
def test_tf_serving_command_line_serves_rest_and_grpc_alike(servers, direct_answers):
    server = servers["both"]
    outputs = grpc_predict(server.grpc_port, TEXTS)
    rest = httpx.post(
        f"{server.url}/v1/models/classifier:predict",
        json={"instances": [text_json(text) for text in TEXTS]},
        timeout=RPC_TIMEOUT,
    )
    assert rest.status_code == 200, rest.text
    for index, text in enumerate(TEXTS):
        grpc_answer = (outputs["probabilities"][index], outputs["label"][index])
        assert_classifier_answer(rest.json()["predictions"][index], grpc_answer, atol=0)
        assert_classifier_answer(
            {"probabilities": grpc_answer[0], "label": grpc_answer[1].decode()},
            direct_answers[("classifier", 1)][text],
        )
    # --model_name names the model on both APIs.
    status = httpx.get(f"{server.url}/v1/models/classifier", timeout=RPC_TIMEOUT).json()
    assert status["model_version_status"][0]["state"] == "AVAILABLE"


def test_without_rest_api_port_only_grpc_listens(servers, direct_answers):
    server = servers["grpc_only"]
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = "classifier"
        response = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(
            request, timeout=RPC_TIMEOUT
        )
    assert [status.state for status in response.model_version_status] == [
        get_model_status_pb2.ModelVersionStatus.AVAILABLE
    ]
    outputs = grpc_predict(server.grpc_port, TEXTS[:2])
    np.testing.assert_allclose(
        outputs["probabilities"][0], direct_answers[("classifier", 1)][TEXTS[0]][0], atol=1e-6
    )
    assert listening_ports(server.process.pid) == {server.grpc_port}
    assert "No REST API: --rest_api_port is 0" in server.log()
    # SIGTERM stops it as it stops a server with REST: the app's shutdown runs, gRPC included.
    started = time.monotonic()
    status = server.stop()
    assert status in (0, -signal.SIGTERM) and time.monotonic() - started < 15
    assert "Application shutdown complete" in server.log()


def listening_ports(pid):
    """The TCP ports process `pid` listens on (Linux: its sockets' inodes in /proc/net/tcp*)."""
    inodes = set()
    for entry in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{entry}")
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


# In this process: main() up to the server's start.


@pytest.fixture
def folder(tmp_path):
    path = tmp_path / "model"
    path.mkdir()
    return str(path)


def started(*args):
    """`(app, sockets)`: the app `apps.serve ARGS`'s main would serve (its `state` holds the
    repository and settings) and the sockets its server would be given (None: its own host and
    port). Main stops where the server would start."""
    captured = {}

    def run_server(server, sockets=None):
        captured.update(app=server.config.app, sockets=sockets)

    with mock.patch("keras_transformer.serving.http_server.run_server", run_server):
        keras_transformer.cli.serve.main(list(args))
    return captured["app"], captured["sockets"]


def settings_of(*args):
    return started(*args)[0].state.settings


def test_defaults_are_tf_servings(folder):
    parsed = keras_transformer.cli.serve.build_parser().parse_args(["--model_base_path", folder])
    assert (parsed.grpc_port, parsed.rest_api_port, parsed.model_name) == (8500, 0, "default")
    assert parsed.batching is False and parsed.enable_model_warmup is True
    assert parsed.poll_seconds == 1 and parsed.model_config_file_poll_wait_seconds == 0
    app, sockets = started("--model_base_path", folder, "--port", str(free_port()))
    # No REST API: no socket to listen on; the app (its models, its gRPC API) still runs.
    assert sockets == []
    assert app.state.settings.request_timeout == 30.0 and not app.state.settings.batching
    assert list(app.state.repository.models) == ["default"]
    assert app.state.repository.warm_up == 1
    _, sockets = started("--model_base_path", folder, "--port=0", f"--rest_api_port={free_port()}")
    assert sockets is None  # uvicorn listens on its host and port


def test_model_name_and_base_path_are_the_same_as_model(folder):
    by_name = started(
        "--model_name=m",
        f"--model_base_path={folder}",
        "--port=0",
        f"--rest_api_port={free_port()}",
    )[0]
    by_model = started("--model", f"m={folder}", "--port=0", f"--rest_api_port={free_port()}")[0]
    assert by_name.state.repository.configs == by_model.state.repository.configs


@pytest.mark.parametrize(
    "args, batching",
    [
        ([], False),
        (["--enable_batching"], True),
        (["--enable_batching=true"], True),
        (["--enable_batching=false"], False),
        (["--enable_batching", "true"], True),
        (["--enable_batching", "--no-batching"], False),
    ],
)
def test_boolean_forms(folder, args, batching):
    settings = settings_of("--model", f"m={folder}", f"--port={free_port()}", *args)
    assert settings.batching is batching


def test_warmup_iterations_reach_the_repository(folder):
    app, _ = started(
        "--model", f"m={folder}", f"--port={free_port()}", "--num_request_iterations_for_warmup=3"
    )
    assert app.state.repository.warm_up == 3


def test_enable_model_warmup_false_reaches_the_repository(folder):
    app, _ = started(
        "--model", f"m={folder}", f"--port={free_port()}", "--enable_model_warmup=false"
    )
    assert app.state.repository.warm_up == 0


@pytest.mark.parametrize("value", ["yes", "1", "True"])
def test_a_boolean_is_true_or_false(folder, value):
    result = serve_refusal("--model", f"m={folder}", f"--enable_batching={value}")
    assert result.returncode == 2
    assert f"argument --enable_batching: expected true or false, got {value!r}" in result.stderr


def test_the_rest_timeout_and_threads(folder):
    settings = settings_of(
        "--model",
        f"m={folder}",
        f"--port={free_port()}",
        "--rest_api_timeout_in_ms=1500",
        "--rest_api_num_threads=3",
    )
    assert settings.request_timeout == 1.5 and settings.json_threads == 3


def write(tmp_path, text, name="batching.config"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_documented_batching_parameters_file(folder, tmp_path):
    path = write(tmp_path, DOCUMENTED_BATCHING_PARAMETERS)
    settings = settings_of(
        "--model",
        f"m={folder}",
        "--port=0",
        f"--rest_api_port={free_port()}",
        "--enable_batching",
        f"--batching_parameters_file={path}",
    )
    assert settings.batching is True
    assert (settings.max_batch_size, settings.batch_timeout_ms, settings.num_threads) == (128, 0, 8)
    assert settings.max_queued_examples == 1000000 * 128


def test_fields_left_out_keep_the_defaults_and_flags(folder, tmp_path):
    path = write(tmp_path, "# the batches waiting\nmax_enqueued_batches { value: 3 }\n")
    settings = settings_of(
        "--model",
        f"m={folder}",
        f"--port={free_port()}",
        "--enable_batching",
        "--batching_parameters_file",
        path,
        "--max-batch-size",
        "8",
    )
    defaults = ServerSettings()
    assert settings.max_queued_examples == 3 * 8 and settings.max_batch_size == 8
    assert settings.num_threads == defaults.num_threads
    assert settings.batch_timeout_ms == defaults.batch_timeout_ms


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "max_batch_size { value: 4 }\nmax_batch_sise { value: 4 }\n",
            '{path}:2:1: Message type "tensorflow.serving.BatchingParameters" has no field '
            'named "max_batch_sise".',
        ),
        ("max_batch_size: 4\n", "{path}:1:17: 'max_batch_size: 4': Expected \"{{\"."),
        (
            "max_batch_size { value: 4 }\n\nnum_batch_threads { value: 0 }\n",
            "{path}:3: num_batch_threads must be at least 1, got 0",
        ),
        (
            "batch_timeout_micros { value: -1 }",
            "{path}:1: batch_timeout_micros must be at least 0, got -1",
        ),
        (
            "max_batch_size { value: 4 }\nallowed_batch_sizes: [2, 4]\n",
            "{path}:2: allowed_batch_sizes (padding batches to sizes) is not implemented by "
            "keras-transformer serve",
        ),
        (
            "enable_large_batch_splitting { value: true }",
            "{path}:1: enable_large_batch_splitting (splitting a request across batches) is not "
            "implemented by keras-transformer serve",
        ),
    ],
)
def test_a_bad_batching_parameters_file_is_one_line_naming_it(folder, tmp_path, text, message):
    path = write(tmp_path, text)
    result = serve_refusal(
        "--model",
        f"m={folder}",
        f"--port={free_port()}",
        "--enable_batching",
        "--batching_parameters_file",
        path,
    )
    assert result.returncode == 1
    assert result.stderr == f"error: {message.format(path=path)}\n"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--enable_batching"], "error: {path}: cannot read the batching parameters file: "),
        ([], "error: --batching_parameters_file needs --enable_batching\n"),
        (
            ["--enable_batching=false"],
            "error: --batching_parameters_file needs --enable_batching\n",
        ),
        (
            ["--enable_batching", "--num-threads", "2"],
            "error: --num-threads and num_batch_threads in {path} both set it: give one\n",
        ),
    ],
)
def test_batching_parameters_file_refusals(folder, tmp_path, args, message):
    path = str(tmp_path / "missing.config")
    if "--num-threads" in args:
        path = write(tmp_path, DOCUMENTED_BATCHING_PARAMETERS)
    result = serve_refusal(
        "--model",
        f"m={folder}",
        f"--port={free_port()}",
        "--batching_parameters_file",
        path,
        *args,
    )
    assert result.returncode == 1 and result.stderr.startswith(message.format(path=path))


def test_every_tf_serving_flag_is_ours_or_refused_by_name():
    options = set(keras_transformer.cli.serve.build_parser()._option_string_actions)
    assert {f"--{flag}" for flag in IMPLEMENTED} <= options
    assert set(NOT_IMPLEMENTED) == keras_transformer.cli.serve.TF_SERVING_FLAGS_NOT_IMPLEMENTED


@pytest.mark.parametrize("flag", NOT_IMPLEMENTED)
def test_an_unimplemented_tf_serving_flag_is_one_clear_error(folder, flag):
    result = serve_refusal("--model", f"m={folder}", f"--{flag}=1")
    assert result.returncode == 2
    assert result.stderr == (
        f"error: --{flag} is a TensorFlow Serving flag that keras-transformer serve does not "
        "implement\n"
    )


@pytest.mark.parametrize(
    "args",
    [["--ssl_config_file", "ssl.config"], ["--use_alts_credentials"], ["--ssl-config-file=x"]],
)
def test_every_form_of_an_unimplemented_flag_is_refused(args):
    # Before anything else is checked: here no model is given at all.
    result = serve_refusal(*args)
    assert result.returncode == 2 and re.fullmatch(
        r"error: --(ssl_config_file|use_alts_credentials) is a TensorFlow Serving flag that "
        r"keras-transformer serve does not implement\n",
        result.stderr,
    )


def test_a_flag_that_is_not_tf_servings_is_still_argparse_s_error(folder):
    result = serve_refusal("--model", f"m={folder}", "--bogus_flag=1")
    assert result.returncode == 2 and "unrecognized arguments: --bogus_flag=1" in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--explorer"], "error: --explorer is a page of the REST API: give --rest_api_port"),
        (
            ["--model_name=my/model", "--model_base_path=."],
            "error: --model_name: model name 'my/model' may only hold",
        ),
        (
            ["--rest_api_timeout_in_ms=10", "--request-timeout=1"],
            "error: --request-timeout and --rest_api_timeout_in_ms both set the timeout",
        ),
        (["--rest_api_timeout_in_ms=0"], "error: --rest_api_timeout_in_ms must be at least 1"),
        (
            ["--model_config_file_poll_wait_seconds=-1"],
            "error: --model_config_file_poll_wait_seconds must be a finite number at least 0, got -1",
        ),
    ],
)
def test_flag_value_refusals(folder, args, message):
    result = serve_refusal("--model", f"m={folder}", *args)
    assert result.returncode == 1 and result.stderr.startswith(message), result.stderr


def test_no_model_is_a_usage_error_naming_tf_servings_flags():
    result = serve_refusal("--model_name=classifier")
    assert result.returncode == 2
    assert "one of --model_base_path (with --model_name), --model NAME=PATH or" in result.stderr


def test_version(capsys):
    from keras_transformer import __version__

    with pytest.raises(SystemExit) as exit_:
        keras_transformer.cli.serve.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"keras-transformer serve {__version__}\n"
