"""Prometheus metrics of a server, scraped at `GET /monitoring/prometheus/metrics`
(TensorFlow Serving's path).

Every series is labelled only by what the server itself knows: a model
name, version or signature a client sent that did not resolve to a served
one is labelled "-", so clients cannot create series at will. Request paths
are not labels. What is state rather than events (queued examples, versions
and their states, load failures) is read when scraped.

Each `ServingMetrics` has its own registry: one process may hold many apps
(the tests do), and the global registry would mix them.
"""

import time

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from starlette.responses import Response

from keras_transformer.serving.http_server import SERVER_ANSWER

PREFIX = "keras_transformer_serving"
UNRESOLVED = "-"

# Up to TensorFlow Serving's default request timeout (30 s) and past it.
LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
# Powers of two up to past the largest request a server takes by default (256 examples).
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

REQUEST_LABELS = ("api", "model", "version", "signature", "status")
SERVABLE_LABELS = ("model", "version", "signature")


class ServingMetrics:
    """The metrics of a `PredictionService`, in their own `CollectorRegistry`.

    Front ends report each request with `observe_request` (the REST app
    through `RequestMetrics`, the gRPC API directly); the batcher reports each
    model call with `observe_batch`.
    """

    def __init__(self, service):
        self.service = service
        self.registry = CollectorRegistry()
        self.requests = Histogram(
            f"{PREFIX}_request_duration_seconds",
            "Requests answered, by API (rest, grpc), model, version, signature and status, and "
            "their latency from arrival to the end of the answer. `_count` counts requests.",
            REQUEST_LABELS,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.in_flight_requests = Gauge(
            f"{PREFIX}_in_flight_requests",
            "Requests being answered, by API.",
            ("api",),
            registry=self.registry,
        )
        self.batch_sizes = Histogram(
            f"{PREFIX}_batch_size",
            "Examples per model call (merged requests count together).",
            SERVABLE_LABELS,
            buckets=BATCH_SIZE_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(_StateCollector(service))

    def observe_request(self, api, model, version, signature, status, seconds):
        """Counts one answered request of `api` ("rest", "grpc") and its latency. `model`, `version`
        and `signature` are what the request asked for (None where it named none); those that do not
        resolve to a served model, a known version or one of its signatures are labelled "-"."""
        labels = self._servable_labels(model, version, signature)
        self.requests.labels(api, *labels, str(status)).observe(seconds)

    def observe_batch(self, served_version, signature_name, size):
        """Counts one model call of `size` examples on `served_version`'s `signature_name`."""
        # Labels only: keeping the ServedVersion would keep a replaced version in memory.
        self.batch_sizes.labels(
            served_version.model_name, str(served_version.version), signature_name
        ).observe(size)

    def _servable_labels(self, model_name, version, signature):
        model = (
            self.service.repository.models.get(model_name) if isinstance(model_name, str) else None
        )
        if model is None:
            return UNRESOLVED, UNRESOLVED, UNRESOLVED
        if version not in model.states:
            version = None
        served = model.resolve(version)
        if served is None or signature not in served.signatures:
            signature = None
        return (
            model_name,
            UNRESOLVED if version is None else str(version),
            UNRESOLVED if signature is None else signature,
        )

    async def endpoint(self, request):
        """The Starlette endpoint: every metric in the format the scraper's Accept header asks for
        (Prometheus text by default, OpenMetrics if asked)."""
        encoder, content_type = choose_encoder(request.headers.get("accept"))
        return Response(encoder(self.registry), media_type=content_type)


class _StateCollector:
    """Reads the service's state at scrape time: queued examples, versions by state, load
    failures."""

    def __init__(self, service):
        self.service = service

    def describe(self):
        return []  # Collected only when scraped, not at registration.

    def collect(self):
        queued = GaugeMetricFamily(
            f"{PREFIX}_queued_examples",
            "Examples waiting for a model call, by model, version and signature "
            "(only queues in use).",
            labels=SERVABLE_LABELS,
        )
        for (model, version, signature), examples in sorted(
            self.service.batcher.queue_depths().items()
        ):
            queued.add_metric([model, str(version), signature], examples)
        versions = GaugeMetricFamily(
            f"{PREFIX}_model_versions",
            "Versions seen on disk, by model and state (AVAILABLE, LOADING, END).",
            labels=("model", "state"),
        )
        newest = GaugeMetricFamily(
            f"{PREFIX}_newest_available_version",
            "The newest version available, by model (absent while none is).",
            labels=("model",),
        )
        failures = CounterMetricFamily(
            f"{PREFIX}_model_load_failures",
            "Failed loads of a version, by model (retries included).",
            labels=("model",),
        )
        for name, model in sorted(self.service.repository.models.items()):
            # The poller thread changes states while a scrape reads them: take a copy first.
            states = list(model.states.items())
            counts = {}
            for _, (state, _) in states:
                counts[state] = counts.get(state, 0) + 1
            for state, count in sorted(counts.items()):
                versions.add_metric([name, state], count)
            available = [version for version, (state, _) in states if state == "AVAILABLE"]
            if available:
                newest.add_metric([name], max(available))
            failures.add_metric([name], model.load_failures)
        return [queued, versions, newest, failures]


class RequestMetrics:
    """ASGI middleware: times every HTTP request and reports it with the model, version and
    signature the app resolved (`request.state.model`, `.version`, `.signature`) to
    `metrics.observe_request`."""

    def __init__(self, app, metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = [500]  # what an exception that escapes the app becomes

        async def record_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        in_flight = self.metrics.in_flight_requests.labels("rest")
        in_flight.inc()
        try:
            await self.app(scope, receive, record_status)
        finally:
            in_flight.dec()
            state = scope.get("state", {})
            self.metrics.observe_request(
                "rest",
                state.get("model"),
                state.get("version"),
                state.get("signature"),
                scope.get(SERVER_ANSWER, status[0]),
                time.perf_counter() - started,
            )
