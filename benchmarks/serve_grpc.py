"""TensorFlow Serving's gRPC API against its REST API: throughput and latency on one server.

One real server (`python -m apps.serve`, default settings, `--enable_batching`)
serves the same exports over REST (`--rest_api_port`) and gRPC (`--port`). After it answers
`GET /healthz` and has been warmed up over both APIs, every cell (model x
number of clients) is measured on both APIs, interleaved ABBA: the cell's
time is cut into `--rounds` segments per API, run REST, gRPC, gRPC, REST, ...
so machine noise and drift hit both alike; only one API has traffic at any
time.

A segment is a closed loop: N clients (coroutines of one event loop in the
benchmark process) send one request after another, each one text, until the
segment's time is up; requests in flight then finish and count. A REST client
posts `{"instances": [text]}` on its own keep-alive connection and parses the
JSON answer (serve_load.py's light HTTP/1.1 client); a gRPC client calls
`PredictionService/Predict` on its own channel (its own HTTP/2 connection)
with a `PredictRequest` holding a one-string TensorProto, as
`tf.make_tensor_proto([text])` writes it, and reads the outputs. Latency is
measured at the client, from sending the request to having its answer.
Throughput is requests / wall-clock time of the segments. The server's CPU
time per request (all its threads, from /proc) separates its cost from the
clients'. A request errs when it raises or does not hold exactly one answer.

Texts, models and their sizes are serve_load.py's: BBC News headlines (or
whole articles, `--classifier-texts articles`) for the classifier, Spanish
Bible verses for the translator; exports given with `--classifier` /
`--translator`, else random-weight exports of the default application sizes.
Headlines make the classifier's model call cheap, so the API's own cost (JSON
or protobuf, HTTP/1.1 or HTTP/2) is most of what differs; the translator's
beam search dwarfs it.

The load generator shares the machine with the server; the machine's load
average is recorded before and after.

Usage (from the repository root):

    .venv/bin/python benchmarks/serve_grpc.py
    .venv/bin/python benchmarks/serve_grpc.py --models classifier --seconds 30

Results go to benchmarks/results/serve_grpc.json; the exit status is 1 if
any request erred.
"""

import argparse
import asyncio
import os
import platform
import shlex
import sys
import tempfile
import time

import numpy as np
from bench_common import write_json
from serve_load import (
    MODELS,
    Server,
    _commit,
    _free_port,
    _ms,
    build_export,
    cell_summary,
    load_texts,
    run_clients,
    throughput_ratios,
)

