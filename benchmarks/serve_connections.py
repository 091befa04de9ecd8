"""Slow, silent and surplus connections against a real server, then SIGTERM with slow clients open.

    .venv/bin/python benchmarks/serve_connections.py --classifier exported_models/classifier

One `python -m apps.serve` with the default connection flags (or those of
`--server-args`) on 127.0.0.1. `--connections` raw connections are opened
at once, a third of each kind: silent (nothing sent), slow headers (a
request line, then one header byte every `--interval` seconds) and slow body
(whole headers, then one body byte per interval). Meanwhile one ordinary
`GET /healthz` is timed every second. Reported: per kind, how many the
server closed and when (median and slowest, seconds from opening), what the
slow bodies got, and the ordinary requests' slowest answer.

Then SIGTERM with a slow upload, a silent connection and a request whose
last bytes are sent after the signal: the time from the signal to the
process's exit, and the status that last request got.
"""

import argparse
import json
import os
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

import httpx

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREDICT = "/v1/models/classifier:predict"


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(classifier, server_args, log_path):
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "apps.serve",
        "--rest_api_port",
        str(port),
        "--model",
        f"classifier={classifier}",
        *server_args,
    ]
    log = open(log_path, "wb")
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with status {process.returncode}; see {log_path}")
        try:
            if httpx.get(url + "/healthz", timeout=5).status_code == 200:
                return process, port, url
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    process.kill()
    raise SystemExit("the server was not healthy after 300 s")


def predict_head(length):
    return (
        f"POST {PREDICT} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode("ascii")


def slow_connections(port, count, interval, give_up_after):
    """Opens `count` connections (a third of each kind) and trickles.

    Stops once the server has closed them all or the time is up.
    """
    selector = selectors.DefaultSelector()
    body = json.dumps({"instances": ["the cat"]}).encode() + b" " * 10000
    kinds = {
        "silent": (b"", b""),
        "slow headers": (b"GET /healthz HTTP/1.1\r\n", b"X-Slow: " + b"a" * 10000),
        "slow body": (predict_head(len(body)) + body[:20], body[20:]),
    }
    connections = []
    for index in range(count):
        kind = list(kinds)[index % 3]
        first, trickle = kinds[kind]
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(first)
        sock.setblocking(False)
        connection = {
            "kind": kind,
            "socket": sock,
            "opened": time.monotonic(),
            "trickle": trickle,
            "received": b"",
            "closed_after": None,
        }
        selector.register(sock, selectors.EVENT_READ, connection)
        connections.append(connection)
    deadline = time.monotonic() + give_up_after
    next_byte = time.monotonic()
    while time.monotonic() < deadline and any(c["closed_after"] is None for c in connections):
        for key, _ in selector.select(timeout=0.05):
            connection = key.data
            try:
                chunk = connection["socket"].recv(65536)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                chunk = b""
            if chunk:
                connection["received"] += chunk
            else:
                connection["closed_after"] = time.monotonic() - connection["opened"]
                selector.unregister(connection["socket"])
        if time.monotonic() >= next_byte:
            next_byte += interval
            for connection in connections:
                if connection["closed_after"] is None and connection["trickle"]:
                    try:
                        connection["socket"].send(connection["trickle"][:1])
                        connection["trickle"] = connection["trickle"][1:]
                    except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                        pass
    for connection in connections:
        connection["socket"].close()
    return connections


def time_ordinary_requests(url, stop, latencies):
    with httpx.Client(timeout=60) as client:
        while not stop.is_set():
            started = time.monotonic()
            try:
                status = client.get(url + "/healthz").status_code
            except httpx.HTTPError as error:
                status = type(error).__name__
            latencies.append((status, time.monotonic() - started))
            stop.wait(1.0)


def report_connections(connections):
    for kind in ("silent", "slow headers", "slow body"):
        mine = [c for c in connections if c["kind"] == kind]
        closed = [c["closed_after"] for c in mine if c["closed_after"] is not None]
        answers = sorted(
            {c["received"].split(b"\r\n", 1)[0].decode("latin-1") or "(nothing)" for c in mine}
        )
        timing = (
            f"median {statistics.median(closed):.2f} s, slowest {max(closed):.2f} s"
            if closed
            else "-"
        )
        print(
            f"  {kind:13s} {len(closed)}/{len(mine)} closed by the server ({timing}); got: "
            f"{', '.join(answers)}"
        )


def shutdown_with_slow_clients(process, port):
    body = json.dumps({"instances": ["the cat sat on the mat"]}).encode()
    in_flight = socket.create_connection(("127.0.0.1", port), timeout=30)
    in_flight.sendall(predict_head(len(body)) + body[:-5])
    slow_upload = socket.create_connection(("127.0.0.1", port), timeout=30)
    slow_upload.sendall(predict_head(1000) + b"{")
    silent = socket.create_connection(("127.0.0.1", port), timeout=30)
    time.sleep(0.5)
    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    in_flight.sendall(body[-5:])
    answer = in_flight.recv(65536).split(b"\r\n", 1)[0].decode("latin-1")
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        return answer, None, None
    exited = time.monotonic() - signalled
    for sock in (in_flight, slow_upload, silent):
        sock.close()
    return answer, exited, process.returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--classifier", required=True, help="a classifier export's base folder")
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument(
        "--interval", type=float, default=0.5, help="seconds between a slow client's bytes"
    )
    parser.add_argument("--give-up-after", type=float, default=60.0)
    parser.add_argument("--server-args", default="", help="extra apps.serve flags, space-separated")
    parser.add_argument("--log", default="/tmp/serve_connections.log")
    args = parser.parse_args()

    process, port, url = start_server(args.classifier, args.server_args.split(), args.log)
    try:
        print(
            f"{args.connections} slow or silent connections, one byte every {args.interval:g} s "
            f"(server flags: {args.server_args or 'defaults'}):"
        )
        stop, latencies = threading.Event(), []
        timer = threading.Thread(
            target=time_ordinary_requests, args=(url, stop, latencies), daemon=True
        )
        timer.start()
        connections = slow_connections(port, args.connections, args.interval, args.give_up_after)
        stop.set()
        timer.join(timeout=70)
        report_connections(connections)
        statuses = sorted({str(status) for status, _ in latencies})
        print(
            f"  ordinary GET /healthz meanwhile: {len(latencies)} requests, statuses {statuses}, "
            f"slowest {max(seconds for _, seconds in latencies):.3f} s"
        )
        answer, exited, status = shutdown_with_slow_clients(process, port)
        ending = (
            "still running 60 s later"
            if exited is None
            else f"exited after {exited:.2f} s (status {status})"
        )
        print(
            f"SIGTERM with a slow upload and a silent connection open: {ending}; "
            f"the request completed after the signal got {answer!r}"
        )
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


if __name__ == "__main__":
    main()
