"""Training-step speed on the JAX backend (made for a GPU; runs on CPU too):
our TransformerEncoderBlock stack, and a decoder-only TransformerDecoderBlock
stack, against the same stacks from Keras' layers, under float32,
mixed_bfloat16 and mixed_float16, plus a Seq2SeqTransformer training-step
check.

Part 1, block stacks. For every configuration (batch, sequence length,
d_model, heads, feed-forward width, number of blocks) and every dtype policy
the benchmark builds

* **ours**: `keras_transformer.layers.TransformerEncoderBlock` x N (post-norm,
  dropout 0, relu feed-forward); for the `decoder` rows,
  `TransformerDecoderBlock` x N built without an encoder sequence (causal
  self-attention and feed-forward, post-norm),
* **keras**: `reference_block.KerasReferenceEncoderBlock` x N, the same block
  from `keras.layers.MultiHeadAttention`, `Dense` and `LayerNormalization`, with
  Keras' default attention path (on a GPU with bf16/f16 inputs Keras picks
  cuDNN's fused "flash" attention through `jax.nn.dot_product_attention`);
  for the `decoder` rows, `KerasReferenceDecoderOnlyBlock`, the same with
  `use_causal_mask=True`,
* **keras_noflash** (unless `--no-noflash`): the same reference built after
  `keras.config.disable_flash_attention()`, i.e. plain XLA attention. (Passing
  `flash_attention=False` to Keras' layer does not disable it in Keras 3.15:
  the layer computes `flash_attention or is_flash_attention_enabled()`, and the
  global default is None = "auto".)

Weights of ours are copied into the references, and one step of each is
checked against ours (outputs and weight gradients, relative norms). The timed
step is `jax.jit(jax.value_and_grad(loss))` around `Layer.stateless_call`:
forward pass, `loss = sum(float32(outputs) * upstream)` with a fixed random
cotangent, and gradients with respect to every trainable weight; results are
blocked on (`jax.block_until_ready`). Timing (`bench_common.time_interleaved`)
is interleaved (the order of the implementations rotates from round to round,
and reverses every other full rotation) after a warm-up;
the table shows median ms per step, `ratio = keras_ms / ours_ms` (>= 1 means
ours is not slower), tokens/s, which attention each stack ran ("ours attn":
`fused` when our layer computed through `keras.ops.dot_product_attention`,
counted while the step is traced, `cudnn` when that became cuDNN's fused
attention in the compiled step, `explicit` otherwise; "keras attn": `cudnn` or
`xla`), and model FLOPs utilization:

    model FLOPs per step = 3 x forward matmul FLOPs
        forward matmul FLOPs per block = 2*B*T*(4*d*d + 2*d*ff) + 4*B*T*T*d
    (the decoder rows too: the causal mask's skipped half is counted)
    MFU = (model FLOPs / step time) / measured matmul ceiling

where the ceiling is the best rate of a large square `jnp.matmul` of the
policy's compute dtype on the same device (float32 at JAX's default precision,
which on recent NVIDIA GPUs may use TF32; the HIGHEST-precision float32 rate is
recorded too). XLA's own FLOP count of each compiled step is recorded as
`xla_flops`, but on GPU it misses matmuls lowered to cuBLAS/cuDNN calls, so
it is not used for MFU.

Part 2, Seq2SeqTransformer: `keras_transformer.models.Seq2SeqTransformer`
(d_model 256, 3+3 layers, 4 heads, ff 1024, vocabulary 8000, sequence 64,
batch 64, dropout 0.1) trained on one fixed padded random batch under each
policy: a training step is forward, masked label-smoothed cross-entropy,
gradients and an Adam update via `stateless_apply`; one jitted call runs 10
such steps in a `lax.fori_loop` (so per-step host dispatch of the hundreds of
state arrays is not what is timed), calls are interleaved across policies. Reports
whether every loss and gradient was finite, the first and last loss, and the
median time per step.
Under mixed_float16 the loss is multiplied by a static loss scale (2**10)
and the gradients divided by it (no dynamic loss scaling).

Usage (JAX backend; no TensorFlow needed):

    KERAS_BACKEND=jax python benchmarks/gpu_speed_jax.py --quick
    KERAS_BACKEND=jax python benchmarks/gpu_speed_jax.py --output results.json
"""

