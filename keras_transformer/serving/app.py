"""The HTTP side: TensorFlow Serving's REST API over a `ModelRepository`, on Starlette.

Routes (as TensorFlow Serving's, https://www.tensorflow.org/tfx/serving/api_rest):

* `GET  /v1/models/NAME[/versions/V|/labels/LABEL]`: version status.
* `GET  /v1/models/NAME[/versions/V|/labels/LABEL]/metadata`: signature definitions, and
  the export's assets.extra files (`assets_extra`).
* `POST /v1/models/NAME[/versions/V|/labels/LABEL]:predict`: row or columnar predict.
* `POST /v1/models/NAME[/versions/V|/labels/LABEL]:classify` and `:regress`: tf.Examples as
  JSON (see `classify.py`).
* `GET  /healthz`: 200 once every model has a version loaded, else 503.
* `GET  /monitoring/prometheus/metrics`: Prometheus metrics (see `metrics.py`).
* With `ServerSettings.explorer`: `GET /`, the attention explorer page, its
  assets and its model list (see `explorer/`).

Errors are `{"error": "..."}` with TensorFlow Serving's status codes: 400
for a bad request (an unknown version label included), 404 for an unknown
model or a version not serving, 503 for a full queue, 504 past the request's
deadline, plus 413 for a body, a batch or an answer over the configured
limits and 405 for a wrong method.
"""

import asyncio
import contextlib
import functools
import logging
import re
import time
from concurrent.futures import ThreadPoolExecutor

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from keras_transformer.serving.classify import (
    classification_json,
    example_count,
    example_request_from_json,
    regression_json,
)
from keras_transformer.serving.http_server import SERVER_ANSWER
from keras_transformer.serving.metrics import RequestMetrics
from keras_transformer.serving.protocol import (
    RequestError,
    ResponseTooLarge,
    encode_predict_response,
    parse_body,
    parse_predict_request,
    shorten,
)
from keras_transformer.serving.service import DEFAULT_SIGNATURE, PredictionService

logger = logging.getLogger("keras_transformer.serving")

# Bodies and answers up to about these sizes are parsed or encoded on the
# event loop, where that takes well under a millisecond; a hop to a JSON
# thread would cost more than it saves.
_INLINE_BODY_BYTES = 16 << 10
_INLINE_RESPONSE_ELEMENTS = 2048

_MODEL_PATH = re.compile(
    r"^(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
    r"(?:(?P<metadata>/metadata)|:(?P<verb>[^/:]*))?$"
)


def create_app(repository, settings=None):
    """A Starlette app serving `repository`; it loads every model when it starts."""
    return ServingApp(repository, settings).app


