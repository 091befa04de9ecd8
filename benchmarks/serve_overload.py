"""Open-loop overload on the REST server: about twice its capacity for a minute.

One real server (`python -m apps.serve`, default settings and `--enable_batching`
unless `--server-args` says otherwise) serves one model on 127.0.0.1. First its
capacity is measured: 16 closed-loop clients, one text per request, for
`--capacity-seconds` (requests answered per second). Then requests arrive
open-loop at `--overload` times that rate for `--seconds`, on a fixed
schedule (request i is sent at i / rate seconds, whatever the answers do),
each on its own connection, the client waiting up to twice the server's
request timeout so that the server, not the client, decides. Reported:

* admitted requests (200): p50 / p99 latency, from sending to the parsed answer;
* the share refused (503, full queue) and how fast refusals came back
  (p50 / p99), and the share past the deadline (504);
* answers other than 200 / 503 / 504, and transport errors (both should be 0);
* healthy afterwards: once the last request of the window has its answer,
  five ordinary requests one after another, and their latencies.

The load generator shares the machine with the server (its CPU use competes),
and so does anything else running: note the load average, recorded before
and after. Texts and models are serve_load.py's (random-weight exports of the
default application sizes unless `--export` is given).

Usage (from the repository root):

    .venv/bin/python benchmarks/serve_overload.py
    .venv/bin/python benchmarks/serve_overload.py --model classifier --seconds 30
    .venv/bin/python benchmarks/serve_overload.py --server-args "--max-queued-examples 128"

Results go to benchmarks/results/serve_overload.json; the exit status is 1 if
any answer was not 200, 503 or 504 or the server was not healthy afterwards.
"""

import argparse
import asyncio
import json
import os
import platform
import shlex
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from serve_load import (
    Server,
    _commit,
    _read_response,
    build_export,
    load_texts,
    run_clients,
    warm_up,
)

RESULTS = os.path.join("benchmarks", "results", "serve_overload.json")
CAPACITY_CLIENTS = 16
RECOVERY_REQUESTS = 5


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("classifier", "translator"), default="translator")
    parser.add_argument(
        "--export", help="the model's export base folder (default: a random-weight export)"
    )
    parser.add_argument(
        "--capacity-seconds",
        type=float,
        default=15.0,
        help="closed-loop seconds to measure capacity",
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds of open-loop overload")
    parser.add_argument(
        "--overload", type=float, default=2.0, help="arrival rate as a multiple of the capacity"
    )
    parser.add_argument("--server-args", default="", help="extra flags for the server")
    parser.add_argument(
        "--startup-timeout", type=float, default=300.0, help="seconds to wait for /healthz"
    )
    parser.add_argument("--output", default=RESULTS)
    args = parser.parse_args()
    extra = shlex.split(args.server_args)
    request_timeout = _flag_value(extra, "--request-timeout", 30.0)
    load_before = os.getloadavg()

    with tempfile.TemporaryDirectory(prefix="serve_overload_") as folder:
        texts = load_texts([args.model])[args.model]
        if args.export:
            path, built = os.path.abspath(args.export), f"given ({args.export})"
        else:
            print(
                f"Writing a random-weight {args.model} export of the default sizes...", flush=True
            )
            path, built = (
                build_export(args.model, os.path.join(folder, args.model)),
                "random weights, default sizes",
            )
        server = Server({args.model: path}, extra, os.path.join(folder, "server.log"))
        try:
            server.wait_ready(args.startup_timeout)
            warm_up(server, args.model, texts, CAPACITY_CLIENTS)
            measured = run_clients(
                server.url, args.model, texts, CAPACITY_CLIENTS, args.capacity_seconds, offset=0
            )
            capacity = len(measured["latencies"]) / measured["elapsed"]
            rate = args.overload * capacity
            print(
                f"Capacity: {capacity:.1f} requests/s ({CAPACITY_CLIENTS} closed-loop clients, "
                f"{measured['errors']} errors); sending {rate:.1f}/s for {args.seconds:.0f} s...",
                flush=True,
            )
            outcomes, lateness = asyncio.run(
                open_loop(
                    server.url,
                    args.model,
                    texts,
                    rate,
                    args.seconds,
                    client_timeout=2 * request_timeout,
                )
            )
            recovery = asyncio.run(
                recovery_latencies(
                    server.url, args.model, texts, client_timeout=2 * request_timeout
                )
            )
        finally:
            server.stop()
        log_tail = server.log_tail()

    load_after = os.getloadavg()
    report = summarize(outcomes, recovery)
    report.update(
        {
            "machine": platform.processor() or platform.machine(),
            "commit": _commit(),
            "cpus": os.cpu_count(),
            "load_average_before": load_before,
            "load_average_after": load_after,
            "model": args.model,
            "export": built,
            "server_args": extra,
            "capacity_requests_per_second": capacity,
            "offered_requests_per_second": rate,
            "overload_seconds": args.seconds,
            "schedule_lateness_max_ms": 1000 * max(lateness, default=0.0),
        }
    )
    healthy = report["unexpected"] == 0 and report["recovered"]
    if not healthy:
        report["server_log_tail"] = log_tail
    print_report(report)
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as results_file:
        json.dump(report, results_file, indent=2)
    print(f"Results: {args.output}")
    sys.exit(0 if healthy else 1)


def _flag_value(flags, name, default):
    for index, flag in enumerate(flags):
        if flag == name and index + 1 < len(flags):
            return float(flags[index + 1])
        if flag.startswith(name + "="):
            return float(flag.split("=", 1)[1])
    return default


async def post_once(host, port, path, text, client_timeout):
    """(status or an error name, seconds) of one request on a connection of its own."""
    body = json.dumps({"instances": [text]}).encode()
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    started = time.perf_counter()
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), client_timeout)
        writer.write(request)
        status, _ = await asyncio.wait_for(_read_response(reader), client_timeout)
        return status, time.perf_counter() - started
    except Exception as error:  # a transport failure is an outcome to count, not a crash
        return type(error).__name__, time.perf_counter() - started
    finally:
        if writer is not None:
            writer.close()