import argparse
import math
import os
import platform
import statistics
import sys
import time
import traceback

if os.environ.setdefault("KERAS_BACKEND", "jax") != "jax":
    sys.exit("benchmarks/gpu_speed_jax.py needs KERAS_BACKEND=jax.")

import jax
import jax.numpy as jnp
import keras
import numpy as np
from bench_common import (
    paired_ratio,
    time_interleaved,
    write_json,
)
from reference_block import (
    LAYER_NORM_EPSILON,
    KerasReferenceEncoderBlock,
    copy_block_weights,
    matching_encoder_block,
    perturb_biases_and_norms,
)

from keras_transformer.layers import TransformerDecoderBlock
from keras_transformer.models.seq2seq import Seq2SeqTransformer
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy

POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
COMPUTE_DTYPE = {"float32": "float32", "mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}
# Relative-norm agreement with ours expected from each policy's rounding;
# a real mismatch (mask, scale, layout) is off by O(1). Reported, not fatal.
TOLERANCE = {"float32": 1e-2, "mixed_bfloat16": 8e-2, "mixed_float16": 2e-2}
FLOAT16_LOSS_SCALE = 2.0**10


# --- the stacks ---------------------------------------------------------------------


class KerasReferenceDecoderOnlyBlock(KerasReferenceEncoderBlock):
    """The post-norm decoder-only block from Keras layers: the encoder
    reference with causal self-attention (Keras' `is_causal` fused path)."""

    def call(self, inputs, training=None):
        attended = self.attention(inputs, inputs, use_causal_mask=True, training=training)
        x = self.attention_norm(inputs + self.attention_dropout(attended, training=training))
        transformed = self.output_dense(self.intermediate_dense(x))
        return self.feed_forward_norm(x + self.feed_forward_dropout(transformed, training=training))


def our_block(kind, heads, ff, **kwargs):
    """Ours for a row of `kind` ("encoder" or "decoder"), the reference's architecture."""
    if kind == "encoder":
        return matching_encoder_block(heads, ff, **kwargs)
    return TransformerDecoderBlock(
        heads,
        ff,
        dropout=0.0,
        activation="relu",
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        normalize_first=False,
        **kwargs,
    )


REFERENCE_BLOCK = {"encoder": KerasReferenceEncoderBlock, "decoder": KerasReferenceDecoderOnlyBlock}


class BlockStack(keras.layers.Layer):
    """Applies a list of blocks in order (so one `stateless_call` runs them all)."""

    def __init__(self, blocks, **kwargs):
        super().__init__(**kwargs)
        self.blocks = blocks

    def build(self, input_shape):
        for block in self.blocks:
            block.build(input_shape)

    def call(self, inputs, training=None):
        x = inputs
        for block in self.blocks:
            x = block(x, training=training)
        return x


def build_stacks(config, policy, variants, seed):
    keras.utils.set_random_seed(seed)
    shape = (config["batch"], config["seq"], config["d_model"])
    ours = BlockStack(
        [
            our_block(
                config["kind"], config["heads"], config["ff"], dtype=policy, name=f"ours_{index}"
            )
            for index in range(config["blocks"])
        ],
        dtype=policy,
        name="ours",
    )
    ours.build(shape)
    perturb_biases_and_norms(ours, seed + 1)
    stacks = {"ours": ours}
    for variant in variants:
        if variant == "ours":
            continue
        if variant == "keras_noflash":
            keras.config.disable_flash_attention()
        try:
            reference = BlockStack(
                [
                    REFERENCE_BLOCK[config["kind"]](
                        config["heads"], config["ff"], dtype=policy, name=f"keras_{index}"
                    )
                    for index in range(config["blocks"])
                ],
                dtype=policy,
                name=variant,
            )
            # Keras' MultiHeadAttention is created (and reads the global setting) in build.
            reference.build(shape)
        finally:
            keras.config.enable_flash_attention()  # back to Keras' default (None = auto)
        if variant == "keras_noflash":
            assert all(block.attention._flash_attention is False for block in reference.blocks)
        for ours_block, reference_block in zip(ours.blocks, reference.blocks):
            copy_block_weights(ours_block, reference_block)
        stacks[variant] = reference
    return stacks


# --- steps ----------------------------------------------------------------------------


def make_stack_step(stack):
    def loss_fn(trainable, non_trainable, inputs, upstream):
        outputs, _ = stack.stateless_call(trainable, non_trainable, inputs, training=True)
        loss = jnp.sum(outputs.astype("float32") * upstream)
        return loss, outputs

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def step(trainable, non_trainable, inputs, upstream):
        (loss, outputs), grads = grad_fn(trainable, non_trainable, inputs, upstream)
        return loss, outputs, grads

    return step


def stack_arguments(stack, inputs, upstream):
    trainable = [jnp.asarray(v.value) for v in stack.trainable_variables]
    non_trainable = [jnp.asarray(v.value) for v in stack.non_trainable_variables]
    return (trainable, non_trainable, inputs, upstream)


def compile_step(fn, args, donate=()):
    """The compiled step and what it holds: XLA's FLOP count, whether cuDNN's
    fused attention is in it, and how many times the trace called
    `keras.ops.dot_product_attention` (ours' fused path; Keras' own layers call
    it from inside Keras, not through `keras.ops`)."""
    fused_calls = []
    dot_product_attention = keras.ops.dot_product_attention

    def counting(*args, **kwargs):
        fused_calls.append(1)
        return dot_product_attention(*args, **kwargs)

    keras.ops.dot_product_attention = counting
    try:
        lowered = jax.jit(fn, donate_argnums=donate).lower(*args)
    finally:
        keras.ops.dot_product_attention = dot_product_attention
    compiled = lowered.compile()
    info = {"fused_attention_calls": len(fused_calls)}
    try:
        cost = compiled.cost_analysis()
        if isinstance(cost, (list, tuple)):
            cost = cost[0] if cost else {}
        info["xla_flops"] = float(cost.get("flops", float("nan")))
    except Exception as error:  # cost analysis is optional
        info["xla_flops_error"] = repr(error)
    try:
        text = compiled.as_text()
        info["cudnn_fused_attention"] = "cudnn$fmha" in text or "__cudnn$fmha" in lowered.as_text()
    except Exception as error:
        info["hlo_text_error"] = repr(error)
    return compiled, info


def relative_error(a, b):
    """||a - b|| / max(||b||, 1). The floor of 1 (as in layer_speed.py) matters for
    the key bias, whose gradient is 0 up to rounding (softmax ignores a per-row
    constant); every other gradient here has a norm far above 1."""
    a = np.asarray(a, dtype="float64")
    b = np.asarray(b, dtype="float64")
    return float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1.0))