class ServingApp:
    """The REST API's handlers over one `PredictionService`, and the Starlette app that routes
    to them (`app`). Its start loads the models and starts the gRPC API if one is configured;
    its stop ends both.

    The app keeps `repository`, `settings`, `service` and `stop_accepting` on `app.state`:
    `http_server.GracefulServer` calls `stop_accepting` at a stop signal.
    """

    def __init__(self, repository, settings=None):
        self.repository = repository
        self.service = PredictionService(repository, settings)
        self.settings = self.service.settings
        self.json_executor = ThreadPoolExecutor(
            max_workers=self.settings.json_threads, thread_name_prefix="json"
        )
        self.grpc_server = None  # while the gRPC API runs
        self.grpc_stop = None  # the gRPC server's stop, once begun
        self.app = self._build_app()

    def _build_app(self):
        routes = [
            Route("/healthz", self.healthz, methods=["GET"]),
            Route("/monitoring/prometheus/metrics", self.service.metrics.endpoint, methods=["GET"]),
            Route(
                "/v1/models/{rest:path}",
                self.models_route,
                methods=["GET", "POST", "PUT", "DELETE", "PATCH"],
            ),
        ]
        if self.settings.explorer:
            from keras_transformer.serving.explorer import explorer_routes

            routes += explorer_routes(self.service)
        app = Starlette(
            routes=routes,
            exception_handlers={
                RequestError: _request_error,
                404: _not_found,
                405: _method_not_allowed,
            },
            lifespan=self.lifespan,
        )
        app.add_middleware(RequestLog)
        app.add_middleware(RequestMetrics, metrics=self.service.metrics)
        app.state.repository = self.repository
        app.state.settings = self.settings
        app.state.service = self.service
        app.state.stop_accepting = self.stop_accepting
        return app

    # Start and stop.

    @contextlib.asynccontextmanager
    async def lifespan(self, app):
        settings = self.settings
        if settings.grpc_port:
            from keras_transformer.serving import grpc_api

            # Bound before the models load, so a taken port fails the start at once.
            self.grpc_server = grpc_api.bind_grpc_server(
                self.service, settings.grpc_host, settings.grpc_port
            )
        try:
            await self.service.start()
            if self.grpc_server is not None:
                await self.grpc_server.start()
                logger.info("gRPC API listening on %s:%d", settings.grpc_host, settings.grpc_port)
            yield
        finally:
            if self.grpc_server is not None:
                self.stop_accepting(grpc_api.SHUTDOWN_GRACE_SECONDS)
                await self.grpc_stop
            self.service.stop()
            self.json_executor.shutdown(wait=False, cancel_futures=True)

    def stop_accepting(self, grace):
        """Ends the gRPC API's new calls at a stop signal, as the HTTP server ends its new
        connections; its calls in flight get `grace` seconds."""
        if self.grpc_server is not None and self.grpc_stop is None:
            self.grpc_stop = asyncio.ensure_future(self.grpc_server.stop(grace))

    # Route handlers.

    async def healthz(self, request):
        models = {
            name: (model.current.version if model.current else None)
            for name, model in self.repository.models.items()
        }
        return JSONResponse(
            {"ready": self.repository.ready(), "models": models},
            status_code=200 if self.repository.ready() else 503,
        )

    async def models_route(self, request):
        """`/v1/models/...`: the path names a model, maybe a version or label, then a
        verb (`:predict`), `/metadata`, or nothing (status)."""
        match = _MODEL_PATH.match(request.path_params["rest"])
        if match is None:
            raise RequestError(404, f"No such route: {request.url.path}")
        name, version = match["name"], _version_number(match["version"])
        request.state.model = name
        model = self.service.model(name)
        if match["label"] is not None:
            version = self.service.label_version(model, match["label"])
        request.state.version = version
        if match["verb"] is not None:
            verb = match["verb"]
            if verb not in ("predict", "classify", "regress"):
                raise RequestError(
                    400,
                    f"':{verb}' is not served here; only ':predict', ':classify' and "
                    "':regress' are.",
                )
            if request.method != "POST":
                raise RequestError(405, f"':{verb}' takes POST, not {request.method}.")
            if verb == "predict":
                return await self.predict(request, name, version)
            return await self.classify_or_regress(request, name, version, verb)
        if request.method != "GET":
            raise RequestError(405, f"{request.url.path} takes GET, not {request.method}.")
        if match["metadata"]:
            return self.metadata(name, version)
        return self.status(name, version)

    async def _json_request(self, request, name, version):
        """What a POST to a model runs on: `(served version, parsed JSON body, the executor for
        its JSON (None: on the event loop), when its deadline started)`."""
        served = self.service.servable(name, version)
        request.state.version = served.version
        raw_body = await _read_body(request, self.settings.max_body_bytes)
        # The deadline counts from here: reading the body has its own limits.
        started = time.monotonic()
        json_executor = self.json_executor if len(raw_body) > _INLINE_BODY_BYTES else None
        return served, await _call(json_executor, parse_body, raw_body), json_executor, started

    def _time_left(self, started):
        """Seconds left of the request timeout since `started` (None: no timeout)."""
        timeout = self.settings.request_timeout
        return None if timeout is None else timeout - (time.monotonic() - started)

    async def predict(self, request, name, version):
        service, settings = self.service, self.settings
        served, body, json_executor, started = await self._json_request(request, name, version)
        signature_name = body.pop("signature_name", DEFAULT_SIGNATURE)
        input_specs = service.signature_inputs(served, signature_name)
        request.state.signature = signature_name
        request_format, inputs, batch_size = await _call(
            json_executor,
            parse_predict_request,
            body,
            input_specs,
            settings.instance_limit(signature_name),
            service.optional_inputs(served, signature_name),
        )
        del body  # the inputs hold what the model needs
        request.state.instances = batch_size
        outputs = await _unless_disconnected(
            request.receive,
            service.predict(
                served, signature_name, inputs, batch_size, timeout=self._time_left(started)
            ),
        )
        elements = sum(value.size for value in outputs.values())
        try:
            encoded = await _call(
                self.json_executor if elements > _INLINE_RESPONSE_ELEMENTS else None,
                encode_predict_response,
                request_format,
                outputs,
                settings.max_response_bytes,
            )
        except ResponseTooLarge as error:
            raise _response_too_large(error) from None
        return Response(encoded, media_type="application/json")

    async def classify_or_regress(self, request, name, version, verb):
        """`:classify` or `:regress`: TensorFlow Serving's JSON of tf.Examples in, its
        `{"results": ...}` out (`keras_transformer.serving.classify`)."""
        service, settings = self.service, self.settings
        served, body, json_executor, started = await self._json_request(request, name, version)
        signature_name, request_input = await _call(
            json_executor, example_request_from_json, body, settings.max_instances
        )
        del body
        request.state.signature = signature_name or DEFAULT_SIGNATURE
        request.state.instances = example_count(request_input)
        run, encode = (
            (service.classify, classification_json)
            if verb == "classify"
            else (service.regress, regression_json)
        )
        result = await _unless_disconnected(
            request.receive,
            run(served, signature_name, request_input, timeout=self._time_left(started)),
        )
        encoded = await _call(json_executor, encode, result)
        if len(encoded) > settings.max_response_bytes:
            raise _response_too_large(
                ResponseTooLarge(settings.max_response_bytes, len(encoded), len(encoded))
            )
        return Response(encoded, media_type="application/json")

    def status(self, name, version):
        return JSONResponse(
            {
                "model_version_status": [
                    {
                        "version": str(number),
                        "state": state,
                        "status": {
                            "error_code": "UNKNOWN" if message else "OK",
                            "error_message": message,
                        },
                    }
                    for number, state, message in self.service.version_states(name, version)
                ]
            }
        )

    def metadata(self, name, version):
        served = self.service.servable(name, version)
        signature_defs = {
            signature: {
                "inputs": {
                    spec.name: _tensor_info(spec) for spec in served.inputs[signature].values()
                },
                "outputs": {
                    spec.name: _tensor_info(spec) for spec in served.outputs[signature].values()
                },
                "method_name": served.method_name(signature),
            }
            for signature in sorted(served.signatures)
        }
        return JSONResponse(
            {
                "model_spec": {"name": name, "signature_name": "", "version": str(served.version)},
                "metadata": {
                    "signature_def": {"signature_def": signature_defs},
                    # Ours, beside TensorFlow Serving's: assets.extra's *.json and *.txt files.
                    "assets_extra": served.assets_extra,
                },
            }
        )


