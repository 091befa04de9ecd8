"""Soak of hot swaps: a real server's memory while new versions replace old ones under light load.

One `python -m apps.serve` process serves a classifier export from a
temporary base path. After it is ready and warmed up, `--swaps` new
versions are published one after another (copies of version 1, written
all-or-nothing by `write_new_version`, as an export is), each once the
previous one serves. Meanwhile `--clients` threads each send one short text
per `--interval` seconds, so every version runs requests (through the
batching queues, the server's defaults) before it is replaced.

After each swap (the new version answers `/healthz` and the old one is
`END`), the server runs `--settle` seconds more under the same load, then
its resident set size (VmRSS of /proc/PID/status) is read. A server that
releases replaced versions stays flat after the first swap within noise; a
leak grows by about the size of a loaded version per swap.

Any answer other than 200 counts as an error; the exit status is 1 if there
were any, or if a swap did not complete within `--swap-timeout`.

Model: `--classifier PATH` (a base folder; its newest version is copied in
as version 1), or, by default, a random-weight export of the application's
default classifier sizes (`ClassifierSettings`), as `serve_load.py` builds it.

Usage (from the repository root; Linux, for /proc):

    .venv/bin/python benchmarks/serve_soak.py
    .venv/bin/python benchmarks/serve_soak.py --swaps 20 --clients 2 --interval 0.1
    .venv/bin/python benchmarks/serve_soak.py --server-args "--no-batching"

Results go to benchmarks/results/serve_soak.json.
"""

import argparse
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
import threading
import time

import httpx
import numpy as np
from serve_load import Server, _commit, build_export

RESULTS = os.path.join("benchmarks", "results", "serve_soak.json")
TEXTS = [
    "Shares rose after profits beat forecasts.",
    "The team won the cup final in extra time.",
    "A new phone with a faster chip goes on sale.",
    "Ministers debate the budget.",
    "",
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--classifier", help="a classifier export base folder (default: a random-weight export)"
    )
    parser.add_argument(
        "--swaps", type=int, default=20, help="new versions published, one after another"
    )
    parser.add_argument(
        "--clients", type=int, default=2, help="threads sending requests during the soak"
    )
    parser.add_argument(
        "--interval", type=float, default=0.1, help="seconds between one client's requests"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=3.0,
        help="seconds under load after a swap before the RSS is read",
    )
    parser.add_argument(
        "--poll-seconds", type=float, default=0.25, help="the server's --poll-seconds"
    )
    parser.add_argument("--swap-timeout", type=float, default=120.0, help="seconds a swap may take")
    parser.add_argument("--server-args", default="", help="extra flags for the server")
    parser.add_argument(
        "--startup-timeout", type=float, default=300.0, help="seconds to wait for /healthz"
    )
    parser.add_argument("--output", default=RESULTS)
    args = parser.parse_args()
    if args.swaps < 1 or args.clients < 0 or args.interval < 0 or args.settle < 0:
        parser.error(
            "need --swaps of at least 1 and non-negative --clients, --interval and --settle."
        )
    if not os.path.isdir("/proc/self"):
        parser.error("reads the server's memory from /proc: Linux only.")
    load_before = os.getloadavg()

    from keras_transformer.export.versions import latest_version_dir, write_new_version

    with tempfile.TemporaryDirectory(prefix="serve_soak_") as folder:
        base = os.path.join(folder, "classifier")
        if args.classifier:
            source = latest_version_dir(args.classifier)
            write_new_version(
                base, lambda target: shutil.copytree(source, target, dirs_exist_ok=True)
            )
            model = f"given ({args.classifier})"
        else:
            print("Writing a random-weight export of the default classifier sizes...", flush=True)
            build_export("classifier", base)
            model = "random weights, default ClassifierSettings sizes"
        first_version = os.path.join(base, "1")

        flags = ["--poll-seconds", str(args.poll_seconds), *shlex.split(args.server_args)]
        server = Server({"classifier": base}, flags, os.path.join(folder, "server.log"))
        load = None
        try:
            server.wait_ready(args.startup_timeout)
            load = Load(server.url, args.clients, args.interval)
            load.start()
            time.sleep(args.settle)
            samples = [
                {"swap": 0, "version": 1, "rss_mib": rss_mib(server.process.pid), "seconds": 0.0}
            ]
            print(f"  before any swap: {samples[0]['rss_mib']:.1f} MiB", flush=True)
            for swap in range(1, args.swaps + 1):
                started = time.monotonic()
                published = write_new_version(
                    base, lambda target: shutil.copytree(first_version, target, dirs_exist_ok=True)
                )
                version = int(os.path.basename(published))
                wait_for_swap(server.url, version, args.swap_timeout)
                seconds = time.monotonic() - started
                time.sleep(args.settle)
                samples.append(
                    {
                        "swap": swap,
                        "version": version,
                        "rss_mib": rss_mib(server.process.pid),
                        "seconds": round(seconds, 2),
                    }
                )
                print(
                    f"  swap {swap:2d} -> version {version:2d} ({seconds:.1f} s): "
                    f"{samples[-1]['rss_mib']:.1f} MiB",
                    flush=True,
                )
        finally:
            if load is not None:
                load.stop()
            server.stop()
        server_log_tail = server.log_tail()

    after_first = [sample["rss_mib"] for sample in samples[1:]]
    swaps = np.arange(1, len(after_first) + 1)
    slope = float(np.polyfit(swaps, after_first, 1)[0]) if len(after_first) > 1 else 0.0
    summary = {
        "rss_mib_before_swaps": samples[0]["rss_mib"],
        "rss_mib_after_first_swap": after_first[0],
        "rss_mib_after_last_swap": after_first[-1],
        "growth_mib_first_to_last_swap": round(after_first[-1] - after_first[0], 1),
        "spread_mib_after_first_swap": round(max(after_first) - min(after_first), 1),
        "slope_mib_per_swap": round(slope, 2),
        "requests": load.sent if load else 0,
        "errors": load.errors if load else 0,
    }
    result = {
        "machine": platform.processor() or platform.machine(),
        "commit": _commit(),
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "model": model,
        "server_args": flags,
        "clients": args.clients,
        "interval_seconds": args.interval,
        "settle_seconds": args.settle,
        "samples": samples,
        "summary": summary,
    }
    if summary["errors"]:
        result["server_log_tail"] = server_log_tail
        result["error_examples"] = load.error_examples
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as results_file:
        json.dump(result, results_file, indent=2)
    print(json.dumps(summary, indent=2))
    print(f"Results: {args.output}")
    if summary["errors"]:
        print(
            f"{summary['errors']} request(s) erred; the server log's tail is in the results file.",
            file=sys.stderr,
        )
        sys.exit(1)


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"No VmRSS for process {pid}")


