"""Training-step speed of our TransformerEncoderBlock against the same block
built from Keras' own layers.

For every configuration the benchmark builds

* **ours**: `keras_transformer.layers.TransformerEncoderBlock` (post-norm,
  dropout 0, relu feed-forward), and
* **keras**: `reference_block.KerasReferenceEncoderBlock`, the same block
  written with `keras.layers.MultiHeadAttention`, `keras.layers.Dense` and
  `keras.layers.LayerNormalization`,

copies the weights of ours into the reference, checks that both compute the
same outputs and gradients, then times one training-style step: inside a
`tf.function`, a `tf.GradientTape` forward pass and the gradient of a loss with
respect to the inputs and every trainable weight. The step is timed as a plain
graph (`jit_compile=False`, the default) and, unless `--no-xla`, compiled with
XLA (`jit_compile=True`) as an extra column.

Timing (`bench_common.time_interleaved`) alternates the two in one process
(ours, keras, keras, ours, ...) after a warm-up, over `--rounds` rounds of
`--steps` steps each; the table shows the median milliseconds per step and
`ratio = keras_ms / ours_ms` (>= 1.0 means ours is not slower).

With a padding mask, the reference passes Keras MultiHeadAttention the mask it
would build itself from `mask_zero=True` inputs (query mask AND key mask,
`[B, T, S]`). Keras gives a padded query row uniform attention weights where
ours gives zero weights, so outputs are compared at real tokens only and the
loss only sums real tokens (which makes the weight gradients comparable too).

Usage (TensorFlow backend; the benchmark uses tf.function and GradientTape):

    .venv/bin/python benchmarks/layer_speed.py
    .venv/bin/python benchmarks/layer_speed.py --quick
    .venv/bin/python benchmarks/layer_speed.py --rounds 9 \
        --output benchmarks/results/layer_speed.json
"""

import argparse
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if os.environ.setdefault("KERAS_BACKEND", "tensorflow") != "tensorflow":
    sys.exit("benchmarks/layer_speed.py needs KERAS_BACKEND=tensorflow.")

import keras
import numpy as np
import tensorflow as tf
from bench_common import (
    paired_ratio,
    time_interleaved,
    write_json,
)
from reference_block import (
    KerasReferenceEncoderBlock,
    copy_block_weights,
    matching_encoder_block,
    perturb_biases_and_norms,
)

from keras_transformer.layers import padding_mask as make_padding_mask

OUTPUT_TOLERANCE = 1e-4  # max |ours - keras| on outputs at real tokens
# Per gradient, ||ours - keras|| / max(1, ||keras||) (the key bias gradient is 0
# up to rounding: softmax ignores a per-row constant). Not elementwise: a ReLU input
# within float32 rounding of 0 can flip sides between the two implementations, which
# changes a few gradient entries by O(0.1) but a whole gradient's norm by far less than
# this tolerance; a real mismatch (mask, scale, layout) is off by O(1).
GRADIENT_TOLERANCE = 1e-2


def make_step(block, jit_compile):
    """A training-style step: loss and gradients w.r.t. inputs and all weights."""
    variables = list(block.trainable_variables)

    @tf.function(jit_compile=jit_compile)
    def step(inputs, padding_mask, upstream):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            outputs = block(inputs, padding_mask=padding_mask)
            # `upstream` is a fixed random cotangent, zero at padded tokens.
            loss = tf.reduce_sum(outputs * upstream)
        gradients = tape.gradient(loss, [inputs, *variables])
        return loss, outputs, gradients

    @tf.function(jit_compile=jit_compile)
    def step_unmasked(inputs, upstream):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            outputs = block(inputs)
            loss = tf.reduce_sum(outputs * upstream)
        gradients = tape.gradient(loss, [inputs, *variables])
        return loss, outputs, gradients

    def run(inputs, padding_mask, upstream):
        if padding_mask is None:
            return step_unmasked(inputs, upstream)
        return step(inputs, padding_mask, upstream)

    return run