def _response_too_large(error):
    """The 413 for a `ResponseTooLarge` from encoding an answer."""
    size = "at least" if error.estimate == error.lower_bound else "about"
    return RequestError(
        413,
        f"The answer would be {size} {error.estimate} bytes of JSON, over the limit of "
        f"{error.limit} bytes (--max-response-bytes); ask for fewer examples at a time.",
    )


async def _request_error(request, error):
    # A message may quote the client's strings, and JSON can carry lone
    # surrogates ("\ud800") that the UTF-8 response cannot: escape them.
    message = error.message.encode("utf-8", "backslashreplace").decode("utf-8")
    return JSONResponse({"error": message}, status_code=error.status)


async def _not_found(request, error):
    return JSONResponse({"error": f"No such route: {shorten(request.url.path)}"}, status_code=404)


async def _method_not_allowed(request, error):
    message = f"{shorten(request.url.path)} does not take {shorten(request.method)}."
    return JSONResponse({"error": message}, status_code=405)


class RequestLog:
    """One log line per request: method, path, model, version, examples, status, latency.

    What the client chose (method, path, model name) is escaped and shortened:
    a newline in a path must not forge a log line, nor 16 KiB of it flood one.
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = [500]

        async def record_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            state = scope.get("state", {})
            logger.info(
                "%s %s model=%s version=%s instances=%s status=%d latency_ms=%.1f",
                loggable(scope["method"]),
                loggable(scope["path"]),
                loggable(state.get("model", "-")),
                state.get("version") or "-",
                state.get("instances", "-"),
                scope.get(SERVER_ANSWER, status[0]),
                (time.perf_counter() - started) * 1000,
            )


def loggable(text, limit=200):
    """`text` for a log line: characters that are not printable (line breaks,
    ANSI escapes) and backslashes escaped, cut after `limit` characters."""
    text = str(text)
    shown = "".join(
        character
        if character.isprintable() and character != "\\"
        else character.encode("unicode_escape").decode("ascii")
        for character in text[:limit]
    )
    return shown + "..." if len(text) > limit else shown


async def _read_body(request, limit):
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit():
        digits = declared.lstrip("0")
        # Compared by length first: int() refuses more digits than Python's conversion limit.
        if len(digits) > len(str(limit)):
            raise RequestError(
                413,
                f"The body's declared length has {len(digits)} digits; the limit is {limit} bytes.",
            )
        if int(declared) > limit:
            raise RequestError(413, f"The body has {int(declared)} bytes; the limit is {limit}.")
    chunks, total = [], 0
    try:
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit:
                raise RequestError(413, f"The body is over the limit of {limit} bytes.")
            chunks.append(chunk)
    except ClientDisconnect:
        # The answer goes nowhere; the request log's line (status 499, as
        # nginx names a client that closed its request) is all that is left of it.
        raise RequestError(
            499, "The client closed the connection before sending its whole body."
        ) from None
    return b"".join(chunks)


async def _call(executor, function, *args):
    """`function(*args)` on a thread of `executor`, or right here if `executor` is None."""
    if executor is None:
        return function(*args)
    return await asyncio.get_running_loop().run_in_executor(
        executor, functools.partial(function, *args)
    )


async def _unless_disconnected(receive, awaitable):
    """Awaits `awaitable`, but cancels it and answers 499 if the client disconnects first.

    Called once the body has been read, when `receive()` has nothing left to
    give but the disconnect. Cancelling a prediction drops it from its queue
    unless its batch has started, so a client that gave up costs no model time.
    """
    work = asyncio.ensure_future(awaitable)
    watch = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait((work, watch), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # this handler cancelled (shutdown): so is what it waited for
        work.cancel()
        watch.cancel()
        raise
    watch.cancel()
    if work.done():
        return work.result()
    work.cancel()
    # Nobody reads this answer; 499 (nginx's "client closed request") is for the log.
    raise RequestError(499, "The client closed the connection before the answer was ready.")


async def _disconnected(receive):
    while (await receive())["type"] != "http.disconnect":
        pass


def _version_number(text):
    if text is None:
        return None
    # ASCII digits only: str.isdigit alone accepts "²", which int() refuses, and "١", which int()
    # reads as 1.
    if not (text.isascii() and text.isdigit()) or not text.strip("0"):
        raise RequestError(400, f"A version is a positive integer, got {text[:50]!r}.")
    try:
        return int(text)
    except ValueError:  # past Python's int-string conversion limit, longer than any folder name
        raise RequestError(404, f"No version has {len(text)} digits.") from None


def _tensor_info(spec):
    dims = [{"size": str(-1 if size is None else size), "name": ""} for size in spec.shape]
    return {"dtype": spec.dtype, "tensor_shape": {"dim": dims, "unknown_rank": False}}
