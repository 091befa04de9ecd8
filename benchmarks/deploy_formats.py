"""Each export format against the SavedModel of the same run: agreement, size and speed.

For each run folder (by default the three that benchmarks/quantization.py trains), the run
is exported as a SavedModel, for LiteRT and for ONNX, each in float32 and int8
(`keras-transformer export --format F [--quantize int8]`), and on the run's held-out test
split:

* agreement with the float32 SavedModel: a classifier's largest probability difference and
  equal labels, a translator's greedy translations equal to the SavedModel's `greedy`
  signature (the other formats decode greedily), on `--pairs` test pairs;
* size on disk of the version folder (the SavedModel's variables; a LiteRT export's
  token-id `.tflite` file and its raw-string one apart; the ONNX graph);
* seconds per call at batch 1 and 32, tokenization included on every side (the SavedModel
  tokenizes in its graph, the others with `PythonWordPieceTokenizer`), in one process,
  interleaved over `--rounds` rounds (bench_common.time_interleaved).

    .venv/bin/python benchmarks/quantization.py          # trains the runs, if not there yet
    .venv/bin/python benchmarks/deploy_formats.py
    .venv/bin/python benchmarks/deploy_formats.py --runs runs/quantization/bbc --rounds 5

Results go to benchmarks/results/deploy_formats.json, and a table is printed.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_common import set_tensorflow_threads, time_interleaved, write_json  # noqa: E402
from quantization import test_split  # noqa: E402

RESULTS = os.path.join("benchmarks", "results", "deploy_formats.json")
DEFAULT_RUNS = [
    os.path.join("runs", "quantization", name) for name in ("bbc", "bbc-minilm", "bible-es-en")
]
FORMATS = ("saved_model", "litert", "onnx")
PRECISIONS = (None, "int8")
BATCH_SIZES = (1, 32)


def folder_bytes(folder):
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(folder)
        for name in names
    )


def export_all(run_dir, base):
    """{(format, precision): version folder} of `run_dir` in every format and precision."""
    from keras_transformer.training.run_export import export_run

    exports = {}
    for export_format in FORMATS:
        for quantize in PRECISIONS:
            name = f"{export_format}-{quantize or 'float32'}"
            exported = export_run(
                run_dir, os.path.join(base, name), export_format=export_format, quantize=quantize
            )
            exports[export_format, quantize or "float32"] = exported.version_dir
            print(f"   exported {name}: {exported.version_dir}", flush=True)
    return exports


def answer_functions(task, exports):
    """{(format, precision): texts -> answers}: probabilities (classifier) or greedy
    translations (translator)."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the SavedModels' tokenizer ops

    from keras_transformer.export.litert_runtime import LiteRTClassifier, LiteRTTranslator
    from keras_transformer.export.onnx_runtime import OnnxClassifier, OnnxTranslator

    runtimes = {
        ("litert", "classifier"): lambda path: LiteRTClassifier(path, batch_size=32).predict,
        ("onnx", "classifier"): lambda path: OnnxClassifier(path).predict,
        ("litert", "translator"): lambda path: LiteRTTranslator(path, batch_size=32).translate,
        ("onnx", "translator"): lambda path: OnnxTranslator(path).translate,
    }
    functions = {}
    for (export_format, precision), version_dir in exports.items():
        if export_format == "saved_model":
            model = tf.saved_model.load(version_dir)
            if task == "classifier":
                serve = model.signatures["serving_default"]
                functions[export_format, precision] = lambda texts, serve=serve: serve(
                    text=tf.constant(texts)
                )["probabilities"].numpy()
            else:
                greedy = model.signatures["greedy"]
                functions[export_format, precision] = lambda texts, greedy=greedy: [
                    line.decode("utf-8")
                    for line in greedy(text=tf.constant(texts))["translation"].numpy()
                ]
        else:
            answer = runtimes[export_format, task](version_dir)
            functions[export_format, precision] = (
                (lambda texts, answer=answer: answer(texts)[0]) if task == "classifier" else answer
            )
    return functions