def make_inputs(config, seed):
    rng = np.random.default_rng(seed)
    batch, length, model_dim = config["batch"], config["seq"], config["d_model"]
    inputs = rng.standard_normal((batch, length, model_dim)).astype("float32")
    upstream = rng.standard_normal((batch, length, model_dim)).astype("float32")
    padding_mask = None
    if config["mask"]:
        # Token ids as from a padded batch: each sequence keeps a random length
        # in [seq/2, seq], i.e. ~25% padding (id 0) on average, at least one real token.
        lengths = rng.integers(max(1, length // 2), length + 1, size=batch)
        token_ids = rng.integers(1, 1000, size=(batch, length))
        token_ids[np.arange(length)[None, :] >= lengths[:, None]] = 0
        padding_mask = make_padding_mask(tf.constant(token_ids, "int32"))
        upstream = upstream * np.asarray(padding_mask, "float32")[..., None]
    return tf.constant(inputs), padding_mask, tf.constant(upstream)


def check_same_function(ours_result, keras_result, padding_mask, label):
    """Asserts equal outputs (at real tokens) and equal gradients; returns the max errors."""
    _, ours_out, ours_grads = ours_result
    _, keras_out, keras_grads = keras_result
    ours_out, keras_out = np.asarray(ours_out), np.asarray(keras_out)
    if padding_mask is not None:
        real = np.asarray(padding_mask)
        ours_out, keras_out = ours_out[real], keras_out[real]
    output_error = float(np.max(np.abs(ours_out - keras_out)))
    if not output_error <= OUTPUT_TOLERANCE:
        raise AssertionError(f"{label}: outputs differ by {output_error:.3g} > {OUTPUT_TOLERANCE}")
    gradient_error = 0.0
    for index, (a, b) in enumerate(zip(ours_grads, keras_grads)):
        a, b = np.asarray(a), np.asarray(b)
        error = float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1.0))
        if not error <= GRADIENT_TOLERANCE:
            raise AssertionError(
                f"{label}: gradient {index} (shape {a.shape}) differs by {error:.3g} > "
                f"{GRADIENT_TOLERANCE}"
            )
        gradient_error = max(gradient_error, error)
    return output_error, gradient_error


def benchmark_config(config, modes, rounds, steps, warmup, seed):
    keras.utils.set_random_seed(seed)
    shape = (config["batch"], config["seq"], config["d_model"])
    ours = matching_encoder_block(config["heads"], config["ff"], name="ours")
    ours.build(shape)
    reference = KerasReferenceEncoderBlock(config["heads"], config["ff"], name="keras")
    reference.build(shape)
    perturb_biases_and_norms(ours, seed + 1)
    copy_block_weights(ours, reference)
    inputs, padding_mask, upstream = make_inputs(config, seed)
    args = (inputs, padding_mask, upstream)

    result = dict(config)
    result["padding_fraction"] = (
        0.0 if padding_mask is None else float(1.0 - np.mean(np.asarray(padding_mask)))
    )
    for mode in modes:
        jit = mode == "xla"
        implementations = {"ours": make_step(ours, jit), "keras": make_step(reference, jit)}
        # Sanity before timing: the same function, forward and backward.
        output_error, gradient_error = check_same_function(
            implementations["ours"](*args),
            implementations["keras"](*args),
            padding_mask,
            f"{config['name']} [{mode}]",
        )
        seconds = time_interleaved(
            {name: lambda step=step: step(*args) for name, step in implementations.items()},
            rounds,
            calls=steps,
            warmup=warmup,
            wait=lambda result: result[0].numpy(),
        )
        times = {
            name: [1000.0 * s for s in rounds_seconds] for name, rounds_seconds in seconds.items()
        }
        ours_ms = statistics.median(times["ours"])
        keras_ms = statistics.median(times["keras"])
        result[mode] = {
            "ours_ms": ours_ms,
            "keras_ms": keras_ms,
            "ratio": keras_ms / ours_ms,
            "paired_ratio": paired_ratio(times["keras"], times["ours"]),
            "ours_rounds_ms": times["ours"],
            "keras_rounds_ms": times["keras"],
            "max_output_error": output_error,
            "max_relative_gradient_error": gradient_error,
        }
    return result


