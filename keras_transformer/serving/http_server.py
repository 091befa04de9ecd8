"""uvicorn with the connection limits a long-running server needs and uvicorn 0.54 lacks.

uvicorn closes a kept-alive connection that stays idle, but it waits forever
for a request's headers or body, accepts every connection it is offered, and
on SIGTERM waits without limit for a slow client. `GuardedH11Protocol`
(uvicorn's h11 protocol, the one it uses when httptools is absent, which is
the case here) adds:

* a deadline on request headers: `header_timeout` seconds from when the
  connection opened or its previous response ended (a connection that sends
  nothing at all is closed after `idle_timeout`, as a kept-alive one is);
* a deadline on the whole request body: `body_timeout` seconds from the end of
  its headers; past it the client gets a 408 if no response has started, else
  the connection is closed;
* a cap on open connections: one past `max_connections` is answered 503 and
  closed at once, without disturbing the others.

`GracefulServer` stops within `shutdown_grace` seconds of SIGTERM/SIGINT: it
stops accepting, closes idle connections and those still sending headers, lets
requests in flight finish until shortly before the grace ends, then closes
what is left and exits; a watchdog ends the process at the grace whatever
hangs.
"""

import asyncio
import dataclasses
import json
import logging
import os
import resource
import threading
import time

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger("keras_transformer.serving")

# The scope key under which the protocol records a status it answered itself
# (a 408 for a body past its deadline), so the request log shows what the
# client got rather than what the application tried to send afterwards.
SERVER_ANSWER = "keras_transformer.server_answer"

# How often a refused connection is logged at most, while the cap holds.
_REFUSAL_LOG_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class ConnectionSettings:
    """Connection limits of a server; times in seconds.

    Args:
        header_timeout: longest wait for a request's complete headers.
        body_timeout: longest read of one request's whole body.
        idle_timeout: longest wait for the first byte of a request.
        max_connections: most connections open at once.
        shutdown_grace: the longest a stop takes, from the signal to exit.
    """

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    idle_timeout: float = 5.0
    max_connections: int = 1000
    shutdown_grace: float = 10.0


class ServerConfig(uvicorn.Config):
    """uvicorn's Config holding the ConnectionSettings its protocols read."""

    def __init__(self, app, connections, **kwargs):
        super().__init__(app, **kwargs)
        self.connections = connections


def build_server(app, host, port, connections=None, log_level="info"):
    """A `GracefulServer` serving the ASGI `app` on host:port with `connections`' limits.

    Logging is left to the root logger (`logging.basicConfig` of the caller),
    so uvicorn's lines share the format of the server's own.
    """
    connections = connections or ConnectionSettings()
    _raise_open_file_limit(connections.max_connections)
    config = ServerConfig(
        app,
        connections,
        host=host,
        port=port,
        http=GuardedH11Protocol,
        ws="none",
        loop="asyncio",
        lifespan="on",
        log_config=None,
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=connections.idle_timeout,
    )
    return GracefulServer(config)


def run_server(server, sockets=None):
    """Runs `server` until a signal stops it; exits with uvicorn's status if it could not start.

    Args:
        server: a `GracefulServer`.
        sockets: None to listen on its config's host and port; `[]` to listen on none (the
            application alone runs: its start, its other listeners, its stop at a signal).
    """
    _freeze_imported_objects()
    try:
        server.run(sockets=sockets)
    except KeyboardInterrupt:  # the SIGINT uvicorn raises again once it has stopped
        pass
    if not server.started:
        raise SystemExit(uvicorn.config.STARTUP_FAILURE)


def _freeze_imported_objects():
    """Leaves what the imports made out of every later garbage collection.

    TensorFlow's and Keras' modules hold most of the process's objects, and none of them ever
    dies; but a full collection walks them all, about half a second in which no request
    thread runs. The server makes one each time it frees a replaced version (whose functions
    sit in reference cycles), which showed as a stall of every client's request just after
    a hot swap. Objects made later, the models' included, are collected as before.
    """
    import gc

    import tensorflow  # noqa: F401 (imported before the freeze, so its objects are frozen)

    gc.collect()
    gc.freeze()


def _raise_open_file_limit(max_connections):
    # Past the open-file limit, accept() fails and asyncio logs a traceback per
    # attempt; keep room for the model files and the listening socket besides.
    wanted = max_connections + 256
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        if raised < wanted:
            logger.warning(
                "The open-file limit is %d, below what %d connections need; "
                "raise it (ulimit -n) or lower --max-connections.",
                raised,
                max_connections,
            )