def model_flops(config):
    b, t, d, ff = config["batch"], config["seq"], config["d_model"], config["ff"]
    forward_per_block = 2 * b * t * (4 * d * d + 2 * d * ff) + 4 * b * t * t * d
    return 3 * forward_per_block * config["blocks"]


# --- matmul ceiling -------------------------------------------------------------------


def matmul_ceiling(size, dtype, precision=None, repeats=5, calls=10):
    key_a, key_b = jax.random.split(jax.random.PRNGKey(0))
    a = jax.random.normal(key_a, (size, size), dtype=dtype)
    b = jax.random.normal(key_b, (size, size), dtype=dtype)
    fn = jax.jit(lambda x, y: jnp.matmul(x, y, precision=precision))
    for _ in range(3):
        jax.block_until_ready(fn(a, b))
    times = time_interleaved(
        {"matmul": lambda: fn(a, b)}, repeats, calls=calls, wait=jax.block_until_ready
    )["matmul"]
    seconds = min(times)
    return {
        "size": size,
        "dtype": dtype,
        "precision": str(precision),
        "ms": seconds * 1e3,
        "flops_per_s": 2.0 * size**3 / seconds,
    }


def measure_ceilings(size):
    ceilings = {}
    for name, dtype, precision in (
        ("bfloat16", "bfloat16", None),
        ("float16", "float16", None),
        ("float32", "float32", None),
        ("float32_highest", "float32", jax.lax.Precision.HIGHEST),
    ):
        ceilings[name] = matmul_ceiling(size, dtype, precision)
        print(
            f"  matmul {size}^3 {name}: {ceilings[name]['flops_per_s'] / 1e12:.1f} TFLOP/s "
            f"({ceilings[name]['ms']:.2f} ms)",
            flush=True,
        )
    return ceilings