def agreement(task, functions, inputs, labels, batch_size=32):
    """{(format, precision): how far its answers on `inputs` are from the float32
    SavedModel's (and, for a classifier, its accuracy)}."""
    answers = {}
    for key, function in functions.items():
        parts = [function(inputs[i : i + batch_size]) for i in range(0, len(inputs), batch_size)]
        answers[key] = np.concatenate(parts) if task == "classifier" else sum(parts, [])
    reference = answers["saved_model", "float32"]
    found = {}
    for key, answer in answers.items():
        if task == "classifier":
            predicted = np.argmax(answer, axis=-1)
            found[key] = {
                "max_probability_difference": float(np.abs(answer - reference).max()),
                "equal_labels": int(np.sum(predicted == np.argmax(reference, axis=-1))),
                "accuracy": float(np.mean(predicted == np.asarray(labels))),
                "texts": len(inputs),
            }
        else:
            found[key] = {
                "equal_translations": sum(a == b for a, b in zip(answer, reference)),
                "texts": len(inputs),
            }
    return found


def speeds(functions, inputs, rounds):
    """{(format, precision): {batch: seconds per call}}, interleaved."""
    found = {key: {} for key in functions}
    for batch_size in BATCH_SIZES:
        batch = (inputs * batch_size)[:batch_size]
        named = {f"{f}/{p}": lambda fn=fn: fn(batch) for (f, p), fn in functions.items()}
        timed = time_interleaved(named, rounds=rounds, calls=3, warmup=1)
        for export_format, precision in functions:
            found[export_format, precision][batch_size] = float(
                np.median(timed[f"{export_format}/{precision}"])
            )
    return found


def sizes(exports):
    from keras_transformer.export.litert_runtime import CLASSIFIER_TEXT_FILE

    found = {}
    for key, version_dir in exports.items():
        found[key] = {"bytes": folder_bytes(version_dir)}
        text_file = os.path.join(version_dir, CLASSIFIER_TEXT_FILE)
        if key[0] == "litert" and os.path.isfile(text_file):
            found[key]["raw_string_file_bytes"] = os.path.getsize(text_file)
            found[key]["bytes"] -= found[key]["raw_string_file_bytes"]
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", default=",".join(DEFAULT_RUNS), help="comma-separated folders")
    parser.add_argument("--exports-dir", default=os.path.join("runs", "deploy_formats"))
    parser.add_argument("--pairs", type=int, default=200, help="test pairs a translator reads")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--threads", type=int, default=2, help="TensorFlow's threads")
    parser.add_argument("--output", default=RESULTS)
    args = parser.parse_args()
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    set_tensorflow_threads(args.threads)
    results = {}
    for run_dir in [path for path in args.runs.split(",") if path]:
        name = os.path.basename(os.path.normpath(run_dir))
        print(f"== {name}", flush=True)
        exports = export_all(run_dir, os.path.join(args.exports_dir, name))
        task, inputs, labels = test_split(run_dir)
        if task == "translator":
            inputs, labels = inputs[: args.pairs], labels[: args.pairs]
        else:
            from keras_transformer.training.run_export import read_run

            class_names = read_run(run_dir).saved["class_names"]
            labels = [class_names.index(label) for label in labels]
        functions = answer_functions(task, exports)
        measured = {
            "agreement": agreement(task, functions, inputs, labels),
            "sizes": sizes(exports),
            "seconds_per_call": speeds(functions, inputs, args.rounds),
        }
        results[name] = {
            part: {f"{f}/{p}": value for (f, p), value in found.items()}
            for part, found in measured.items()
        }
        print_table(name, task, measured)
        write_json(args.output, {"runs": results, "rounds": args.rounds})
    print(f"Results: {args.output}")


def print_table(name, task, measured):
    reference = measured["sizes"]["saved_model", "float32"]["bytes"]
    base_speed = measured["seconds_per_call"]["saved_model", "float32"]
    print(f"\n{name} ({task}):")
    print(
        f"{'format':22} {'MB':>7} {'size x':>7} {'agreement':>30} {'b1 ms':>8} {'b32 ms':>8} "
        f"{'b1 x':>6} {'b32 x':>6}"
    )
    for key, size in measured["sizes"].items():
        agreed = measured["agreement"][key]
        if task == "classifier":
            text = (
                f"{agreed['equal_labels']}/{agreed['texts']} labels, "
                f"|dp| {agreed['max_probability_difference']:.1e}"
            )
        else:
            text = f"{agreed['equal_translations']}/{agreed['texts']} equal"
        speed = measured["seconds_per_call"][key]
        print(
            f"{key[0] + '/' + key[1]:22} {size['bytes'] / 1e6:7.2f} "
            f"{size['bytes'] / reference:7.2f} {text:>30} {1000 * speed[1]:8.2f} "
            f"{1000 * speed[32]:8.2f} {base_speed[1] / speed[1]:6.2f} "
            f"{base_speed[32] / speed[32]:6.2f}"
        )


if __name__ == "__main__":
    main()
