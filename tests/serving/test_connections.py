"""Connections of a real `apps.serve` process, driven over raw sockets on
127.0.0.1: slow and silent clients are closed on their deadlines while others
are served, connections past the cap are refused without harm, and a probe of
malformed and hostile requests leaves a healthy server and a clean log (no
traceback, no forged line)."""

import json
import re
import selectors
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.serving.serving_helpers import (
    CLASS_NAMES,
    REPO_ROOT,
    ServerProcess,
    join_threads,
    start_threads,
)

HEADER_TIMEOUT = 3.0
BODY_TIMEOUT = 3.0
IDLE_TIMEOUT = 1.0
MAX_CONNECTIONS = 40
# A deadline is a timer on the server's event loop: never early, but late by
# as much as a busy two-core machine stalls it.
LATE = 1.5

PREDICT = "/v1/models/classifier:predict"
LOG_TIMESTAMP = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) "
)


@pytest.fixture(scope="module")
def server(exports, tmp_path_factory):
    root = tmp_path_factory.mktemp("connections")
    process = ServerProcess(
        {"classifier": exports.classifier},
        root / "server.log",
        [
            "--header-timeout",
            str(HEADER_TIMEOUT),
            "--body-timeout",
            str(BODY_TIMEOUT),
            "--idle-timeout",
            str(IDLE_TIMEOUT),
            "--max-connections",
            str(MAX_CONNECTIONS),
            "--poll-seconds",
            "0",
        ],
    )
    yield process
    process.stop()


def connect(server):
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def request_head(method, path, extra_headers=b""):
    return (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode("ascii") + extra_headers + b"\r\n"
    )


def predict_request(body, keep_alive=True):
    headers = b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    if not keep_alive:
        headers += b"Connection: close\r\n"
    return request_head("POST", PREDICT, headers) + body