def configurations(quick):
    if quick:
        base = dict(batch=8, seq=32)
        sizes = [(64, 4, 256)]
    else:
        base = dict(batch=32, seq=128)
        sizes = [(128, 4, 512), (128, 8, 512), (256, 4, 1024), (256, 8, 1024)]
    configs = []
    for d_model, heads, ff in sizes:
        for mask in (False, True):
            name = f"b{base['batch']} t{base['seq']} d{d_model} h{heads} ff{ff}" + (
                " pad" if mask else ""
            )
            configs.append(dict(name=name, d_model=d_model, heads=heads, ff=ff, mask=mask, **base))
    return configs


def format_row(columns, widths):
    return "  ".join(
        str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(columns, widths))
    )


def print_table(results, modes):
    header = ["config"]
    for mode in modes:
        header += [f"ours ms [{mode}]", f"keras ms [{mode}]", f"ratio [{mode}]", f"paired [{mode}]"]
    rows = []
    for result in results:
        row = [result["name"]]
        for mode in modes:
            r = result[mode]
            row += [
                f"{r['ours_ms']:.2f}",
                f"{r['keras_ms']:.2f}",
                f"{r['ratio']:.3f}",
                f"{r['paired_ratio']:.3f}",
            ]
        rows.append(row)
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows)]
    print()
    print(format_row(header, widths))
    print(format_row(["-" * w for w in widths], widths))
    for row in rows:
        print(format_row(row, widths))
    print(
        "\nms: median per step over rounds. ratio = keras ms / ours ms; >= 1.0 means ours is not "
        "slower.\n"
        "paired = median over rounds of (keras ms / ours ms) within the round (robust to load "
        "drift)."
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="timed rounds per implementation (median taken, at least 7 advised); default 9",
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="training steps per round; default 3"
    )
    parser.add_argument(
        "--warmup", type=int, default=2, help="untimed steps per implementation first"
    )
    parser.add_argument(
        "--quick", action="store_true", help="one small size (runs in well under a minute)"
    )
    parser.add_argument(
        "--no-xla", dest="xla", action="store_false", help="skip the jit_compile=True (XLA) column"
    )
    parser.add_argument(
        "--only",
        default=None,
        help="run only configurations whose name contains this text (e.g. 'd256 h8')",
    )
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--output", default=None, help="write the results as JSON to this path")
    args = parser.parse_args(argv)
    rounds = args.rounds or 9
    steps = args.steps or 3
    if rounds < 1 or steps < 1:
        parser.error("--rounds and --steps must be positive")
    modes = ["graph"] + (["xla"] if args.xla else [])
    configs = [c for c in configurations(args.quick) if args.only is None or args.only in c["name"]]
    if not configs:
        parser.error(f"no configuration matches --only {args.only!r}")

    print(
        f"TensorFlow {tf.__version__}, Keras {keras.__version__}, {os.cpu_count()} CPUs, "
        f"modes {modes}, {rounds} rounds x {steps} steps, warm-up {args.warmup}, "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    results = []
    started = time.perf_counter()
    for index, config in enumerate(configs, 1):
        print(f"[{index}/{len(configs)}] {config['name']} ...", end=" ", flush=True)
        config_started = time.perf_counter()
        result = benchmark_config(config, modes, rounds, steps, args.warmup, args.seed + index)
        results.append(result)
        summary = ", ".join(
            f"{mode}: ours {result[mode]['ours_ms']:.1f} ms, keras {result[mode]['keras_ms']:.1f} "
            "ms, "
            f"ratio {result[mode]['ratio']:.3f} (paired {result[mode]['paired_ratio']:.3f})"
            for mode in modes
        )
        print(f"{summary} ({time.perf_counter() - config_started:.0f} s)", flush=True)
    print_table(results, modes)
    print(f"total {time.perf_counter() - started:.0f} s, load average now {os.getloadavg()[0]:.2f}")

    if args.output:
        report = {
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "rounds": rounds,
            "steps": steps,
            "warmup": args.warmup,
            "modes": modes,
            "load_average_at_end": os.getloadavg()[0],
            "results": results,
        }
        write_json(args.output, report)
        print(f"wrote {args.output}")
    return results


if __name__ == "__main__":
    main()