# --- part 1 ---------------------------------------------------------------------------


def benchmark_stack(
    config, policy, variants, rounds, min_steps, round_seconds, warmup, seed, ceiling
):
    stacks = build_stacks(config, policy, variants, seed)
    rng = np.random.default_rng(seed + 2)
    shape = (config["batch"], config["seq"], config["d_model"])
    inputs = jnp.asarray(rng.standard_normal(shape).astype("float32"))
    upstream = jnp.asarray(rng.standard_normal(shape).astype("float32"))

    compiled, arguments, infos, failed = {}, {}, {}, {}
    for name in variants:
        arguments[name] = stack_arguments(stacks[name], inputs, upstream)
        started = time.perf_counter()
        try:
            compiled[name], infos[name] = compile_step(
                make_stack_step(stacks[name]), arguments[name]
            )
        except Exception as error:
            if name == "ours":
                raise
            # A reference that cannot run here (e.g. Keras' float16 attention on CPU) is
            # reported and left out; the others are still measured.
            failed[name] = {"error": f"{type(error).__name__}: {error}"}
            print(f"[{name} failed: {failed[name]['error'][:200]}]", end=" ", flush=True)
            continue
        infos[name]["compile_s"] = time.perf_counter() - started
    variants = [name for name in variants if name in compiled]

    # Same function check: one step of each against ours.
    results = {name: jax.device_get(compiled[name](*arguments[name])) for name in variants}
    checks = {}
    tolerance = TOLERANCE[policy]
    for name in variants:
        loss, outputs, grads = results[name]
        finite = bool(np.isfinite(loss)) and all(np.all(np.isfinite(np.asarray(g))) for g in grads)
        entry = {"finite": finite}
        if name != "ours":
            _, ours_outputs, ours_grads = results["ours"]
            entry["output_rel_error"] = relative_error(outputs, ours_outputs)
            entry["max_grad_rel_error"] = max(
                relative_error(g, o) for g, o in zip(grads, ours_grads)
            )
            entry["agrees"] = (
                entry["output_rel_error"] <= tolerance and entry["max_grad_rel_error"] <= tolerance
            )
        checks[name] = entry

    # Warm-up, then choose steps per round so a round lasts about round_seconds.
    steps_of = {name: lambda name=name: compiled[name](*arguments[name]) for name in variants}
    single = time_interleaved(steps_of, 1, warmup=warmup, wait=jax.block_until_ready)
    slowest_ms = 1000.0 * max(seconds[0] for seconds in single.values())
    steps = max(min_steps, min(50, math.ceil(round_seconds * 1000.0 / max(slowest_ms, 1e-3))))
    seconds = time_interleaved(steps_of, rounds, calls=steps, wait=jax.block_until_ready)
    times = {name: [1000.0 * s for s in seconds[name]] for name in variants}

    flops = model_flops(config)
    tokens = config["batch"] * config["seq"]
    result = {
        "policy": policy,
        "steps_per_round": steps,
        "model_flops_per_step": flops,
        "ceiling_flops_per_s": ceiling,
        "variants": dict(failed),
    }
    ours_ms = statistics.median(times["ours"])
    for name in variants:
        ms = statistics.median(times[name])
        achieved = flops / (ms / 1000.0)
        entry = {
            "ms": ms,
            "rounds_ms": times[name],
            "tokens_per_s": tokens / (ms / 1000.0),
            "model_flops_per_s": achieved,
            "mfu": achieved / ceiling,
            **infos[name],
            **checks[name],
        }
        if name != "ours":
            entry["ratio"] = ms / ours_ms  # keras_ms / ours_ms
            entry["paired_ratio"] = paired_ratio(times[name], times["ours"])
        result["variants"][name] = entry
    return result


