"""Time and peak memory of one multi-head attention layer, ours against Keras',
forward and forward+backward, at sequence lengths 128 to 4096.

Both layers are self-attention over `[batch, T, d]` inputs (default batch 1,
d 256, 4 heads of 64, no mask; `--causal` adds the causal mask to both):

* **ours**: `keras_transformer.layers.MultiHeadAttention`;
* **keras**: `keras.layers.MultiHeadAttention` with ours' weights
  (`set_weights`: the layouts are the same), so both compute one function
  (checked before timing).

Each is timed inside a `tf.function` (graph mode): the forward pass alone, and
forward plus the gradients of `sum(output * cotangent)` with respect to the
inputs and every weight. Timing (`bench_common.time_interleaved`) alternates
the two (ours, keras, keras, ours, ...) after a warm-up; the table shows median
milliseconds over `--rounds`.

Peak memory is TensorFlow's own count: `tf.config.experimental.get_memory_info
("CPU:0")` works on the CPU with TensorFlow 2.21 (checked at start), so for
each step the benchmark resets the peak (`reset_memory_stats`), runs the step
once and reports `peak - memory in use before`: the bytes the step allocated
on top of the weights and inputs (the attention matrices, the activations kept
for the backward pass, the gradients). The analytic size of one attention
matrix, `batch * heads * T * T * 4` bytes (float32), is printed next to it:
a naive attention keeps a few of them alive at once.

A log-log plot of both (time and peak memory against T) is written to
`benchmarks/results/attention_scaling.png`, the numbers to
`benchmarks/results/attention_scaling.json`.

Usage (from the repository root):

    .venv/bin/python benchmarks/attention_scaling.py
    .venv/bin/python benchmarks/attention_scaling.py --quick
    .venv/bin/python benchmarks/attention_scaling.py --batch 4 --lengths 128,512,2048
"""

import argparse
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if os.environ.setdefault("KERAS_BACKEND", "tensorflow") != "tensorflow":
    sys.exit("benchmarks/attention_scaling.py needs KERAS_BACKEND=tensorflow.")

import keras
import numpy as np
import tensorflow as tf
from bench_common import (
    set_tensorflow_threads,
    time_interleaved,
    write_json,
)

from keras_transformer.layers import MultiHeadAttention

RESULTS = os.path.join("benchmarks", "results", "attention_scaling.json")
PLOT = os.path.join("benchmarks", "results", "attention_scaling.png")
KINDS = ("ours", "keras")
MODES = ("forward", "backward")  # backward = forward + backward
OUTPUT_TOLERANCE = 1e-4