def wait_for_swap(url, version, timeout):
    """Waits until `version` serves and every older version is `END`."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=url, timeout=10.0) as client:
        while time.monotonic() < deadline:
            statuses = client.get("/v1/models/classifier").json()["model_version_status"]
            states = {int(status["version"]): status["state"] for status in statuses}
            if states.get(version) == "AVAILABLE" and all(
                state == "END" for number, state in states.items() if number != version
            ):
                return
            time.sleep(0.1)
    raise SystemExit(
        f"Version {version} did not replace the others within {timeout:.0f} s: {statuses}"
    )


class Load:
    """`clients` threads, each sending one text per `interval` seconds until stopped."""

    def __init__(self, url, clients, interval):
        self.url = url
        self.interval = interval
        self.sent = 0
        self.errors = 0
        self.error_examples = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._client, args=(index,), daemon=True)
            for index in range(clients)
        ]

    def start(self):
        for thread in self._threads:
            thread.start()

    def stop(self):
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _client(self, index):
        with httpx.Client(base_url=self.url, timeout=60.0) as client:
            count = 0
            while not self._stop.is_set():
                text = TEXTS[(index + count) % len(TEXTS)]
                count += 1
                try:
                    response = client.post(
                        "/v1/models/classifier:predict", json={"instances": [text]}
                    )
                    error = (
                        None
                        if response.status_code == 200
                        else f"{response.status_code}: {response.text[:200]}"
                    )
                except httpx.HTTPError as failure:
                    error = f"{type(failure).__name__}: {failure}"
                with self._lock:
                    self.sent += 1
                    if error is not None:
                        self.errors += 1
                        if len(self.error_examples) < 10:
                            self.error_examples.append(error)
                self._stop.wait(self.interval)


if __name__ == "__main__":
    main()
