"""Soak of live model config changes: requests to two models while the config changes around them.

One `python -m apps.serve --model_config_file` process serves `alpha` and
`beta`, two copies of a classifier export (versions 1 and 2 of alpha, version
1 of beta). `--clients` threads send one short text after another (REST,
closed loop) to alpha and beta in turn. Meanwhile `--changes` times, every
`--interval` seconds, gRPC's `HandleReloadConfigRequest` (TensorFlow Serving's
own messages) sends a new config: a third model, `gamma`, is added on every
other change and removed on the others; alpha's version policy cycles through
`specific {1}`, `specific {2}`, `latest` and `specific {1, 2}`; and on every
third change a new version of beta is published into its base path (written
all-or-nothing by `write_new_version`), which the server's version poller
loads in place of the old one.

A request to alpha or beta fails when it answers anything but 200 with one
prediction; the target is none. Requests to gamma are counted apart (it comes
and goes, so its 404s are expected). The exit status is 1 if a request to
alpha or beta failed, a reload was refused, or a change did not show within
`--change-timeout` (gamma listed, or not, in `/healthz`; alpha answering from
the versions its policy names).

Model: `--classifier PATH` (a base folder; its newest version is copied), or,
by default, a random-weight export of the application's default classifier
sizes, as `serve_load.py` builds it.

Usage (from the repository root):

    .venv/bin/python benchmarks/serve_config_soak.py
    .venv/bin/python benchmarks/serve_config_soak.py --changes 24 --clients 4

Results go to benchmarks/results/serve_config_soak.json.
"""

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time

import httpx
import numpy as np
from serve_load import Server, _commit, _free_port, build_export
from serve_soak import TEXTS

