"""Warm-up after a hot swap: the first requests a new version answers, against the steady median.

A real server (`python -m apps.serve`, gRPC on, `--enable_batching`, the folders polled
every `--poll-seconds`) serves a classifier from a temporary base path under steady load:
`--clients` gRPC clients (threads of this process, each on its own channel) each send
one text per request, then wait `--interval` seconds, over and over. Every answer says
which version gave it (`PredictResponse.model_spec.version`). A swap publishes a copy of
the export as the next version (all-or-nothing, by `write_new_version`, as an export
appears); the server loads it beside the one serving, then sends it the new requests.
Per swap: the steady median latency (p50) of the `--steady-seconds` before the swap, and
the latencies of the first `--first` requests the new version answers (in the order they
were sent), as multiples of that median.

Three modes, each on its own server, swaps interleaved between them (mode A, B, C, then
C, B, A, ...) so drift hits all alike; only one server has traffic at a time:

* `replay`: the export as written, its `assets.extra/tf_serving_warmup_requests`
  replayed on load (four requests per signature: one word, a few, the most the model
  reads, and a batch of four), as TensorFlow Serving replays it.
* `one-call`: the same export with that file deleted: the server runs each public
  signature once on one short text.
* `off`: the server started with `--enable_model_warmup=false`: nothing runs before
  the version takes requests.

Texts are serve_load.py's (BBC News test articles, or their headlines with
`--classifier-texts headlines`); the model is `--classifier PATH` (a base folder; its
newest version is copied in), or by default a random-weight export of the application's
default classifier sizes, as serve_load.py builds it.

The load generator shares the machine with the server, and the new version's load (and
its warm-up) competes with the old version's requests for the CPU.

Usage (from the repository root):

    .venv/bin/python benchmarks/serve_warmup.py
    .venv/bin/python benchmarks/serve_warmup.py --swaps 4 --first 20 --clients 4

Results go to benchmarks/results/serve_warmup.json; the exit status is 1 if any request
erred or a swap did not complete within `--swap-timeout`.
"""

import argparse
import os
import platform
import shlex
import shutil
import sys
import tempfile
import threading
import time

import numpy as np
from bench_common import write_json
from serve_load import Server, _commit, _free_port, build_export, load_texts