RESULTS = os.path.join("benchmarks", "results", "serve_grpc.json")
APIS = ("rest", "grpc")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--models", default="classifier,translator", help="comma-separated: classifier, translator"
    )
    parser.add_argument(
        "--classifier", help="a classifier export base folder (default: a random-weight export)"
    )
    parser.add_argument(
        "--translator", help="a translator export base folder (default: a random-weight export)"
    )
    parser.add_argument(
        "--classifier-texts",
        choices=("articles", "headlines"),
        default="headlines",
        help="BBC headlines (~8 tokens: the API's cost shows) or whole articles (~400 tokens)",
    )
    parser.add_argument("--clients", default="1,16", help="numbers of concurrent clients")
    parser.add_argument(
        "--seconds", type=float, default=15.0, help="measured seconds per cell and API (classifier)"
    )
    parser.add_argument(
        "--translator-seconds",
        type=float,
        default=20.0,
        help="measured seconds per cell and API (translator)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="segments per cell and API, run ABBA")
    parser.add_argument("--server-args", default="", help="extra flags for the server")
    parser.add_argument(
        "--startup-timeout", type=float, default=300.0, help="seconds to wait for /healthz"
    )
    parser.add_argument("--output", default=RESULTS)
    args = parser.parse_args()
    models = [name.strip() for name in args.models.split(",") if name.strip()]
    for name in models:
        if name not in MODELS:
            parser.error(f"--models: unknown model {name!r}; choose from {', '.join(MODELS)}.")
    clients = [int(count) for count in args.clients.split(",")]
    if not models or not clients or min(clients) < 1 or args.rounds < 1:
        parser.error(
            "need at least one model, client counts of at least 1 and --rounds of at least 1."
        )
    load_before = os.getloadavg()

    with tempfile.TemporaryDirectory(prefix="serve_grpc_") as folder:
        texts = load_texts(models, args.classifier_texts)
        paths, built = {}, {}
        for name in models:
            given = getattr(args, name)
            if given:
                if not os.path.isdir(given):
                    parser.error(f"--{name}: no folder at {given}")
                paths[name], built[name] = os.path.abspath(given), f"given ({given})"
            else:
                print(f"Writing a random-weight {name} export of the default sizes...", flush=True)
                paths[name] = build_export(name, os.path.join(folder, name))
                built[name] = "random weights, default sizes"

        grpc_port = _free_port()
        extra = shlex.split(args.server_args)
        server = Server(
            paths, extra + ["--port", str(grpc_port)], os.path.join(folder, "server.log")
        )
        server.grpc_target = f"127.0.0.1:{grpc_port}"
        try:
            print(
                f"Starting the server: REST port {server.port}, gRPC port {grpc_port}...",
                flush=True,
            )
            server.wait_ready(args.startup_timeout)
            rows = []
            for name in models:
                warm_up(server, name, texts[name], max(clients))
                seconds = args.seconds if name == "classifier" else args.translator_seconds
                for count in clients:
                    cells = measure_cell(server, name, texts[name], count, seconds, args.rounds)
                    for api in APIS:
                        rows.append(summarize(name, count, api, cells[api]))
                        print(f"  {format_row(rows[-1])}", flush=True)
        finally:
            server.stop()
        server_log_tail = server.log_tail()

    load_after = os.getloadavg()
    ratios = throughput_ratios(rows, key="api", compared="grpc", baseline="rest")
    print_table(rows, ratios, load_before, load_after)
    errors = sum(row["errors"] for row in rows)
    result = {
        "machine": platform.processor() or platform.machine(),
        "commit": _commit(),
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "models": built,
        "server_args": extra,
        "classifier_texts": args.classifier_texts,
        "seconds_per_cell": {"classifier": args.seconds, "translator": args.translator_seconds},
        "rounds": args.rounds,
        "rows": rows,
        "throughput_ratio_grpc_over_rest": ratios,
    }
    if errors:
        result["server_log_tail"] = server_log_tail
    write_json(args.output, result)
    print(f"Results: {args.output}")
    if errors:
        print(
            f"{errors} request(s) erred; the server's log tail is in the results file.",
            file=sys.stderr,
        )
        sys.exit(1)


def warm_up(server, name, texts, burst):
    """Two bursts of `burst` concurrent requests over each API."""
    for _ in range(2):
        run_clients(server.url, name, texts, burst, seconds=0.0, offset=0)
        run_grpc_clients(server.grpc_target, name, texts, burst, seconds=0.0, offset=0)


def run_grpc_clients(target, name, texts, count, seconds, offset):
    """`count` closed-loop gRPC clients for `seconds` (each sends at least one request), each on its
    own channel. Returns what serve_load.run_clients does."""
    return asyncio.run(_run_grpc_clients(target, name, texts, count, seconds, offset))


async def _run_grpc_clients(target, name, texts, count, seconds, offset):
    import grpc
    from tensorflow.core.framework import tensor_pb2, types_pb2
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    channels = [grpc.aio.insecure_channel(target) for _ in range(count)]
    for channel in channels:
        await channel.channel_ready()
    results = [None] * count
    go = asyncio.Event()
    deadline = [0.0]

    async def client(index, channel):
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        latencies, words, errors, first_error = [], [], 0, None
        position = offset + index * 7919  # clients walk the texts from different places
        await go.wait()
        while True:
            text = texts[position % len(texts)]
            position += 1
            started = time.perf_counter()
            try:
                request = predict_pb2.PredictRequest()
                request.model_spec.name = name
                request.inputs["text"].CopyFrom(
                    tensor_pb2.TensorProto(
                        dtype=types_pb2.DT_STRING,
                        string_val=[text.encode("utf-8")],
                        tensor_shape={"dim": [{"size": 1}]},
                    )
                )
                response = await stub.Predict(request, timeout=300.0)
                finished = time.perf_counter()
                sizes = [
                    tensor.tensor_shape.dim[0].size if tensor.tensor_shape.dim else None
                    for tensor in response.outputs.values()
                ]
                if not sizes or sizes != [1] * len(sizes):
                    raise ValueError(f"not one answer per output: {str(response)[:200]}")
                latencies.append(finished - started)
                if "translation" in response.outputs:
                    words.append(len(response.outputs["translation"].string_val[0].split()))
            except Exception as error:
                errors += 1
                first_error = first_error or f"{type(error).__name__}: {error}"
            if time.perf_counter() >= deadline[0]:
                break
        results[index] = {
            "latencies": latencies,
            "words": words,
            "errors": errors,
            "first_error": first_error,
        }

    tasks = [asyncio.create_task(client(index, channels[index])) for index in range(count)]
    started = time.perf_counter()
    deadline[0] = started + seconds
    go.set()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    for channel in channels:
        await channel.close()
    merged = {"latencies": [], "words": [], "errors": 0, "first_error": None, "elapsed": elapsed}
    for result in results:
        merged["latencies"] += result["latencies"]
        merged["words"] += result["words"]
        merged["errors"] += result["errors"]
        merged["first_error"] = merged["first_error"] or result["first_error"]
    return merged


def measure_cell(server, name, texts, count, seconds, rounds):
    """`rounds` segments per API, ABBA; returns {api: merged measurements}."""
    cells = {
        api: {"latencies": [], "words": [], "errors": 0, "first_error": None, "elapsed": 0.0}
        for api in APIS
    }
    segment = seconds / rounds
    offset = 0
    for round_index in range(rounds):
        for api in APIS if round_index % 2 == 0 else APIS[::-1]:
            cpu_before = server_cpu_seconds(server)
            if api == "rest":
                result = run_clients(server.url, name, texts, count, segment, offset)
            else:
                result = run_grpc_clients(server.grpc_target, name, texts, count, segment, offset)
            cell = cells[api]
            for key in ("latencies", "words"):
                cell[key] += result[key]
            cell["errors"] += result["errors"]
            cell["first_error"] = cell["first_error"] or result["first_error"]
            cell["elapsed"] += result["elapsed"]
            if cpu_before is not None:
                cell["server_cpu"] = (
                    cell.get("server_cpu", 0.0) + server_cpu_seconds(server) - cpu_before
                )
        offset += 1009  # each round sends other texts, the same to both APIs
    return cells


def server_cpu_seconds(server):
    """CPU seconds the server process has used (all its threads), or None where /proc is missing."""
    try:
        with open(f"/proc/{server.process.pid}/stat") as stat_file:
            fields = stat_file.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def summarize(name, count, api, cell):
    done = len(cell["latencies"])
    return {
        "model": name,
        "clients": count,
        "api": api,
        **cell_summary(cell),
        "server_cpu_ms_per_request": 1000.0 * cell["server_cpu"] / done
        if done and "server_cpu" in cell
        else None,
        "mean_output_words": float(np.mean(cell["words"])) if cell["words"] else None,
    }


def format_row(row):
    return (
        f"{row['model']:11} {row['clients']:7d} {row['api']:>5} {row['requests']:8d} "
        f"{row['requests_per_second']:8.2f} {_ms(row['p50_ms'])} {_ms(row['p99_ms'])} "
        f" {_ms(row['server_cpu_ms_per_request'])} {row['errors']:6d}"
    )


def print_table(rows, ratios, load_before, load_after):
    print(
        f"\nClosed-loop clients, one text per request; latency at the client "
        f"(load average before {load_before[0]:.2f}, after {load_after[0]:.2f}, {os.cpu_count()} "
        "CPUs)"
    )
    print(
        f"{'model':11} {'clients':>7} {'api':>5} {'requests':>8} {'req/s':>8} {'p50 ms':>9} "
        f"{'p99 ms':>9} "
        f"{'cpu ms/req':>10} {'errors':>6}"
    )
    for row in rows:
        print(format_row(row))
    for model, by_clients in ratios.items():
        text = ", ".join(f"{clients} clients {ratio:.2f}x" for clients, ratio in by_clients.items())
        print(f"{model}: throughput gRPC / REST: {text}")
    for row in rows:
        if row["first_error"]:
            print(
                f"first error ({row['model']}, {row['clients']} clients, {row['api']}): "
                f"{row['first_error']}"
            )


if __name__ == "__main__":
    main()