def configurations(quick):
    """Encoder rows (named by their sizes), then decoder rows (names start with "decoder")."""
    if quick:
        tiny = dict(batch=4, seq=16, d_model=32, heads=4, ff=128, blocks=2)
        return [
            dict(name="b4 t16 d32 h4 ff128 x2", kind="encoder", **tiny),
            dict(name="decoder b4 t16 d32 h4 ff128 x2", kind="decoder", **tiny),
        ]
    configs = []
    for seq in (128, 512):
        for d_model in (256, 512):
            configs.append(
                dict(
                    name=f"b32 t{seq} d{d_model} h8 ff{4 * d_model} x2",
                    kind="encoder",
                    batch=32,
                    seq=seq,
                    d_model=d_model,
                    heads=8,
                    ff=4 * d_model,
                    blocks=2,
                )
            )
    for seq in (128, 512):
        configs.append(
            dict(
                name=f"decoder b32 t{seq} d512 h8 ff2048 x2",
                kind="decoder",
                batch=32,
                seq=seq,
                d_model=512,
                heads=8,
                ff=2048,
                blocks=2,
            )
        )
    return configs


# --- part 2 ---------------------------------------------------------------------------


def seq2seq_batch(config, seed):
    rng = np.random.default_rng(seed)
    batch, length, vocab = config["batch"], config["seq"], config["vocab"]

    def padded():
        ids = rng.integers(1, vocab, size=(batch, length)).astype("int32")
        lengths = rng.integers(max(2, length // 2), length + 1, size=batch)
        ids[np.arange(length)[None, :] >= lengths[:, None]] = 0
        return ids

    source, target = padded(), padded()
    # Decoder input: the target shifted right (id 1 stands in for [START]).
    decoder_input = np.concatenate([np.ones((batch, 1), "int32"), target[:, :-1]], axis=1)
    decoder_input[target == 0] = 0
    return {
        "source_ids": jnp.asarray(source),
        "target_ids": jnp.asarray(decoder_input),
    }, jnp.asarray(target)


def build_seq2seq(config, policy, seed):
    keras.utils.set_random_seed(seed)
    model = Seq2SeqTransformer(
        config["vocab"],
        config["vocab"],
        sequence_length=config["seq"],
        num_encoder_layers=config["layers"],
        num_decoder_layers=config["layers"],
        d_model=config["d_model"],
        num_heads=config["heads"],
        intermediate_dim=config["ff"],
        dropout=0.1,
        dtype=policy,
    )
    model.build()
    optimizer = keras.optimizers.Adam(learning_rate=config["learning_rate"])
    optimizer.build(model.trainable_variables)
    loss_object = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    scale = FLOAT16_LOSS_SCALE if policy == "mixed_float16" else 1.0

    def loss_fn(trainable, non_trainable, batch, labels):
        logits, non_trainable = model.stateless_call(trainable, non_trainable, batch, training=True)
        loss = loss_object(labels, logits)
        return loss * scale, (loss, non_trainable)

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def train_step(state, batch, labels):
        trainable, non_trainable, optimizer_variables = state
        (_, (loss, non_trainable)), grads = grad_fn(trainable, non_trainable, batch, labels)
        grads = [g.astype("float32") / scale for g in grads]
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(g)) for g in grads])) & jnp.isfinite(loss)
        trainable, optimizer_variables = optimizer.stateless_apply(
            optimizer_variables, grads, trainable
        )
        return loss, finite, (trainable, non_trainable, optimizer_variables)

    def train_steps(state, batch, labels, count):
        """`count` training steps inside one program; returns per-step losses."""

        def body(index, carry):
            state, losses, finite = carry
            loss, step_finite, state = train_step(state, batch, labels)
            return state, losses.at[index].set(loss), finite & step_finite

        state, losses, finite = jax.lax.fori_loop(
            0, count, body, (state, jnp.zeros((count,), "float32"), jnp.array(True))
        )
        return losses, finite, state

    state = (
        [jnp.asarray(v.value) for v in model.trainable_variables],
        [jnp.asarray(v.value) for v in model.non_trainable_variables],
        [jnp.asarray(v.value) for v in optimizer.variables],
    )
    parameters = int(sum(np.prod(v.shape) for v in model.trainable_variables))
    return train_steps, state, parameters