RESULTS = os.path.join("benchmarks", "results", "serve_warmup.json")
MODES = ("replay", "one-call", "off")
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--classifier", help="a classifier export base folder (default: a random-weight export)"
    )
    parser.add_argument(
        "--classifier-texts",
        choices=("articles", "headlines"),
        default="articles",
        help="whole BBC articles (~400 tokens), or their headlines (~8 tokens)",
    )
    parser.add_argument("--swaps", type=int, default=3, help="hot swaps per mode")
    parser.add_argument(
        "--first", type=int, default=20, help="requests of the new version measured per swap"
    )
    parser.add_argument("--clients", type=int, default=4, help="gRPC clients of the steady load")
    parser.add_argument(
        "--interval", type=float, default=0.05, help="seconds a client waits between requests"
    )
    parser.add_argument(
        "--steady-seconds",
        type=float,
        default=4.0,
        help="seconds of steady load before each swap, its median the reference",
    )
    parser.add_argument("--poll-seconds", type=float, default=0.2, help="the server's polling")
    parser.add_argument("--swap-timeout", type=float, default=120.0, help="seconds a swap may take")
    parser.add_argument("--server-args", default="", help="extra flags for every server")
    parser.add_argument(
        "--startup-timeout", type=float, default=300.0, help="seconds to wait for /healthz"
    )
    parser.add_argument("--output", default=RESULTS)
    args = parser.parse_args()
    if args.swaps < 1 or args.first < 1 or args.clients < 1 or args.interval < 0:
        parser.error("need --swaps, --first and --clients of at least 1, and --interval >= 0.")
    load_before = os.getloadavg()

    from keras_transformer.export.versions import latest_version_dir, write_new_version

    texts = load_texts(["classifier"], args.classifier_texts)["classifier"]
    with tempfile.TemporaryDirectory(prefix="serve_warmup_") as folder:
        if args.classifier:
            source = latest_version_dir(args.classifier)
            model = f"given ({args.classifier})"
        else:
            print("Writing a random-weight export of the default classifier sizes...", flush=True)
            source = os.path.join(build_export("classifier", os.path.join(folder, "export")), "1")
            model = "random weights, default ClassifierSettings sizes"
        if not os.path.isfile(os.path.join(source, WARMUP_FILE)):
            parser.error(f"{source} has no {WARMUP_FILE}: export it again with this checkout.")

        def publish(mode):
            """Publishes the next version of `mode`'s model; returns its number."""

            def copy(target):
                shutil.copytree(source, target, dirs_exist_ok=True)
                if mode == "one-call":
                    os.remove(os.path.join(target, WARMUP_FILE))

            return int(os.path.basename(write_new_version(bases[mode], copy)))

        bases = {mode: os.path.join(folder, mode, "classifier") for mode in MODES}
        servers, loads, swaps = {}, {}, []
        try:
            for mode in MODES:
                publish(mode)
                grpc_port = _free_port()
                flags = ["--port", str(grpc_port), "--poll-seconds", str(args.poll_seconds)]
                if mode == "off":
                    flags.append("--enable_model_warmup=false")
                flags += shlex.split(args.server_args)
                servers[mode] = Server(
                    {"classifier": bases[mode]}, flags, os.path.join(folder, f"server-{mode}.log")
                )
                servers[mode].grpc_target = f"127.0.0.1:{grpc_port}"
            print("Starting servers: " + ", ".join(MODES) + "...", flush=True)
            for mode in MODES:
                servers[mode].wait_ready(args.startup_timeout)
                loads[mode] = Load(servers[mode].grpc_target, texts, args.clients, args.interval)
                # The first version's own first requests (cold where warm-up is off) are not
                # what is measured: the load runs a while before the first swap.
                loads[mode].start()
                time.sleep(args.steady_seconds)
                loads[mode].stop()
            for swap in range(args.swaps):
                for mode in MODES if swap % 2 == 0 else MODES[::-1]:
                    result = measure_swap(
                        loads[mode], lambda mode=mode: publish(mode), args, servers[mode]
                    )
                    swaps.append({"mode": mode, "swap": swap + 1, **result})
                    print(f"  {format_swap(swaps[-1])}", flush=True)
        finally:
            for load in loads.values():
                load.stop()
            for server in servers.values():
                server.stop()
        errors = {mode: load.errors for mode, load in loads.items()}
        first_errors = {mode: load.first_error for mode, load in loads.items() if load.errors}
        log_tails = {mode: server.log_tail() for mode, server in servers.items()}

    summary = summarize(swaps)
    load_after = os.getloadavg()
    print_table(summary, args, load_before, load_after)
    result = {
        "machine": platform.processor() or platform.machine(),
        "commit": _commit(),
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "model": model,
        "classifier_texts": args.classifier_texts,
        "clients": args.clients,
        "interval_seconds": args.interval,
        "steady_seconds": args.steady_seconds,
        "first": args.first,
        "server_args": shlex.split(args.server_args),
        "swaps": swaps,
        "summary": summary,
        "errors": errors,
    }
    if any(errors.values()):
        result["first_errors"] = first_errors
        result["server_log_tails"] = log_tails
    write_json(args.output, result)
    print(f"Results: {args.output}")
    if any(errors.values()):
        print(f"Requests erred: {errors}; first errors: {first_errors}", file=sys.stderr)
        sys.exit(1)


class Load:
    """`clients` threads sending one text per gRPC Predict to the classifier, each waiting
    `interval` seconds between requests, from `start()` until `stop()`; every answer is
    recorded as (sent at, latency in seconds, version that answered)."""

    def __init__(self, target, texts, clients, interval):
        import grpc
        from tensorflow.core.framework import tensor_pb2, types_pb2
        from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

        self.requests = []
        for text in texts:
            request = predict_pb2.PredictRequest()
            request.model_spec.name = "classifier"
            request.inputs["text"].CopyFrom(
                tensor_pb2.TensorProto(
                    dtype=types_pb2.DT_STRING,
                    string_val=[text.encode("utf-8")],
                    tensor_shape={"dim": [{"size": 1}]},
                )
            )
            self.requests.append(request)
        self._stub = prediction_service_pb2_grpc.PredictionServiceStub
        self.interval = interval
        self.answers = []
        self.errors, self.first_error = 0, None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._channels = [grpc.insecure_channel(target) for _ in range(clients)]
        self._threads = []

    def start(self):
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._client, args=(index, channel), daemon=True)
            for index, channel in enumerate(self._channels)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self):
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)
        self._threads = []

    def answers_since(self, started):
        with self._lock:
            return [answer for answer in self.answers if answer[0] >= started]

    def _client(self, index, channel):
        stub = self._stub(channel)
        position = index * 7919  # clients walk the texts from different places
        while not self._stop.is_set():
            request = self.requests[position % len(self.requests)]
            position += 1
            sent = time.perf_counter()
            try:
                response = stub.Predict(request, timeout=120.0)
                answer = (sent, time.perf_counter() - sent, response.model_spec.version.value)
                with self._lock:
                    self.answers.append(answer)
            except Exception as error:
                with self._lock:
                    self.errors += 1
                    self.first_error = self.first_error or f"{type(error).__name__}: {error}"
            self._stop.wait(self.interval)