RESULTS = os.path.join("benchmarks", "results", "serve_config_soak.json")
# alpha's policy at each change, in turn: the versions it serves (None: the latest).
ALPHA_POLICIES = [[1], [2], None, [1, 2]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--classifier", help="a classifier export base folder (default: a random-weight export)"
    )
    parser.add_argument("--changes", type=int, default=12, help="config reloads sent")
    parser.add_argument(
        "--interval", type=float, default=4.0, help="seconds from one change to the next"
    )
    parser.add_argument("--clients", type=int, default=2, help="threads sending requests")
    parser.add_argument(
        "--poll-seconds", type=float, default=0.5, help="the server's --poll-seconds"
    )
    parser.add_argument(
        "--change-timeout", type=float, default=60.0, help="seconds a change may take to show"
    )
    parser.add_argument(
        "--startup-timeout", type=float, default=300.0, help="seconds to wait for /healthz"
    )
    parser.add_argument("--output", default=RESULTS)
    args = parser.parse_args()
    if args.changes < 1 or args.clients < 1 or args.interval < 0:
        parser.error("need --changes and --clients of at least 1 and a non-negative --interval.")
    load_before = os.getloadavg()

    import grpc
    from tensorflow_serving.apis import model_service_pb2_grpc

    from keras_transformer.export.versions import latest_version_dir, write_new_version

    with tempfile.TemporaryDirectory(prefix="serve_config_soak_") as folder:
        source_base = os.path.join(folder, "source")
        if args.classifier:
            source = latest_version_dir(args.classifier)
            model = f"given ({args.classifier})"
        else:
            print("Writing a random-weight export of the default classifier sizes...", flush=True)
            build_export("classifier", source_base)
            source = latest_version_dir(source_base)
            model = "random weights, default ClassifierSettings sizes"

        def publish(base):
            return write_new_version(
                base, lambda target: shutil.copytree(source, target, dirs_exist_ok=True)
            )

        bases = {name: os.path.join(folder, name) for name in ("alpha", "beta", "gamma")}
        for name, count in (("alpha", 2), ("beta", 1), ("gamma", 1)):
            for _ in range(count):
                publish(bases[name])
        config_path = os.path.join(folder, "models.config")
        with open(config_path, "w", encoding="utf-8") as config_file:
            config_file.write(
                config_text({"alpha": (bases["alpha"], None), "beta": (bases["beta"], None)})
            )
        grpc_port = _free_port()
        # TensorFlow Serving's spellings: --port is the gRPC API's.
        flags = [
            "--model_config_file",
            config_path,
            "--port",
            str(grpc_port),
            "--file_system_poll_wait_seconds",
            str(args.poll_seconds),
            "--no-batching",  # TensorFlow Serving's default, as the soak was measured
        ]
        # No --model: the models are the config file's.
        server = Server({}, flags, os.path.join(folder, "server.log"))
        load, changes, problems = None, [], []
        try:
            server.wait_ready(args.startup_timeout)
            channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
            models = model_service_pb2_grpc.ModelServiceStub(channel)
            load = Load(server.url, args.clients)
            load.start()
            time.sleep(args.interval)
            beta_version = 1
            for change in range(args.changes):
                alpha_policy = ALPHA_POLICIES[change % len(ALPHA_POLICIES)]
                with_gamma = change % 2 == 0
                wanted = {"alpha": (bases["alpha"], alpha_policy), "beta": (bases["beta"], None)}
                if with_gamma:
                    wanted["gamma"] = (bases["gamma"], None)
                started = time.monotonic()
                try:
                    models.HandleReloadConfigRequest(reload_request(wanted), timeout=120)
                except grpc.RpcError as error:
                    problems.append(f"change {change}: {error.code().name}: {error.details()}")
                reload_seconds = time.monotonic() - started
                if change % 3 == 2:
                    beta_version = int(os.path.basename(publish(bases["beta"])))
                problem = wait_for_change(
                    server.url, with_gamma, alpha_policy or [2], beta_version, args.change_timeout
                )
                if problem:
                    problems.append(f"change {change}: {problem}")
                changes.append(
                    {
                        "change": change,
                        "alpha_policy": alpha_policy or "latest",
                        "gamma": with_gamma,
                        "beta_version": beta_version,
                        "reload_seconds": round(reload_seconds, 2),
                        "shown_seconds": round(time.monotonic() - started, 2),
                    }
                )
                print(
                    f"  change {change:2d}: alpha {alpha_policy or 'latest'}, gamma "
                    f"{'in' if with_gamma else 'out'}, beta version {beta_version}: reload "
                    f"{reload_seconds:.2f} s, shown after {changes[-1]['shown_seconds']:.2f} s",
                    flush=True,
                )
                time.sleep(max(0.0, args.interval - (time.monotonic() - started)))
            channel.close()
        finally:
            if load is not None:
                load.stop()
            server.stop()
        server_log_tail = server.log_tail()

    summary = load.summary() if load else {}
    summary["refused_or_late_changes"] = len(problems)
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
        "changes": changes,
        "problems": problems,
        "summary": summary,
    }
    failed = summary.get("failures", 0) or problems
    if failed:
        result["server_log_tail"] = server_log_tail
        result["failure_examples"] = load.failure_examples if load else []
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as results_file:
        json.dump(result, results_file, indent=2)
    print(json.dumps(summary, indent=2))
    print(f"Results: {args.output}")
    if failed:
        print("\n".join(problems), file=sys.stderr)
        print("The server log's tail is in the results file.", file=sys.stderr)
        sys.exit(1)


def config_text(models):
    """A model config file listing `models` ({name: (base path, versions or None)})."""
    entries = []
    for name, (base, versions) in models.items():
        policy = (
            "    model_version_policy { specific { "
            + " ".join(f"versions: {version}" for version in versions)
            + " } }\n"
            if versions
            else ""
        )
        entries.append(
            f'  config {{\n    name: "{name}"\n    base_path: "{base}"\n'
            f'    model_platform: "tensorflow"\n{policy}  }}\n'
        )
    return "model_config_list {\n" + "".join(entries) + "}\n"