async def open_loop(url, model, texts, rate, seconds, client_timeout):
    """Sends request i at i / rate seconds for `seconds`.

    Returns `([(status, seconds)], [lateness])`.
    """
    host, port = url.removeprefix("http://").rsplit(":", 1)
    path = f"/v1/models/{model}:predict"
    loop = asyncio.get_running_loop()
    count = int(rate * seconds)
    start = loop.time() + 0.1
    tasks, lateness = [], []
    for index in range(count):
        due = start + index / rate
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        lateness.append(max(0.0, loop.time() - due))
        tasks.append(
            asyncio.create_task(
                post_once(host, int(port), path, texts[index % len(texts)], client_timeout)
            )
        )
    return await asyncio.gather(*tasks), lateness


async def recovery_latencies(url, model, texts, client_timeout):
    host, port = url.removeprefix("http://").rsplit(":", 1)
    path = f"/v1/models/{model}:predict"
    return [
        await post_once(host, int(port), path, texts[index], client_timeout)
        for index in range(RECOVERY_REQUESTS)
    ]


def _percentiles_ms(seconds):
    if not seconds:
        return {"p50_ms": None, "p99_ms": None}
    values = np.asarray(seconds) * 1000.0
    return {"p50_ms": float(np.percentile(values, 50)), "p99_ms": float(np.percentile(values, 99))}


def summarize(outcomes, recovery):
    by_status = {}
    for status, seconds in outcomes:
        by_status.setdefault(status, []).append(seconds)
    total = len(outcomes)
    unexpected = {
        str(status): len(values)
        for status, values in by_status.items()
        if status not in (200, 503, 504)
    }
    recovery_ok = all(status == 200 for status, _ in recovery)
    return {
        "requests": total,
        "counts": {str(status): len(values) for status, values in by_status.items()},
        "admitted_share": len(by_status.get(200, [])) / total if total else 0.0,
        "rejected_share": len(by_status.get(503, [])) / total if total else 0.0,
        "deadline_share": len(by_status.get(504, [])) / total if total else 0.0,
        "admitted": _percentiles_ms(by_status.get(200, [])),
        "rejected": _percentiles_ms(by_status.get(503, [])),
        "past_deadline": _percentiles_ms(by_status.get(504, [])),
        "unexpected": sum(unexpected.values()),
        "unexpected_counts": unexpected,
        "recovery_ms": [1000 * seconds for _, seconds in recovery],
        "recovery_statuses": [str(status) for status, _ in recovery],
        # Healthy afterwards: every ordinary request answered, each within a few seconds.
        "recovered": recovery_ok and all(seconds < 5.0 for _, seconds in recovery),
    }


def _ms(value):
    return "-" if value is None else f"{value:.0f} ms"


def print_report(report):
    print(
        f"\n{report['model']}: capacity {report['capacity_requests_per_second']:.1f} req/s, "
        "offered "
        f"{report['offered_requests_per_second']:.1f} req/s for {report['overload_seconds']:.0f} s "
        f"(load average before {report['load_average_before'][0]:.2f}, after "
        f"{report['load_average_after'][0]:.2f}, "
        f"{report['cpus']} CPUs; generator at most {report['schedule_lateness_max_ms']:.0f} ms "
        "behind schedule)"
    )
    print(f"  requests {report['requests']}: {report['counts']}")
    print(
        f"  admitted {100 * report['admitted_share']:.1f}%: p50 "
        f"{_ms(report['admitted']['p50_ms'])}, "
        f"p99 {_ms(report['admitted']['p99_ms'])}"
    )
    print(
        f"  refused (503) {100 * report['rejected_share']:.1f}%: p50 "
        f"{_ms(report['rejected']['p50_ms'])}, "
        f"p99 {_ms(report['rejected']['p99_ms'])}"
    )
    print(f"  past the deadline (504) {100 * report['deadline_share']:.1f}%")
    print(
        f"  other answers or transport errors: {report['unexpected']} "
        f"{report['unexpected_counts'] or ''}"
    )
    print(
        f"  afterwards: {', '.join(f'{value:.0f} ms' for value in report['recovery_ms'])} "
        f"({'healthy' if report['recovered'] else 'NOT healthy'})"
    )


if __name__ == "__main__":
    main()