def measure_swap(load, publish, args, server):
    """One hot swap under `load`: the steady median before it, the new version's first answers
    and how long the swap took (publish to the new version's first answer)."""
    load.answers.clear()
    load.start()
    try:
        started = time.perf_counter()
        time.sleep(args.steady_seconds)
        steady = load.answers_since(started)
        old = steady[-1][2] if steady else None
        published = time.perf_counter()
        version = publish()
        deadline = published + args.swap_timeout
        while True:
            new = sorted(answer for answer in load.answers_since(published) if answer[2] == version)
            if len(new) >= args.first:
                break
            if time.perf_counter() > deadline:
                raise SystemExit(
                    f"Version {version} answered {len(new)} requests within "
                    f"{args.swap_timeout:.0f} s of its publication:\n{server.log_tail()}"
                )
            time.sleep(0.05)
    finally:
        load.stop()
    steady_ms = np.asarray([answer[1] for answer in steady if answer[2] == old]) * 1000.0
    if not len(steady_ms):
        raise SystemExit(
            f"No answers in the {args.steady_seconds:.0f} s before the swap:\n{server.log_tail()}"
        )
    during_ms = [answer[1] * 1000.0 for answer in load.answers_since(published) if answer[2] == old]
    first_ms = [answer[1] * 1000.0 for answer in new[: args.first]]
    p50 = float(np.percentile(steady_ms, 50))
    return {
        "version": version,
        "swap_seconds": round(new[0][0] + new[0][1] - published, 2),
        "steady_requests": len(steady_ms),
        "steady_p50_ms": p50,
        "steady_p99_ms": float(np.percentile(steady_ms, 99)),
        "old_version_during_load_p50_ms": float(np.median(during_ms)) if during_ms else None,
        "first_ms": first_ms,
        "first_over_p50": first_ms[0] / p50,
        "median_first_over_p50": float(np.median(first_ms)) / p50,
        "max_first_over_p50": max(first_ms) / p50,
    }


def summarize(swaps):
    """Per mode, the medians over its swaps of each ratio, and the worst first request."""
    summary = {}
    for mode in MODES:
        rows = [swap for swap in swaps if swap["mode"] == mode]
        if not rows:
            continue
        summary[mode] = {
            "swaps": len(rows),
            "steady_p50_ms": float(np.median([row["steady_p50_ms"] for row in rows])),
            "first_over_p50": float(np.median([row["first_over_p50"] for row in rows])),
            "median_first_over_p50": float(
                np.median([row["median_first_over_p50"] for row in rows])
            ),
            "max_first_over_p50": float(np.median([row["max_first_over_p50"] for row in rows])),
            "worst_max_first_over_p50": max(row["max_first_over_p50"] for row in rows),
            "swap_seconds": float(np.median([row["swap_seconds"] for row in rows])),
        }
    return summary


def format_swap(row):
    return (
        f"{row['mode']:8} swap {row['swap']} -> version {row['version']} "
        f"({row['swap_seconds']:.1f} s): steady p50 {row['steady_p50_ms']:.1f} ms; first "
        f"{row['first_over_p50']:.2f}x, median of first {len(row['first_ms'])} "
        f"{row['median_first_over_p50']:.2f}x, max {row['max_first_over_p50']:.2f}x"
    )


def print_table(summary, args, load_before, load_after):
    print(
        f"\nFirst {args.first} requests of a new version over the steady p50 before the swap "
        f"(medians over swaps; load average before {load_before[0]:.2f}, after "
        f"{load_after[0]:.2f}, {os.cpu_count()} CPUs)"
    )
    print(
        f"{'mode':9} {'swaps':>5} {'p50 ms':>7} {'first':>7} {'median':>7} {'max':>7} "
        f"{'worst':>7} {'swap s':>7}"
    )
    for mode, row in summary.items():
        print(
            f"{mode:9} {row['swaps']:5d} {row['steady_p50_ms']:7.1f} {row['first_over_p50']:6.2f}x "
            f"{row['median_first_over_p50']:6.2f}x {row['max_first_over_p50']:6.2f}x "
            f"{row['worst_max_first_over_p50']:6.2f}x {row['swap_seconds']:7.1f}"
        )


if __name__ == "__main__":
    main()
