"""Load on the REST server: throughput and latency, server-side batching on versus off.

Two real servers (`python -m apps.serve`, default settings) serve the same
exports side by side on 127.0.0.1, one with batching (`--enable_batching` and the
default batch settings, or what `--server-args` sets) and one with `--no-batching`. After
each server answers `GET /healthz` and has been warmed up (a few single
requests, then two bursts of `max(--clients)` concurrent ones per model),
every cell (model x number of clients) is measured on both servers,
interleaved ABBA: the cell's time is cut into `--rounds` segments per
server, run on, off, off, on, ... so machine noise and drift hit both modes
alike; only one server has traffic at any time.

A segment is a closed loop: N clients (coroutines of one event loop in
the benchmark process, each on its own keep-alive connection) send one
request after another, each one text in the row format
(`{"instances": [text]}`), until the segment's time is up; requests in
flight then finish and count. Latency is measured at the client,
from sending the request to having parsed the answer. Throughput is
requests / wall-clock time of the segments (summed over segments). A request
errs when it raises, answers other than 200 or does not hold exactly one
prediction. With few requests in a cell (the translator at one client) p99
is about the slowest request.

Texts are real: whole BBC News articles from the `bbc` corpus's test split
for the classifier (the model reads the first `sequence_length` tokens), or
with `--classifier-texts headlines` their headlines (a handful of tokens:
the export trims a batch to its longest text, so per-call overhead, which
batching saves, is then most of the cost),
Spanish Reina-Valera verses from the `bible:es-en` test split for the
translator (`serving_default`, beam search of width 4, up to
`sequence_length` tokens).

Models: exports given with `--classifier PATH` / `--translator PATH` (base
folders, e.g. `exported_models/classifier` written by `make demo`), or, by
default, exports written into a temporary folder from freshly initialized
models of the default application sizes (`ClassifierSettings`,
`TranslatorSettings`), with vocabularies learned from 300 BBC training
articles and 2,000 Bible training pairs. Speed depends on the sizes, not on
the weight values (except that a random translator's output length is
arbitrary; the mean number of output words is reported).

The load generator runs on the same machine as the servers, so its own CPU
use (HTTP, JSON) competes with them; on a small machine that lowers both
modes' numbers. The machine's load average is recorded before and after.

Usage (from the repository root):

    .venv/bin/python benchmarks/serve_load.py
    .venv/bin/python benchmarks/serve_load.py --models classifier --seconds 30
    .venv/bin/python benchmarks/serve_load.py \\
        --classifier exported_models/classifier --translator exported_models/translator
    .venv/bin/python benchmarks/serve_load.py --server-args "--batch-timeout-ms 2"

Results go to benchmarks/results/serve_load.json; the exit status is 1 if any
request erred.
"""

import argparse
import asyncio
import json
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import numpy as np

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join("benchmarks", "results", "serve_load.json")
MODELS = ("classifier", "translator")
MODES = ("on", "off")  # batching


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
        default="articles",
        help="whole BBC articles (~400 tokens), or their headlines (~8 tokens)",
    )
    parser.add_argument("--clients", default="1,16", help="numbers of concurrent clients")
    parser.add_argument(
        "--seconds",
        type=float,
        default=20.0,
        help="measured seconds per cell and batching mode (classifier)",
    )
    parser.add_argument(
        "--translator-seconds",
        type=float,
        default=20.0,
        help="measured seconds per cell and batching mode (translator)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="segments per cell and mode, run ABBA between the two servers",
    )
    parser.add_argument(
        "--server-args",
        default="",
        help='extra flags for both servers, e.g. "--num-threads 1 --batch-timeout-ms 2"',
    )
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

    with tempfile.TemporaryDirectory(prefix="serve_load_") as folder:
        texts = load_texts(models, args.classifier_texts)
        paths = {}
        built = {}
        for name in models:
            given = getattr(args, name)
            if given:
                if not os.path.isdir(given):
                    parser.error(f"--{name}: no folder at {given}")
                paths[name] = os.path.abspath(given)
                built[name] = f"given ({given})"
        missing = [name for name in models if name not in paths]
        if missing:
            print(
                f"Writing random-weight exports of the default sizes: {', '.join(missing)}...",
                flush=True,
            )
            for name in missing:
                paths[name] = build_export(name, os.path.join(folder, name))
                built[name] = (
                    "random weights, default "
                    f"{'ClassifierSettings' if name == 'classifier' else 'TranslatorSettings'} "
                    "sizes"
                )

        extra = shlex.split(args.server_args)
        servers = {}
        try:
            for mode in MODES:
                flags = extra + ([] if mode == "on" else ["--no-batching"])
                servers[mode] = Server(paths, flags, os.path.join(folder, f"server-{mode}.log"))
            print(
                f"Starting servers: batching on (port {servers['on'].port}), off (port "
                f"{servers['off'].port})...",
                flush=True,
            )
            for server in servers.values():
                server.wait_ready(args.startup_timeout)
            for name in models:
                for server in servers.values():
                    warm_up(server, name, texts[name], max(clients))
            rows, output_words = [], {}
            for name in models:
                seconds = args.seconds if name == "classifier" else args.translator_seconds
                for count in clients:
                    cells = measure_cell(servers, name, texts[name], count, seconds, args.rounds)
                    for mode in MODES:
                        cell = cells[mode]
                        rows.append(summarize(name, count, mode, cell))
                        if name == "translator":
                            output_words.setdefault(mode, []).extend(cell["words"])
                        print(f"  {format_row(rows[-1])}", flush=True)
        finally:
            for server in servers.values():
                server.stop()
        server_logs_tail = {mode: server.log_tail() for mode, server in servers.items()}

    load_after = os.getloadavg()
    ratios = throughput_ratios(rows)
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
        "throughput_ratio_on_over_off": ratios,
        "translator_mean_output_words": {
            mode: float(np.mean(words)) for mode, words in output_words.items() if words
        },
    }
    if errors:
        result["server_log_tails"] = server_logs_tail
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as results_file:
        json.dump(result, results_file, indent=2)
    print(f"Results: {args.output}")
    if errors:
        print(
            f"{errors} request(s) erred; server log tails are in the results file.", file=sys.stderr
        )
        sys.exit(1)