def build_layers(model_dim, num_heads, batch, length):
    """Ours and Keras' attention, built, with the same weights."""
    shape = (batch, length, model_dim)
    ours = MultiHeadAttention(num_heads, model_dim // num_heads, name="ours")
    ours.build(shape, shape)
    reference = keras.layers.MultiHeadAttention(num_heads, model_dim // num_heads, name="keras")
    reference.build(shape, shape)
    reference.set_weights(ours.get_weights())
    return {"ours": ours, "keras": reference}


def make_steps(layer, causal):
    variables = list(layer.trainable_variables)

    @tf.function
    def forward(inputs, cotangent):
        return tf.reduce_sum(layer(inputs, inputs, use_causal_mask=causal) * cotangent)

    @tf.function
    def backward(inputs, cotangent):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            loss = tf.reduce_sum(layer(inputs, inputs, use_causal_mask=causal) * cotangent)
        gradients = tape.gradient(loss, [inputs, *variables])
        # One scalar out, so the step's result costs nothing to fetch.
        return loss + tf.add_n([tf.reduce_sum(gradient) for gradient in gradients]) * 0.0

    return {"forward": forward, "backward": backward}


def check_same_output(layers, inputs, causal):
    outputs = [np.asarray(layers[kind](inputs, inputs, use_causal_mask=causal)) for kind in KINDS]
    error = float(np.max(np.abs(outputs[0] - outputs[1])))
    if not error <= OUTPUT_TOLERANCE:
        raise AssertionError(f"ours and keras differ by {error:.3g} > {OUTPUT_TOLERANCE}")
    return error


def peak_step_bytes(step, args):
    """Bytes the step allocates on top of what is live before it (TF's CPU allocator count)."""
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    tf.config.experimental.reset_memory_stats("CPU:0")
    step(*args).numpy()
    return tf.config.experimental.get_memory_info("CPU:0")["peak"] - before


def memory_info_works():
    try:
        tf.config.experimental.reset_memory_stats("CPU:0")
        before = tf.config.experimental.get_memory_info("CPU:0")["peak"]
        probe = tf.ones((1024, 1024))  # 4 MiB
        after = tf.config.experimental.get_memory_info("CPU:0")["peak"]
        del probe
        return after - before >= 4 * 1024 * 1024
    except (ValueError, RuntimeError, tf.errors.OpError):
        return False


def benchmark_length(length, args, seed):
    keras.utils.set_random_seed(seed)
    layers = build_layers(args.d_model, args.heads, args.batch, length)
    rng = np.random.default_rng(seed)
    inputs = tf.constant(rng.standard_normal((args.batch, length, args.d_model)).astype("float32"))
    cotangent = tf.constant(
        rng.standard_normal((args.batch, length, args.d_model)).astype("float32")
    )
    step_args = (inputs, cotangent)
    error = check_same_output(layers, inputs, args.causal)
    steps = {kind: make_steps(layers[kind], args.causal) for kind in KINDS}
    result = {
        "length": length,
        "batch": args.batch,
        "d_model": args.d_model,
        "heads": args.heads,
        "causal": args.causal,
        "max_output_error": error,
        "attention_matrix_bytes": args.batch * args.heads * length * length * 4,
    }
    for mode in MODES:
        functions = {kind: lambda step=steps[kind][mode]: step(*step_args) for kind in KINDS}
        for call in functions.values():
            call().numpy()  # trace and warm up, so the peak below is the step's, not the tracing's
        peaks = {kind: peak_step_bytes(steps[kind][mode], step_args) for kind in KINDS}
        seconds = time_interleaved(
            functions, args.rounds, calls=args.steps, wait=lambda result: result.numpy()
        )
        for kind in KINDS:
            times = [1000.0 * s for s in seconds[kind]]
            result[f"{kind}_{mode}_ms"] = statistics.median(times)
            result[f"{kind}_{mode}_rounds_ms"] = times
            result[f"{kind}_{mode}_peak_bytes"] = peaks[kind]
        result[f"{mode}_keras_over_ours"] = result[f"keras_{mode}_ms"] / result[f"ours_{mode}_ms"]
    return result


def format_table(results):
    header = ["T", "attn matrix MiB"]
    for mode in MODES:
        label = "fwd" if mode == "forward" else "fwd+bwd"
        header += [
            f"ours {label} ms",
            f"keras {label} ms",
            f"keras/ours {label}",
            f"ours {label} MiB",
            f"keras {label} MiB",
        ]
    rows = []
    mib = 1024 * 1024
    for r in results:
        row = [str(r["length"]), f"{r['attention_matrix_bytes'] / mib:.1f}"]
        for mode in MODES:
            row += [
                f"{r[f'ours_{mode}_ms']:.2f}",
                f"{r[f'keras_{mode}_ms']:.2f}",
                f"{r[f'{mode}_keras_over_ours']:.3f}",
                f"{r[f'ours_{mode}_peak_bytes'] / mib:.1f}",
                f"{r[f'keras_{mode}_peak_bytes'] / mib:.1f}",
            ]
        rows.append(row)
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]

    def line(columns):
        return "  ".join(str(c).rjust(w) for c, w in zip(columns, widths))

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def plot(results, path, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = [r["length"] for r in results]
    figure, (time_axes, memory_axes) = plt.subplots(1, 2, figsize=(11, 4.5))
    styles = {"ours": "-", "keras": "--"}
    for kind in KINDS:
        for mode, marker in (("forward", "o"), ("backward", "s")):
            label = f"{kind} {'forward' if mode == 'forward' else 'forward+backward'}"
            time_axes.plot(
                lengths,
                [r[f"{kind}_{mode}_ms"] for r in results],
                styles[kind],
                marker=marker,
                label=label,
            )
            memory_axes.plot(
                lengths,
                [r[f"{kind}_{mode}_peak_bytes"] / 2**20 for r in results],
                styles[kind],
                marker=marker,
                label=label,
            )
    memory_axes.plot(
        lengths,
        [r["attention_matrix_bytes"] / 2**20 for r in results],
        ":",
        color="grey",
        label="one attention matrix (analytic)",
    )
    for axes, ylabel in (
        (time_axes, "milliseconds per step"),
        (memory_axes, "peak MiB allocated by the step"),
    ):
        axes.set_xscale("log", base=2)
        axes.set_yscale("log")
        axes.set_xlabel("sequence length T")
        axes.set_ylabel(ylabel)
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="128,256,512,1024,2048,4096")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument(
        "--causal", action="store_true", help="causal self-attention in both layers"
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="timed rounds per layer and mode (median)"
    )
    parser.add_argument("--steps", type=int, default=2, help="steps per round")
    parser.add_argument(
        "--quick", action="store_true", help="lengths 32 and 64, 3 rounds of 1 step"
    )
    parser.add_argument("--threads", type=int, default=0, help="TensorFlow threads (0: all)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument(
        "--output",
        default=None,
        help=f"JSON path (default {RESULTS}; with --quick, attention_scaling_quick.json)",
    )
    parser.add_argument(
        "--plot", default=None, help=f"PNG path (default {PLOT}; with --quick, none)"
    )
    args = parser.parse_args(argv)
    set_tensorflow_threads(args.threads)
    if args.quick:
        args.lengths, args.rounds, args.steps = "32,64", 3, 1
    if args.output is None:
        args.output = RESULTS.replace(".json", "_quick.json") if args.quick else RESULTS
    if args.plot is None and not args.quick:
        args.plot = PLOT
    if not memory_info_works():
        sys.exit(
            "tf.config.experimental.get_memory_info('CPU:0') does not count allocations here; "
            "this benchmark needs it for peak memory."
        )
    lengths = [int(length) for length in args.lengths.split(",")]
    print(
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, {os.cpu_count()} CPUs, "
        f"threads {args.threads or 'all'}, batch {args.batch}, d {args.d_model}, {args.heads} "
        "heads, "
        f"{'causal' if args.causal else 'no mask'}, {args.rounds} rounds x {args.steps} steps, "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    started = time.perf_counter()
    results = []
    for length in lengths:
        print(f"T={length} ...", end=" ", flush=True)
        length_started = time.perf_counter()
        result = benchmark_length(length, args, args.seed + length)
        results.append(result)
        print(
            f"fwd+bwd ours {result['ours_backward_ms']:.1f} ms, keras "
            f"{result['keras_backward_ms']:.1f} ms "
            f"({time.perf_counter() - length_started:.0f} s)",
            flush=True,
        )
    print()
    print(format_table(results))
    print(
        "\nms: median per step. keras/ours > 1: ours is faster. MiB: peak bytes the step "
        "allocates "
        f"on top of what was live before it (TensorFlow's CPU allocator count).\n"
        f"total {time.perf_counter() - started:.0f} s, load average now {os.getloadavg()[0]:.2f}"
    )
    report = {
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "threads": args.threads,
        "rounds": args.rounds,
        "steps": args.steps,
        "memory": "tf.config.experimental.get_memory_info('CPU:0'): peak during the step minus "
        "current before",
        "load_average_at_end": os.getloadavg()[0],
        "results": results,
    }
    write_json(args.output, report)
    print(f"wrote {args.output}")
    if args.plot:
        plot(
            results,
            args.plot,
            f"One attention layer, batch {args.batch}, d {args.d_model}, {args.heads} heads"
            f"{', causal' if args.causal else ''} ({os.cpu_count()} CPUs)",
        )
        print(f"wrote {args.plot}")
    return report


if __name__ == "__main__":
    main()