def benchmark_seq2seq(config, policies, rounds, steps_per_round, seed):
    batch, labels = seq2seq_batch(config, seed)
    runs = {}
    for policy in policies:
        try:
            step, state, parameters = build_seq2seq(config, policy, seed)
            started = time.perf_counter()
            compiled = (
                jax.jit(step, donate_argnums=0, static_argnums=3)
                .lower(state, batch, labels, steps_per_round)
                .compile()
            )
            runs[policy] = {
                "step": compiled,
                "state": state,
                "parameters": parameters,
                "compile_s": time.perf_counter() - started,
                "losses": [],
                "finite": [],
                "outputs": [],
            }
        except Exception as error:
            runs[policy] = {
                "error": f"{type(error).__name__}: {error}",
                "traceback": traceback.format_exc(limit=6),
            }
            print(f"  seq2seq {policy}: FAILED to build/compile: {error}", flush=True)

    live = [p for p in policies if "step" in runs[p]]

    def one_round(policy):
        """One call of `steps_per_round` training steps; keeps its losses on the device
        until the timing is done, so reading them back is not timed."""
        run = runs[policy]
        losses, finite, run["state"] = run["step"](run["state"], batch, labels)
        run["outputs"].append((losses, finite))
        return run["state"]

    # The warm-up round trains too, and is in the loss curve.
    seconds = (
        time_interleaved(
            {policy: lambda policy=policy: one_round(policy) for policy in live},
            rounds,
            warmup=1,
            wait=jax.block_until_ready,
        )
        if live
        else {}
    )
    for policy in live:
        run = runs[policy]
        run["times"] = [1000.0 * s / steps_per_round for s in seconds[policy]]
        for losses, finite in run.pop("outputs"):
            run["losses"] += [float(x) for x in np.asarray(losses)]
            run["finite"].append(bool(finite))

    results = {}
    tokens = config["batch"] * config["seq"] * 2  # source + target positions
    for policy in policies:
        run = runs[policy]
        if "error" in run:
            results[policy] = {k: run[k] for k in ("error", "traceback")}
            continue
        ms = statistics.median(run["times"])
        losses = run["losses"]
        results[policy] = {
            "parameters": run["parameters"],
            "compile_s": run["compile_s"],
            "ms": ms,
            "rounds_ms": run["times"],
            "tokens_per_s": tokens / (ms / 1000.0),
            "steps_trained": len(losses),
            "all_finite": all(run["finite"]) and all(math.isfinite(x) for x in losses),
            "first_loss": losses[0],
            "last_loss": losses[-1],
            "loss_decreased": losses[-1] < losses[0],
        }
    if "float32" in results and "ms" in results["float32"]:
        for policy in policies:
            if "ms" in results[policy]:
                results[policy]["speedup_vs_float32"] = (
                    results["float32"]["ms"] / results[policy]["ms"]
                )
    return results


# --- report ---------------------------------------------------------------------------


def our_attention(entry):
    """ "cudnn", "fused" (through `keras.ops.dot_product_attention`, XLA) or "explicit"."""
    if entry.get("cudnn_fused_attention"):
        return "cudnn"
    return "fused" if entry.get("fused_attention_calls") else "explicit"