def reload_request(models):
    """TensorFlow Serving's ReloadConfigRequest for `models` ({name: (base path, versions or
    None)})."""
    from tensorflow_serving.apis import model_management_pb2

    request = model_management_pb2.ReloadConfigRequest()
    for name, (base, versions) in models.items():
        config = request.config.model_config_list.config.add()
        config.name, config.base_path, config.model_platform = name, base, "tensorflow"
        if versions:
            config.model_version_policy.specific.versions.extend(versions)
    return request


def wait_for_change(url, with_gamma, alpha_versions, beta_version, timeout):
    """None once the server shows the change (gamma listed in /healthz or not, alpha's
    versions AVAILABLE, beta's newest version serving), else what it did not show."""
    deadline = time.monotonic() + timeout
    seen = None
    with httpx.Client(base_url=url, timeout=10.0) as client:
        while time.monotonic() < deadline:
            try:
                models = client.get("/healthz").json()["models"]
                alpha = client.get("/v1/models/alpha").json()["model_version_status"]
            except (httpx.HTTPError, ValueError, KeyError) as error:
                seen = repr(error)
                time.sleep(0.2)
                continue
            available = sorted(int(s["version"]) for s in alpha if s["state"] == "AVAILABLE")
            seen = {"models": models, "alpha available": available}
            if (
                ("gamma" in models) == with_gamma
                and (not with_gamma or models["gamma"] is not None)
                and available == sorted(alpha_versions)
                and models.get("beta") == beta_version
            ):
                return None
            time.sleep(0.1)
    return f"not shown within {timeout:.0f} s; last seen {seen}"


class Load:
    """`clients` threads, each sending one text after another to alpha, beta and gamma in turn
    (REST, row format); latencies and failures by model."""

    def __init__(self, url, clients):
        self.url = url
        self.clients = clients
        self.lock = threading.Lock()
        self.latencies = {"alpha": [], "beta": [], "gamma": []}
        self.answers = {"alpha": {}, "beta": {}, "gamma": {}}  # status -> count
        self.failures = 0
        self.failure_examples = []
        self.stopping = threading.Event()
        self.threads = []

    def start(self):
        self.threads = [
            threading.Thread(target=self._client, args=(index,), daemon=True)
            for index in range(self.clients)
        ]
        for thread in self.threads:
            thread.start()

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def _client(self, index):
        with httpx.Client(base_url=self.url, timeout=60.0) as client:
            sent = index
            while not self.stopping.is_set():
                model = ("alpha", "beta", "gamma")[sent % 3]
                text = TEXTS[sent % len(TEXTS)]
                sent += 1
                started = time.perf_counter()
                try:
                    response = client.post(
                        f"/v1/models/{model}:predict", json={"instances": [text]}
                    )
                    status = response.status_code
                    ok = status == 200 and len(response.json()["predictions"]) == 1
                    detail = response.text[:300]
                except (httpx.HTTPError, ValueError, KeyError) as error:
                    status, ok, detail = "error", False, repr(error)
                seconds = time.perf_counter() - started
                with self.lock:
                    self.answers[model][status] = self.answers[model].get(status, 0) + 1
                    if ok:
                        self.latencies[model].append(seconds)
                    elif model != "gamma":  # gamma comes and goes: its 404s are expected
                        self.failures += 1
                        if len(self.failure_examples) < 10:
                            self.failure_examples.append(f"{model}: {status} {detail}")

    def summary(self):
        with self.lock:
            kept = self.latencies["alpha"] + self.latencies["beta"]
            return {
                "requests_alpha_beta": len(kept) + self.failures,
                "failures": self.failures,
                "p50_ms": round(float(np.percentile(kept, 50)) * 1000, 1) if kept else None,
                "p99_ms": round(float(np.percentile(kept, 99)) * 1000, 1) if kept else None,
                "max_ms": round(max(kept) * 1000, 1) if kept else None,
                "answers_by_model": {
                    model: {str(status): count for status, count in answers.items()}
                    for model, answers in self.answers.items()
                },
            }


if __name__ == "__main__":
    main()
