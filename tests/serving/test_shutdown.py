"""SIGTERM on a real `apps.serve` process: it stops accepting (HTTP and gRPC),
finishes the request in flight, closes idle and slow connections, and exits
within `--shutdown-grace` whatever its clients do; a stop that hangs is ended
by the grace's watchdog. Each server serves one stop, so the clients of every
kind a stop must handle share one server."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

from tests.serving.serving_helpers import CLASS_NAMES, REPO_ROOT, free_port
from tests.serving.test_connections import (
    connect,
    predict_request,
    read_response,
    request_head,
    seconds_until_closed,
)

GRACE = 3.0
# The client deadlines are far beyond the grace: what closes the slow clients here is the stop.
SLOW_CLIENT_FLAGS = [
    "--header-timeout",
    "60",
    "--body-timeout",
    "60",
    "--idle-timeout",
    "60",
    "--poll-seconds",
    "0",
]


def wait_exit(server, timeout):
    """Seconds from now until the server process has exited."""
    started = time.monotonic()
    server.process.wait(timeout=timeout)
    return time.monotonic() - started


def refuses_connections(server, timeout=2.0):
    """Whether new connections are refused within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
        except ConnectionRefusedError:
            return True
        time.sleep(0.05)
    return False


def test_sigterm_finishes_the_request_in_flight_stops_grpc_and_exits_within_the_grace_despite_slow_clients(
    exports, start_server
):
    """One stop, with every kind of client at once: HTTP stops accepting and closes idle and
    half-sent connections, the gRPC API stops taking calls while HTTP drains, the request in
    flight is answered, a slow upload is cut at the grace."""
    import grpc
    from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

    grpc_port = free_port()
    server = start_server(
        {"classifier": exports.classifier},
        "--grpc-port",
        str(grpc_port),
        "--shutdown-grace",
        str(GRACE),
        *SLOW_CLIENT_FLAGS,
    )
    status_request = get_model_status_pb2.GetModelStatusRequest()
    status_request.model_spec.name = "classifier"
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    models = model_service_pb2_grpc.ModelServiceStub(channel)
    assert models.GetModelStatus(status_request, timeout=10).model_version_status[0].version == 1
    body = json.dumps({"instances": ["the cat sat on the mat"]}).encode()
    in_flight = connect(server)
    in_flight.sendall(predict_request(body)[:-10])  # the last bytes come after the signal
    kept_alive = connect(server)
    kept_alive.sendall(request_head("GET", "/healthz"))
    assert read_response(kept_alive)[0] == 200
    silent = connect(server)
    half_header = connect(server)
    half_header.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    slow_upload = connect(server)
    slow_upload.sendall(
        request_head("POST", "/v1/models/classifier:predict", b"Content-Length: 1000\r\n") + b"{"
    )
    time.sleep(0.3)  # the server holds them all

    signalled = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    assert refuses_connections(server)
    for sock in (kept_alive, silent, half_header):
        closed_after = seconds_until_closed(sock, timeout=2.0)
        assert closed_after is not None, "an idle or half-sent connection was kept open by the stop"
    in_flight.sendall(predict_request(body)[-10:])
    status, _, answer = read_response(in_flight)
    assert status == 200 and json.loads(answer)["predictions"][0]["label"] in CLASS_NAMES
    # not kept alive past its answer
    assert seconds_until_closed(in_flight, timeout=1.0) is not None
    # The slow upload keeps HTTP draining; meanwhile gRPC refuses calls.
    try:
        models.GetModelStatus(status_request, timeout=2)
        refused = False
    except grpc.RpcError as error:
        refused = error.code() == grpc.StatusCode.UNAVAILABLE
    assert refused, "the gRPC API still took calls after the stop signal"
    assert server.process.poll() is None, "refused only because the server had exited"
    assert seconds_until_closed(slow_upload, timeout=GRACE + 2) is not None
    slow_upload_closed = time.monotonic() - signalled

    exited = time.monotonic() - signalled + wait_exit(server, timeout=GRACE + 10)
    channel.close()
    # The slow upload had most of the grace to finish, and the stop no more than the grace.
    assert GRACE - 1.5 <= slow_upload_closed <= exited <= GRACE + 1.0, (slow_upload_closed, exited)
    assert server.process.returncode == -signal.SIGTERM  # uvicorn ends by its signal once stopped
    for sock in (in_flight, kept_alive, silent, half_header, slow_upload):
        sock.close()
    log = server.log()
    assert "Traceback" not in log
    assert "Closing 1 connection(s) still open at the end of the grace period." in log
    assert (
        "POST /v1/models/classifier:predict model=classifier version=1 instances=1 status=200"
        in log
    )
    assert log.count("status=499") == 1  # the slow upload: one line


def test_sigterm_with_only_idle_clients_exits_at_once(exports, start_server):
    server = start_server(
        {"classifier": exports.classifier}, "--shutdown-grace", "30", *SLOW_CLIENT_FLAGS
    )
    kept_alive = connect(server)
    kept_alive.sendall(request_head("GET", "/healthz"))
    assert read_response(kept_alive)[0] == 200
    half_header = connect(server)
    half_header.sendall(b"GET /healthz HTTP/1.1\r\n")
    time.sleep(0.3)
    server.process.send_signal(signal.SIGTERM)
    assert wait_exit(server, timeout=40) < 2.0
    kept_alive.close()
    half_header.close()
    assert "Traceback" not in server.log()


# An application whose own shutdown never ends, served by the same
# `build_server`: only the watchdog can end the process.
HANGING_APP = textwrap.dedent("""
    import logging, sys, time
    from keras_transformer.serving.http_server import ConnectionSettings, build_server, run_server

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    time.sleep(600)  # a shutdown that blocks the event loop
        else:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"up"})

    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    run_server(build_server(app, "127.0.0.1", int(sys.argv[1]), ConnectionSettings(shutdown_grace=1.5)))
""")


def test_a_stop_that_hangs_is_ended_by_the_watchdog_at_the_grace(tmp_path):
    port = free_port()
    log_path = tmp_path / "hanging.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", HANGING_APP, str(port)],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONPATH=REPO_ROOT),
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except ConnectionRefusedError:
                    time.sleep(0.1)
            signalled = time.monotonic()
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
            exited = time.monotonic() - signalled
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert 1.5 - 0.05 <= exited <= 1.5 + 1.0, exited
    assert process.returncode == 1
    assert (
        "Still running 1.5 s after the stop signal (--shutdown-grace): exiting now."
        in log_path.read_text()
    )