def _commit():
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPOSITORY, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def load_texts(models, classifier_texts="articles"):
    """Request texts per model: BBC test articles (or their headlines), Spanish test verses."""
    from keras_transformer.data import load_classification_data, load_translation_data

    texts = {}
    if "classifier" in models:
        articles = load_classification_data("bbc", seed=1337).test.texts
        # A BBC article's first line is its headline.
        texts["classifier"] = [
            article.split("\n", 1)[0] if classifier_texts == "headlines" else article
            for article in articles
        ]
    if "translator" in models:
        texts["translator"] = list(load_translation_data("bible:es-en", seed=1337).test.sources)
    return texts


def build_export(name, base_dir):
    """Writes a random-weight export of the application's default sizes; returns `base_dir`."""
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)

    from keras_transformer.text import WordPieceTokenizer, build_vocabulary, save_vocabulary

    os.makedirs(base_dir)
    vocabulary_dir = tempfile.mkdtemp(dir=os.path.dirname(base_dir))
    if name == "classifier":
        from keras_transformer.data import load_classification_data
        from keras_transformer.export.classifier import export_classifier
        from keras_transformer.models import TransformerClassifier
        from keras_transformer.training.classifier.settings import ClassifierSettings
        from keras_transformer.training.data_rules import large_corpus_settings

        settings = large_corpus_settings(ClassifierSettings())
        data = load_classification_data("bbc", seed=1337, max_examples=300)
        tokenizer = WordPieceTokenizer(
            save_vocabulary(
                build_vocabulary(data.train.texts, settings.vocabulary_size),
                os.path.join(vocabulary_dir, "vocabulary.txt"),
            )
        )
        model = TransformerClassifier(
            vocabulary_size=tokenizer.vocabulary_size,
            num_classes=len(data.class_names),
            sequence_length=settings.sequence_length,
            num_layers=settings.num_layers,
            d_model=settings.d_model,
            num_heads=settings.num_heads,
            intermediate_dim=settings.intermediate_dim,
            dropout=settings.dropout,
            pooling=settings.pooling,
        )
        model.build((None, settings.sequence_length))
        export_classifier(model, tokenizer, data.class_names, base_dir)
    else:
        from keras_transformer.data import load_translation_data
        from keras_transformer.export.translator import export_translator
        from keras_transformer.training.data_rules import large_corpus_settings
        from keras_transformer.training.translator.model import build_translator_model
        from keras_transformer.training.translator.settings import TranslatorSettings

        settings = large_corpus_settings(TranslatorSettings())
        data = load_translation_data("bible:es-en", seed=1337, max_examples=2000)
        source = WordPieceTokenizer(
            save_vocabulary(
                build_vocabulary(data.train.sources, settings.vocabulary_size),
                os.path.join(vocabulary_dir, "source.txt"),
            )
        )
        target = WordPieceTokenizer(
            save_vocabulary(
                build_vocabulary(data.train.targets, settings.vocabulary_size, lower_case=False),
                os.path.join(vocabulary_dir, "target.txt"),
            ),
            lower_case=False,
        )
        model = build_translator_model(settings, source.vocabulary_size, target.vocabulary_size)
        # As apps/train_translator.py exports it.
        export_translator(
            model, source, target, base_dir, max_output_length=settings.sequence_length
        )
    return base_dir


