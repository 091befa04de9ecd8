"""Our MultiHeadAttention's two paths on this machine's device: the explicit
float32 softmax (`compute_attention`) against `keras.ops.dot_product_attention`
(the fused path `MultiHeadAttention.attend` takes by default only on JAX with
a GPU or TPU), on the backend `KERAS_BACKEND` names.

Both paths run on the same layer (the private switch `_fused_attention`
forces one or the other), compiled (`tf.function` on TensorFlow, `jax.jit` on
JAX), timed interleaved (`bench_common.time_interleaved`) after a warm-up:

* **layer**: self-attention over `[batch, T, d]`, forward alone and forward
  plus the gradient of `sum(output**2)` with respect to the weights, without
  a mask and with a padding mask (about a quarter padded);
* **decode** (TensorFlow only, the backend the exported translator runs on): a
  `TransformerDecoderBlock` called one token at a time with its caches and
  projection matrices, as `Seq2SeqTransformer.decode_step` calls it, in a
  `tf.while_loop`, `--steps` tokens against a source of 64 positions, at
  batch 1 and 32.

The table shows median ms and `fused / explicit` (> 1: the fused op is slower).

Usage:

    .venv/bin/python benchmarks/fused_attention_cpu.py
    KERAS_BACKEND=jax .venv/bin/python benchmarks/fused_attention_cpu.py
"""

import argparse
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
from bench_common import (
    paired_ratio,
    time_interleaved,
)

from keras_transformer.layers import (
    MultiHeadAttention,
    TransformerDecoderBlock,
)

BACKEND = keras.backend.backend()
PATHS = {"explicit": False, "fused": True}


def compiled(function):
    """`function(weights, *inputs)` compiled for the backend.

    Returns a callable that waits for its result.
    """
    if BACKEND == "jax":
        import jax

        step = jax.jit(function)
        return lambda *args: jax.block_until_ready(step(*args))
    import tensorflow as tf

    step = tf.function(function)
    return lambda *args: tf.nest.map_structure(lambda t: t.numpy(), step(*args))


def layer_step(layer, fused, grad, padded):
    """One forward (and backward) of `layer` on the path `fused` chooses.

    Returned as a pure function of the layer's weights.
    """

    def forward(weights, x, mask):
        layer._fused_attention = fused
        masks = dict(query_mask=mask, value_mask=mask) if padded else {}
        output, _ = layer.stateless_call(weights, [], x, x, **masks)
        return keras.ops.sum(output * output)

    if not grad:
        return compiled(forward)
    if BACKEND == "jax":
        import jax

        return compiled(jax.grad(forward))
    import tensorflow as tf

    def gradient(weights, x, mask):
        weights = [tf.convert_to_tensor(w) for w in weights]
        with tf.GradientTape() as tape:
            tape.watch(weights)
            loss = forward(weights, x, mask)
        return tape.gradient(loss, weights)

    return compiled(gradient)


def time_paths(steps_of, rounds, calls):
    seconds = time_interleaved(steps_of, rounds, calls=calls, warmup=2)
    ms = {name: 1000.0 * statistics.median(values) for name, values in seconds.items()}
    return ms, paired_ratio(seconds["fused"], seconds["explicit"])


def layer_rows(lengths, batch, rounds):
    rng = np.random.default_rng(0)
    for length in lengths:
        layer = MultiHeadAttention(num_heads=4, key_dim=64)
        x = rng.standard_normal((batch, length, 256)).astype("float32")
        lengths_kept = rng.integers(length // 2, length + 1, size=batch)
        mask = np.arange(length)[None, :] < lengths_kept[:, None]
        layer(x, x)
        weights = [v.value for v in layer.trainable_variables]
        for grad in (False, True):
            for padded in (False, True):
                steps = {
                    name: layer_step(layer, fused, grad, padded) for name, fused in PATHS.items()
                }
                ms, ratio = time_paths(
                    {
                        name: lambda step=step: step(weights, x, mask)
                        for name, step in steps.items()
                    },
                    rounds,
                    3,
                )
                what = f"layer b{batch} t{length} d256 h4 {'fwd+grad' if grad else 'forward'}"
                yield what + (" pad" if padded else ""), ms, ratio


def decode_rows(batches, steps, rounds):
    import tensorflow as tf

    rng = np.random.default_rng(1)
    for batch in batches:
        block = TransformerDecoderBlock(num_heads=4, intermediate_dim=1024)
        source = rng.standard_normal((batch, 64, 256)).astype("float32")
        source_mask = np.arange(64)[None, :] < rng.integers(32, 65, size=batch)[:, None]
        first = rng.standard_normal((batch, 1, 256)).astype("float32")
        block(first, source)

        def decoder(fused):
            @tf.function
            def decode(token, source):
                for attention in (block.self_attention, block.cross_attention):
                    attention._fused_attention = fused
                cross = block.compute_cross_attention_cache(source)
                matrices = block.compute_projection_matrices()
                cache = block.initialize_self_attention_cache(batch, steps)

                def body(index, cache, token):
                    token, cache = block(
                        token,
                        encoder_padding_mask=source_mask,
                        self_attention_cache=cache,
                        self_attention_cache_update_index=index,
                        cross_attention_cache=cross,
                        projection_matrices=matrices,
                    )
                    return index + 1, cache, token

                return tf.while_loop(lambda index, *_: index < steps, body, (0, cache, token))[2]

            return lambda: decode(first, source).numpy()

        ms, ratio = time_paths({name: decoder(fused) for name, fused in PATHS.items()}, rounds, 2)
        yield f"cached call b{batch} S64 {steps} steps (tf.while_loop)", ms, ratio


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="128,512", help="sequence lengths of the layer rows")
    parser.add_argument("--batch", type=int, default=4, help="batch of the layer rows")
    parser.add_argument(
        "--decode-batches", default="1,32", help="batches of the decode rows (TensorFlow)"
    )
    parser.add_argument("--steps", type=int, default=32, help="tokens decoded per decode row")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (median)")
    args = parser.parse_args(argv)
    rows = list(layer_rows([int(n) for n in args.lengths.split(",")], args.batch, args.rounds))
    if BACKEND == "tensorflow":
        rows += decode_rows(
            [int(n) for n in args.decode_batches.split(",")], args.steps, args.rounds
        )
    print(f"\nbackend {BACKEND}, keras {keras.__version__}")
    width = max(len(what) for what, _, _ in rows)
    print(f"{'':{width}}  explicit ms  fused ms  fused/explicit (paired)")
    for what, ms, ratio in rows:
        print(f"{what:{width}}  {ms['explicit']:11.2f}  {ms['fused']:8.2f}  {ratio:.3f}")


if __name__ == "__main__":
    main()