def _json_response(status, reason, message):
    body = json.dumps({"error": message}).encode("utf-8")
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode("ascii")),
        (b"connection", b"close"),
    ]
    return h11.Response(status_code=status, headers=headers, reason=reason), body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with header and body deadlines and a connection cap
    (`ServerConfig.connections`)."""

    def __init__(self, config, server_state, app_state, _loop=None):
        super().__init__(config, server_state, app_state, _loop)
        self.limits = config.connections
        self.refused = False
        self.reading = None  # "headers" or "body" while a deadline runs on what the client sends
        self.read_deadline = None

    def connection_made(self, transport):
        if len(self.connections) >= self.limits.max_connections:
            self.refuse(transport)
            return
        super().connection_made(transport)
        # A connection that never sends a byte is as idle as a kept-alive one.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )
        self.watch_reading()

    def refuse(self, transport):
        self.refused = True
        self.transport = transport
        response, body = _json_response(
            503,
            b"Service Unavailable",
            f"The server has {self.limits.max_connections} connections open, its limit; try again "
            "later.",
        )
        # Written without h11: no request has been read, and none will be.
        headers = b"".join(
            name + b": " + value + b"\r\n" for name, value in response.headers.raw_items()
        )
        transport.write(b"HTTP/1.1 503 Service Unavailable\r\n" + headers + b"\r\n" + body)
        transport.close()
        state = self.server_state
        state.connections_refused = getattr(state, "connections_refused", 0) + 1
        now = time.monotonic()
        if now >= getattr(state, "next_refusal_log", 0.0):
            state.next_refusal_log = now + _REFUSAL_LOG_SECONDS
            logger.warning(
                "Connection refused: %d open, the --max-connections limit (%d refused so far).",
                len(self.connections),
                state.connections_refused,
            )

    def connection_lost(self, exc):
        self.stop_read_deadline()
        if self.refused:
            return
        super().connection_lost(exc)

    def data_received(self, data):
        if self.refused:
            return
        super().data_received(data)

    def handle_events(self):
        # Also runs when a response completes and the connection awaits the next request.
        super().handle_events()
        self.watch_reading()

    def watch_reading(self):
        """Runs the deadline of what the client is sending now: the headers of its
        next request, or the body of the current one; none while it waits for us."""
        if self.transport.is_closing():
            reading = None
        elif self.conn.their_state is h11.IDLE:
            reading = "headers"
        elif self.conn.their_state is h11.SEND_BODY:
            reading = "body"
        else:
            reading = None
        if reading == self.reading:
            return
        self.stop_read_deadline()
        self.reading = reading
        if reading is not None:
            timeout = (
                self.limits.header_timeout if reading == "headers" else self.limits.body_timeout
            )
            self.read_deadline = self.loop.call_later(timeout, self.read_timed_out)

    def stop_read_deadline(self):
        if self.read_deadline is not None:
            self.read_deadline.cancel()
            self.read_deadline = None
        self.reading = None

    def read_timed_out(self):
        self.read_deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if self.reading == "body" and cycle is not None and not cycle.response_started:
            response, body = _json_response(
                408,
                b"Request Timeout",
                f"The request body did not arrive within {self.limits.body_timeout:g} s.",
            )
            for event in (response, h11.Data(data=body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            cycle.scope[SERVER_ANSWER] = 408
            # The application, still waiting for the body, sees a disconnect;
            # whatever it answers then goes nowhere.
            cycle.disconnected = True
            cycle.message_event.set()
        self.stop_read_deadline()
        self.transport.close()

    def send_400_response(self, msg):
        # h11 refuses a second response: when the client breaks the protocol
        # (a malformed chunk, say) after ours has started, only closing is left.
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if cycle.response_started:
                cycle.disconnected = True
                cycle.message_event.set()
                self.transport.close()
                return
            cycle.scope[SERVER_ANSWER] = 400
            cycle.disconnected = True  # the 400 below is the answer; the application's goes nowhere
            cycle.message_event.set()
        if self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            self.transport.close()
            return
        super().send_400_response(msg)

    def _unsupported_upgrade_warning(self):
        # uvicorn's warning advises installing a WebSocket library; this server has no WebSocket
        # routes.
        logger.debug("An upgrade request was answered as plain HTTP.")

    def shutdown(self):
        if self.refused:
            return
        try:
            super().shutdown()
        except h11.LocalProtocolError:  # h11 state that allows no clean close: close anyway
            self.transport.close()


class GracefulServer(uvicorn.Server):
    """uvicorn's Server, stopping within `ServerConfig.connections.shutdown_grace` seconds of a
    signal."""

    def __init__(self, config):
        super().__init__(config)
        self.grace = config.connections.shutdown_grace
        self.stop_deadline = None

    def handle_exit(self, sig, frame):
        if self.stop_deadline is None:
            self.stop_deadline = time.monotonic() + self.grace
            watchdog = threading.Timer(self.grace, self._exit_now)
            watchdog.daemon = True
            watchdog.start()
        super().handle_exit(sig, frame)

    def _exit_now(self):
        logger.error(
            "Still running %g s after the stop signal (--shutdown-grace): exiting now.", self.grace
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(1)

    async def shutdown(self, sockets=None):
        deadline = self.stop_deadline or time.monotonic() + self.grace
        # Time kept after the drain for closing what is left and the application's own shutdown.
        drain_until = deadline - min(1.0, self.grace / 4)
        logger.info("Shutting down: finishing the requests in flight (at most %g s).", self.grace)
        # The application's other listeners (the gRPC API) stop taking calls now too.
        stop_accepting = getattr(getattr(self.config.app, "state", None), "stop_accepting", None)
        if stop_accepting is not None:
            stop_accepting(max(0.0, drain_until - time.monotonic()))
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        state = self.server_state
        for connection in list(state.connections):
            connection.shutdown()
        while (
            (state.connections or state.tasks)
            and not self.force_exit
            and time.monotonic() < drain_until
        ):
            await asyncio.sleep(0.05)
        if state.connections:
            logger.warning(
                "Closing %d connection(s) still open at the end of the grace period.",
                len(state.connections),
            )
            for connection in list(state.connections):
                connection.transport.close()
            # A request still reading its body now sees the disconnect and ends.
            await asyncio.sleep(0.05)
        # Requests still computing are left to end with the process, not
        # cancelled: a cancelled request logs a traceback and helps no one.
        if not self.force_exit:
            await self.lifespan.shutdown()