class Server:
    """One `apps.serve` process, its REST API on a free port of 127.0.0.1, its log in a file;
    batching on (`--enable_batching`) unless `flags` say `--no-batching`; its gRPC API off unless
    `flags` give a `--port` (servers side by side would all want the default port)."""

    def __init__(self, paths, flags, log_path):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        command = [
            sys.executable,
            "-m",
            "apps.serve",
            "--rest_api_port",
            str(self.port),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--enable_batching",
        ]  # a --port (or --grpc-port) or --no-batching in `flags` comes later and wins
        for name, path in paths.items():
            command += ["--model", f"{name}={path}"]
        command += flags
        environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        self._log = open(log_path, "w")
        self.process = subprocess.Popen(
            command, cwd=REPOSITORY, env=environment, stdout=self._log, stderr=subprocess.STDOUT
        )

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.url, timeout=5.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise SystemExit(
                        f"The server on port {self.port} exited ({self.process.returncode}):\n"
                        f"{self.log_tail()}"
                    )
                try:
                    if client.get("/healthz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.5)
        raise SystemExit(
            f"The server on port {self.port} was not ready after {timeout:.0f} "
            f"s:\n{self.log_tail()}"
        )

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def log_tail(self, lines=30):
        try:
            with open(self.log_path, errors="replace") as log_file:
                return "".join(log_file.readlines()[-lines:])
        except OSError:
            return ""


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def warm_up(server, name, texts, burst):
    """A few lone requests, then two bursts of `burst` concurrent ones."""
    for index in range(3):
        with httpx.Client(base_url=server.url, timeout=300.0) as client:
            client.post(f"/v1/models/{name}:predict", json={"instances": [texts[index]]})
    for _ in range(2):
        run_clients(server.url, name, texts, burst, seconds=0.0, offset=0)


def run_clients(url, name, texts, count, seconds, offset):
    """`count` closed-loop clients for `seconds` (each sends at least one request).

    The clients are coroutines of one event loop, each on its own keep-alive
    connection, speaking just enough HTTP/1.1 to post JSON and read a
    `Content-Length` answer: a light client leaves the servers, which share
    the machine, more of the CPU than a thread per client would.

    Returns {"latencies": [...], "errors": n, "first_error": str, "elapsed": s, "words": [...]}.
    """
    host, port = url.removeprefix("http://").rsplit(":", 1)
    path = f"/v1/models/{name}:predict"
    return asyncio.run(_run_clients(host, int(port), path, texts, count, seconds, offset))


async def _run_clients(host, port, path, texts, count, seconds, offset):
    results = [None] * count
    go = asyncio.Event()
    deadline = [0.0]
    connections = [await asyncio.open_connection(host, port) for _ in range(count)]

    async def client(index, reader, writer):
        latencies, words, errors, first_error = [], [], 0, None
        position = offset + index * 7919  # clients walk the texts from different places
        await go.wait()
        while True:
            text = texts[position % len(texts)]
            position += 1
            body = json.dumps({"instances": [text]}).encode()
            request = (
                f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode() + body
            started = time.perf_counter()
            try:
                writer.write(request)
                status, answer = await _read_response(reader)
                finished = time.perf_counter()
                predictions = answer.get("predictions") if isinstance(answer, dict) else None
                if status != 200 or not isinstance(predictions, list) or len(predictions) != 1:
                    raise ValueError(f"status {status}: {str(answer)[:200]}")
                latencies.append(finished - started)
                if isinstance(predictions[0], str):
                    words.append(len(predictions[0].split()))
            except Exception as error:
                errors += 1
                first_error = first_error or f"{type(error).__name__}: {error}"
                if isinstance(error, (OSError, asyncio.IncompleteReadError)):
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
            if time.perf_counter() >= deadline[0]:
                break
        writer.close()
        results[index] = {
            "latencies": latencies,
            "words": words,
            "errors": errors,
            "first_error": first_error,
        }

    tasks = [asyncio.create_task(client(index, *connections[index])) for index in range(count)]
    started = time.perf_counter()
    deadline[0] = started + seconds
    go.set()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    merged = {"latencies": [], "words": [], "errors": 0, "first_error": None, "elapsed": elapsed}
    for result in results:
        merged["latencies"] += result["latencies"]
        merged["words"] += result["words"]
        merged["errors"] += result["errors"]
        merged["first_error"] = merged["first_error"] or result["first_error"]
    return merged


async def _read_response(reader):
    """(status, parsed JSON body) of one HTTP/1.1 response with a Content-Length."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = None
    for line in lines[1:]:
        key, _, value = line.partition(":")
        if key.strip().lower() == "content-length":
            length = int(value)
    if length is None:
        raise ValueError("response without Content-Length")
    return status, json.loads(await reader.readexactly(length))


def measure_cell(servers, name, texts, count, seconds, rounds):
    """`rounds` segments per mode, ABBA; returns {mode: merged measurements}."""
    cells = {
        mode: {"latencies": [], "words": [], "errors": 0, "first_error": None, "elapsed": 0.0}
        for mode in MODES
    }
    segment = seconds / rounds
    offset = 0
    for round_index in range(rounds):
        order = MODES if round_index % 2 == 0 else MODES[::-1]
        for mode in order:
            result = run_clients(servers[mode].url, name, texts, count, segment, offset)
            cell = cells[mode]
            cell["latencies"] += result["latencies"]
            cell["words"] += result["words"]
            cell["errors"] += result["errors"]
            cell["first_error"] = cell["first_error"] or result["first_error"]
            cell["elapsed"] += result["elapsed"]
        offset += 1009  # each round sends other texts, the same to both modes
    return cells


def summarize(name, count, mode, cell):
    return {"model": name, "clients": count, "batching": mode == "on", **cell_summary(cell)}


def cell_summary(cell):
    """Counts, throughput and client latencies (ms) of one measured cell."""
    latencies = np.asarray(cell["latencies"]) * 1000.0
    done = len(latencies)
    return {
        "requests": done,
        "errors": cell["errors"],
        "first_error": cell["first_error"],
        "seconds": cell["elapsed"],
        "requests_per_second": done / cell["elapsed"] if cell["elapsed"] else 0.0,
        "p50_ms": float(np.percentile(latencies, 50)) if done else None,
        "p99_ms": float(np.percentile(latencies, 99)) if done else None,
        "mean_ms": float(latencies.mean()) if done else None,
    }


def throughput_ratios(rows, key="batching", compared=True, baseline=False):
    """{model: {clients: req/s of the rows whose `key` is `compared` / req/s of those whose `key` is
    `baseline`}}; by default batching on over off."""
    ratios = {}
    for row in rows:
        if row[key] == compared:
            other = next(
                other
                for other in rows
                if other["model"] == row["model"]
                and other["clients"] == row["clients"]
                and other[key] == baseline
            )
            if other["requests_per_second"]:
                ratios.setdefault(row["model"], {})[str(row["clients"])] = (
                    row["requests_per_second"] / other["requests_per_second"]
                )
    return ratios


def _ms(value):
    return f"{value:9.1f}" if value is not None else f"{'-':>9}"


def format_row(row):
    return (
        f"{row['model']:11} {row['clients']:7d} {'on' if row['batching'] else 'off':>8} "
        f"{row['requests']:8d} {row['requests_per_second']:8.2f} {_ms(row['p50_ms'])} "
        f"{_ms(row['p99_ms'])} "
        f"{row['errors']:6d}"
    )


def print_table(rows, ratios, load_before, load_after):
    print(
        f"\nClosed-loop clients, one text per request; latency at the client "
        f"(load average before {load_before[0]:.2f}, after {load_after[0]:.2f}, {os.cpu_count()} "
        "CPUs)"
    )
    print(
        f"{'model':11} {'clients':>7} {'batching':>8} {'requests':>8} {'req/s':>8} {'p50 ms':>9} "
        f"{'p99 ms':>9} "
        f"{'errors':>6}"
    )
    for row in rows:
        print(format_row(row))
    for model, by_clients in ratios.items():
        text = ", ".join(f"{clients} clients {ratio:.2f}x" for clients, ratio in by_clients.items())
        print(f"{model}: throughput batching on / off: {text}")
    for row in rows:
        if row["first_error"]:
            print(
                f"first error ({row['model']}, {row['clients']} clients, batching "
                f"{'on' if row['batching'] else 'off'}): {row['first_error']}"
            )


if __name__ == "__main__":
    main()