def print_stack_table(rows, variants):
    header = ["config", "policy", "ours ms"]
    for name in variants[1:]:
        header += [f"{name} ms", f"ratio {name}", "paired"]
    header += ["ours tok/s", "ours MFU"] + [f"{name} MFU" for name in variants[1:]]
    header += ["ours attn", "keras attn", "agree"]
    table = []
    for config, result in rows:
        v = result["variants"]
        ok = [n for n in variants if n in v and "error" not in v[n]]
        row = [config["name"], result["policy"], f"{v['ours']['ms']:.3f}"]
        for name in variants[1:]:
            row += (
                [
                    f"{v[name]['ms']:.3f}",
                    f"{v[name]['ratio']:.3f}",
                    f"{v[name]['paired_ratio']:.3f}",
                ]
                if name in ok
                else ["failed", "-", "-"]
            )
        row += [f"{v['ours']['tokens_per_s']:.3g}", f"{v['ours']['mfu']:.3f}"]
        row += [f"{v[name]['mfu']:.3f}" if name in ok else "-" for name in variants[1:]]
        row.append(our_attention(v["ours"]))
        kernel = v.get("keras", {}).get("cudnn_fused_attention")
        row.append("cudnn" if kernel else ("xla" if kernel is not None else "-"))
        row.append("yes" if all(v[n].get("agrees", True) and v[n]["finite"] for n in ok) else "NO")
        table.append(row)
    widths = [max(len(str(x)) for x in column) for column in zip(header, *table)]
    fmt = lambda cols: "  ".join(
        str(c).rjust(w) if i > 1 else str(c).ljust(w)  # noqa: E731
        for i, (c, w) in enumerate(zip(cols, widths))
    )
    print()
    print(fmt(header))
    print(fmt(["-" * w for w in widths]))
    for row in table:
        print(fmt(row))
    print(
        "ms: median per training step (forward + weight gradients). ratio = keras ms / ours ms "
        "(>= 1: ours not slower); paired = median over rounds of the within-round ratio (robust to "
        "drift). MFU = model FLOPs/s / measured matmul rate of the compute dtype."
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (for a CPU smoke run)")
    parser.add_argument(
        "--rounds", type=int, default=None, help="timed rounds (default 15; quick 3)"
    )
    parser.add_argument(
        "--round-seconds",
        type=float,
        default=None,
        help="target length of one round (default 0.05 s; quick 0)",
    )
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument(
        "--no-noflash",
        dest="noflash",
        action="store_false",
        help="skip the Keras reference with flash attention disabled",
    )
    parser.add_argument("--no-seq2seq", dest="seq2seq", action="store_false")
    parser.add_argument("--only", default=None, help="only configurations whose name contains this")
    parser.add_argument(
        "--matmul-size", type=int, default=None, help="ceiling matmul size (8192; quick 256)"
    )
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--output", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 15)
    round_seconds = (
        args.round_seconds if args.round_seconds is not None else (0.0 if args.quick else 0.05)
    )
    policies = [p for p in args.policies.split(",") if p]
    for policy in policies:
        if policy not in POLICIES:
            parser.error(f"unknown policy {policy!r}")
    variants = ["ours", "keras"] + (["keras_noflash"] if args.noflash else [])
    configs = [c for c in configurations(args.quick) if args.only is None or args.only in c["name"]]
    device = jax.devices()[0]
    report = {
        "jax": jax.__version__,
        "keras": keras.__version__,
        "python": platform.python_version(),
        "backend": keras.backend.backend(),
        "device": str(device),
        "device_kind": device.device_kind,
        "platform": device.platform,
        "tensorflow_imported": sys.modules.get("tensorflow") is not None,
        "quick": args.quick,
        "rounds": rounds,
        "round_seconds": round_seconds,
        "warmup": args.warmup,
        "variants": variants,
        "policies": policies,
        "stack": [],
        "seq2seq": None,
        "errors": [],
    }
    print(
        f"JAX {jax.__version__} on {device.device_kind} ({device.platform}), Keras "
        f"{keras.__version__}, "
        f"tensorflow imported: {report['tensorflow_imported']}, {rounds} rounds",
        flush=True,
    )

    def save():
        if args.output:
            write_json(args.output, report)

    print("matmul ceilings:", flush=True)
    report["ceilings"] = measure_ceilings(args.matmul_size or (256 if args.quick else 8192))
    save()
    ceiling_of = {
        "float32": report["ceilings"]["float32"]["flops_per_s"],
        "mixed_bfloat16": report["ceilings"]["bfloat16"]["flops_per_s"],
        "mixed_float16": report["ceilings"]["float16"]["flops_per_s"],
    }

    rows = []
    started = time.perf_counter()
    for index, config in enumerate(configs):
        for policy in policies:
            label = f"{config['name']} {policy}"
            print(f"{label} ...", end=" ", flush=True)
            t0 = time.perf_counter()
            try:
                result = benchmark_stack(
                    config,
                    policy,
                    variants,
                    rounds,
                    2 if args.quick else 3,
                    round_seconds,
                    args.warmup,
                    args.seed + index,
                    ceiling_of[policy],
                )
            except Exception as error:
                print(f"FAILED: {type(error).__name__}: {error}", flush=True)
                report["errors"].append(
                    {
                        "what": label,
                        "error": f"{type(error).__name__}: {error}",
                        "traceback": traceback.format_exc(limit=8),
                    }
                )
                save()
                continue
            rows.append((config, result))
            report["stack"].append({"config": config, **result})
            v = result["variants"]
            print(
                ", ".join(
                    f"{n} {v[n]['ms']:.3f} ms"
                    + (
                        f" (ratio {v[n]['ratio']:.3f}, paired {v[n]['paired_ratio']:.3f})"
                        if n != "ours"
                        else ""
                    )
                    for n in variants
                    if "error" not in v[n]
                )
                + f", ours MFU {v['ours']['mfu']:.3f}, "
                f"ours attention {our_attention(v['ours'])} ({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
            save()
    if rows:
        print_stack_table(rows, variants)

    if args.seq2seq:
        s2s = (
            dict(
                vocab=200, seq=16, batch=8, d_model=32, layers=1, heads=4, ff=64, learning_rate=1e-3
            )
            if args.quick
            else dict(
                vocab=8000,
                seq=64,
                batch=64,
                d_model=256,
                layers=3,
                heads=4,
                ff=1024,
                learning_rate=5e-4,
            )
        )
        print(f"\nSeq2SeqTransformer {s2s}:", flush=True)
        try:
            s2s_results = benchmark_seq2seq(
                s2s,
                policies,
                rounds=3 if args.quick else 7,
                steps_per_round=2 if args.quick else 10,
                seed=args.seed,
            )
        except Exception as error:
            print(f"FAILED: {type(error).__name__}: {error}", flush=True)
            report["errors"].append(
                {
                    "what": "seq2seq",
                    "error": f"{type(error).__name__}: {error}",
                    "traceback": traceback.format_exc(limit=8),
                }
            )
            s2s_results = None
        report["seq2seq"] = {"config": s2s, "results": s2s_results}
        for policy, r in (s2s_results or {}).items():
            if "error" in r:
                print(f"  {policy}: ERROR {r['error']}")
            else:
                print(
                    f"  {policy}: {r['ms']:.2f} ms/step "
                    f"({r.get('speedup_vs_float32', float('nan')):.2f}x "
                    f"float32), {r['tokens_per_s']:.3g} tok/s, finite {r['all_finite']}, "
                    f"loss {r['first_loss']:.3f} -> {r['last_loss']:.3f} over {r['steps_trained']} "
                    "steps"
                )
    report["total_s"] = time.perf_counter() - started
    report["tensorflow_imported_at_end"] = sys.modules.get("tensorflow") is not None
    save()
    if args.output:
        print(f"wrote {args.output}")
    if report["errors"]:
        print(
            f"{len(report['errors'])} error(s): " + "; ".join(e["what"] for e in report["errors"])
        )
    return report


if __name__ == "__main__":
    main()