def read_response(sock, timeout=10.0):
    """One response (status, headers, body bytes), read by its Content-Length."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a whole response head: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "closed in the middle of a response body"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def seconds_until_closed(sock, timeout):
    """Seconds until the server closes `sock` (its bytes until then are dropped), or None."""
    started = time.monotonic()
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - started


class Trickler:
    """Raw connections that each send their bytes slowly (one every `interval`
    seconds), watched together until the server closes them; records when each
    closed and what it received."""

    def __init__(self, server, interval=0.2):
        self.server, self.interval = server, interval
        self.selector = selectors.DefaultSelector()
        self.connections = []

    def open(self, kind, first=b"", trickle=b""):
        """A connection that sends `first` at once, then `trickle` byte by byte."""
        sock = connect(self.server)
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
        self.connections.append(connection)
        self.selector.register(sock, selectors.EVENT_READ, connection)
        return connection

    def run(self, timeout, between=None):
        """Trickles until every connection is closed or `timeout` passes; calls `between()` once,
        early.
        """
        deadline = time.monotonic() + timeout
        next_byte = time.monotonic()
        while time.monotonic() < deadline and any(
            c["closed_after"] is None for c in self.connections
        ):
            if between is not None:
                between()
                between = None
            for key, _ in self.selector.select(timeout=0.05):
                self._read(key.data)
            if time.monotonic() >= next_byte:
                next_byte += self.interval
                for connection in self.connections:
                    if connection["closed_after"] is None and connection["trickle"]:
                        try:
                            connection["socket"].send(connection["trickle"][:1])
                            connection["trickle"] = connection["trickle"][1:]
                        except (BrokenPipeError, ConnectionResetError):
                            pass  # closed: its read says so
        for connection in self.connections:
            if connection["closed_after"] is None:
                self.selector.unregister(connection["socket"])
            connection["socket"].close()
        return self.connections

    def _read(self, connection):
        try:
            chunk = connection["socket"].recv(65536)
        except BlockingIOError:
            return
        except ConnectionResetError:
            chunk = b""
        if chunk:
            connection["received"] += chunk
        elif connection["closed_after"] is None:
            connection["closed_after"] = time.monotonic() - connection["opened"]
            self.selector.unregister(connection["socket"])


def test_slow_and_silent_connections_are_closed_on_their_deadlines_while_others_are_served(server):
    trickler = Trickler(server)
    for _ in range(10):
        trickler.open("silent")
        # Headers that never end, one byte at a time (slowloris).
        trickler.open("slow headers", b"GET /healthz HTTP/1.1\r\n", b"X-Slow: " + b"a" * 200)
        # Complete headers, then a body slower than its deadline allows.
        trickler.open(
            "slow body",
            predict_request(b'{"instances": ["the cat"]}' + b" " * 200)[:-200],
            b" " * 200,
        )
    served = []

    def an_ordinary_request():
        started = time.monotonic()
        response = httpx.get(server.url + "/healthz", timeout=10)
        served.append((response.status_code, time.monotonic() - started))

    connections = trickler.run(
        timeout=HEADER_TIMEOUT + BODY_TIMEOUT + LATE, between=an_ordinary_request
    )
    assert served[0][0] == 200 and served[0][1] < 1.0, served
    for connection in connections:
        kind, closed_after = connection["kind"], connection["closed_after"]
        deadline = {
            "silent": IDLE_TIMEOUT,
            "slow headers": HEADER_TIMEOUT,
            "slow body": BODY_TIMEOUT,
        }[kind]
        assert closed_after is not None, f"a {kind} connection was still open"
        assert deadline - 0.05 <= closed_after <= deadline + LATE, (kind, closed_after)
        if kind == "slow body":
            status_line, _, body = connection["received"].partition(b"\r\n")
            assert status_line == b"HTTP/1.1 408 Request Timeout", connection["received"]
            message = json.loads(body.partition(b"\r\n\r\n")[2])["error"]
            assert f"did not arrive within {BODY_TIMEOUT:g} s" in message
        else:
            assert connection["received"] == b"", (kind, connection["received"])
    log = server.log()
    assert log.count(f"POST {PREDICT} model=classifier version=1 instances=- status=408 ") >= 10


def test_a_kept_alive_connection_is_closed_after_the_idle_timeout(server):
    body = json.dumps({"instances": ["the cat"]}).encode()
    with connect(server) as sock:
        for _ in range(3):  # reused within the idle timeout: still open
            sock.sendall(predict_request(body))
            status, _, answer = read_response(sock)
            assert status == 200 and json.loads(answer)["predictions"][0]["label"] in CLASS_NAMES
            time.sleep(IDLE_TIMEOUT / 3)
        closed_after = seconds_until_closed(sock, IDLE_TIMEOUT + LATE + 1)
    assert (
        closed_after is not None
        and IDLE_TIMEOUT - IDLE_TIMEOUT / 3 - 0.05 <= closed_after <= IDLE_TIMEOUT + LATE
    )


def test_the_next_requests_headers_are_due_a_header_timeout_after_the_previous_response(server):
    first_byte_after = 0.8  # within the idle timeout
    with connect(server) as sock:
        sock.sendall(request_head("GET", "/healthz"))
        assert read_response(sock)[0] == 200
        answered = time.monotonic()
        time.sleep(first_byte_after)
        sock.settimeout(0.25)
        closed = None
        for byte in b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 100:
            try:
                sock.send(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                pass
            try:
                if sock.recv(1) == b"":
                    closed = time.monotonic() - answered
                    break
            except TimeoutError:
                pass
            except ConnectionResetError:
                closed = time.monotonic() - answered
                break
            if time.monotonic() - answered > HEADER_TIMEOUT + first_byte_after + LATE:
                break
    # Counted from the answer, not from the first byte: so closed sooner than
    # the header timeout after that byte.
    assert (
        closed is not None and HEADER_TIMEOUT - 0.05 <= closed < HEADER_TIMEOUT + first_byte_after
    ), closed


def test_connections_past_the_cap_are_refused_at_once_and_the_others_still_served(server):
    held = [connect(server) for _ in range(MAX_CONNECTIONS)]
    try:
        for sock in held:
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")  # headers still to come
        time.sleep(0.3)  # the server has taken them all in
        started = time.monotonic()
        with connect(server) as extra:
            status, headers, body = read_response(extra, timeout=5)
            assert status == 503 and headers["connection"] == "close"
            assert "40 connections open" in json.loads(body)["error"]
            assert seconds_until_closed(extra, 5) is not None
        assert time.monotonic() - started < 1.0
        held[0].sendall(b"Host: 127.0.0.1\r\n\r\n")
        assert read_response(held[0])[0] == 200
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)  # the server has seen them close
    assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200
    assert "Connection refused: 40 open, the --max-connections limit" in server.log()


def test_errors_quote_only_a_short_prefix_of_what_the_client_sent(server):
    long_name = "n" * 5000
    with httpx.Client(base_url=server.url, timeout=10) as client:
        answers = [
            client.get("/" + long_name),
            client.put("/healthz/" + long_name),
            client.post(PREDICT, json={long_name: 1, "instances": ["a"]}),
            client.post(PREDICT, json={"instances": [{long_name: "a"}]}),
            client.post(PREDICT, json={"inputs": {long_name: ["a"]}}),
        ]
    for answer in answers:
        assert 400 <= answer.status_code < 500
        message = answer.json()["error"]
        assert "n" * 90 in message and "n" * 101 not in message, (answer.status_code, message[:300])
        assert len(message) < 400


# The abuse probe: each entry is what one raw connection sends, then whether the
# client waits for an answer or hangs up at once. Bounded: about 60 connections.
PROBES = [
    (b"GARBAGE\r\n\r\n", "read"),
    (b"GET\r\n\r\n", "read"),
    (b"GET / HTTP/9.9\r\n\r\n", "read"),
    (b"GET /healthz HTTP/1.1\r\nHost 127.0.0.1\r\n\r\n", "read"),
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\nBad\x00Header: x\r\n\r\n", "read"),
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Big: " + b"x" * 70000 + b"\r\n\r\n", "read"),
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: -5\r\n\r\n", "read"),
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "read"),
    (
        b"GET /healthz HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
        "read",
    ),
    (b"GET /" + b"p" * 10000 + b" HTTP/1.1\r\nHost: a\r\n\r\n", "read"),
    (b"GET /x%0aFORGED%20INFO%20line%0d%0a HTTP/1.1\r\nHost: a\r\n\r\n", "read"),
    (b"GET /x%0d%1b[31mFORGED%e2%80%a8FORGED%c2%85FORGED%00 HTTP/1.1\r\nHost: a\r\n\r\n", "read"),
    (b"GET /v1/models/FORGED%0aname/metadata HTTP/1.1\r\nHost: a\r\n\r\n", "read"),
    (b"GET /x\nFORGED HTTP/1.1\r\nHost: a\r\n\r\n", "read"),
    (b"GET /x\rFORGED HTTP/1.1\r\nHost: a\r\n\r\n", "read"),
    (b"GET /\xff\xfe HTTP/1.1\r\nHost: a\r\n\r\n", "read"),
    (b"GET /%ff%fe HTTP/1.1\r\nHost: a\r\n\r\n", "read"),
    (b"BREW /healthz HTTP/1.1\r\nHost: a\r\n\r\n", "read"),
    (b"DELETE " + PREDICT.encode() + b" HTTP/1.1\r\nHost: a\r\n\r\n", "read"),
    (b"GET " + PREDICT.encode() + b" HTTP/1.1\r\nHost: a\r\n\r\n", "read"),
    (predict_request(b"{not json"), "read"),
    (predict_request(b'{"instances": "the cat"}'), "read"),
    (predict_request(b'{"instances": [' + b"[" * 5000 + b"]" * 5000 + b"]}"), "read"),
    (predict_request(b"\xff\xfe{}"), "read"),
    (predict_request(b'{"instances": ["a"]}')[:-5], "hang up"),  # an aborted upload
    (request_head("POST", PREDICT, b"Content-Length: 100000\r\n") + b'{"inst', "hang up"),
    (
        request_head("POST", PREDICT, b"Transfer-Encoding: chunked\r\n") + b'5\r\n{"ins\r\nZZ\r\n',
        "read",
    ),
    # A body that breaks the chunked framing after the answer has gone out.
    (
        request_head("GET", "/healthz", b"Transfer-Encoding: chunked\r\n") + b"3\r\nabc\r\n",
        "then garbage",
    ),
    (b"GET /healthz HTTP/1.1\r\nHost: a\r\n", "hang up"),  # a half-sent header
    (b"", "hang up"),  # a connection opened and dropped
]


def send_probe(server, data, how):
    with connect(server) as sock:
        if data:
            try:
                sock.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                return  # the server already refused it
        if how == "hang up":
            # RST
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            return
        if how == "then garbage":
            time.sleep(0.2)  # the answer has been sent
            try:
                sock.sendall(b"XYZ\r\nnot a chunk\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
        seconds_until_closed(sock, HEADER_TIMEOUT + BODY_TIMEOUT + LATE)


def test_an_abuse_probe_leaves_the_server_healthy_and_its_log_clean(server):
    logged_before = len(server.log())
    for _ in range(2):  # all at once, then again
        probes = start_threads(
            [lambda probe=probe: send_probe(server, *probe) for probe in PROBES], "probe"
        )
        join_threads(probes, timeout=HEADER_TIMEOUT + BODY_TIMEOUT + LATE + 10)
    time.sleep(0.5)  # the server has handled the last hang-ups
    response = httpx.post(server.url + PREDICT, json={"instances": ["the cat"]}, timeout=10)
    assert response.status_code == 200 and response.json()["predictions"][0]["label"] in CLASS_NAMES
    assert httpx.get(server.url + "/healthz", timeout=10).status_code == 200
    log = server.log()
    assert "Traceback" not in log
    assert "Exception" not in log
    # uvicorn's advice to install a WebSocket library: none is wanted here
    assert "WebSocket" not in log
    # splitlines() breaks at every line boundary a log reader might honour
    # ("\r", "\x85", "\u2028", ...), not only at "\n".
    for line in log[logged_before:].splitlines():
        assert LOG_TIMESTAMP.match(line), f"a log line without the log's own prefix: {line[:200]!r}"
        assert len(line) < 600, f"an overlong log line: {line[:200]!r}..."
    assert "/x\\nFORGED INFO line\\r\\n model=" in log
    assert "\\x1b[31mFORGED\\u2028FORGED\\x85FORGED\\x00 model=" in log
    # An aborted upload is one line, with no traceback: two per probe round.
    assert log.count(f"POST {PREDICT} model=classifier version=1 instances=- status=499 ") == 4


def test_the_open_file_limit_is_raised_to_fit_the_connection_cap():
    # In a child process: 300 open files allowed, up to 1300, then up to 600 only.
    script = (
        "import logging, resource, sys\n"
        "logging.basicConfig(level='INFO', format='%(levelname)s %(message)s', stream=sys.stdout)\n"
        "from keras_transformer.serving.http_server import _raise_open_file_limit\n"
        "for hard in (1300, 600):\n"
        "    resource.setrlimit(resource.RLIMIT_NOFILE, (300, hard))\n"
        "    _raise_open_file_limit(1000)\n"
        "    print('soft', resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(("soft", "WARNING"))]
    assert lines == [
        "soft 1256",
        "WARNING The open-file limit is 600, below what 1000 connections need; "
        "raise it (ulimit -n) or lower --max-connections.",
        "soft 600",
    ]
