"""BLEU of our translator against a KerasHub-built peer: same split, same wall-clock.

Both arms train for `--minutes` of wall-clock time on the same training pairs
and translate the same held-out test sources; sacrebleu scores the
detokenized, case-sensitive output (BLEU and chrF).

* ours: `train_translator` with the default `TranslatorSettings` (what
  `apps.train_translator` trains), decoded by beam search as the export does
  (width 4, length penalty 0.6), and greedily for comparison.
* peer: what a KerasHub user builds from KerasHub's public API with the
  strongest short-budget recipe we know: `keras_hub` cased WordPiece
  vocabularies learned on the training split (the budget per side that ours
  picks for the corpus) and tokenizers, `TokenAndPositionEmbedding`, 3+3
  pre-norm `TransformerEncoder` / `TransformerDecoder` blocks
  (`normalize_first=True`) with a final layer norm after each stack, width
  256, feed-forward 512, 4 heads (`--peer-sizes` sweeps them), dropout 0.1
  (`--peer-dropout` sets it),
  KerasHub's default Glorot kernels (`--peer-init-stddev 0.02` draws them as
  KerasHub's BERT backbones do, smaller at the attention's projections);
  batches bucketed by length (8-token buckets) and padded to their bucket's
  longest length;
  AdamW with the paper's second-moment decay of 0.98 (Keras' default of
  0.999 left the peer underfitting; `--peer-beta-2` sets it) at a peak rate
  of 2e-3 with a linear warmup over the first 400 steps
  (or the first tenth of the budget, whichever ends first, so a slow machine
  does not spend its whole run warming up), then a cosine decay that reaches
  zero when the budget ends; label smoothing 0.1; batched greedy decoding.
  Its output goes through the same punctuation rejoining as ours, so BLEU
  compares translations, not spacing.

The loss function is the same masked, label-smoothed cross-entropy in both
arms; what differs is the model, the batching, the schedule and the decoding.

Usage (from the repository root, after `make bench-venv`): one arm after the
other in one process, each with the whole machine (`--threads 0`, the
default: all cores), the way the suite's numbers are taken. `make
bench-translation` runs the first line, `make bench-translation-suite` all
three corpora (about 70 minutes each: two 30-minute arms, then decoding):

    .venv/bin/python benchmarks/translation_quality.py bible:es-en --minutes 30
    .venv/bin/python benchmarks/translation_quality.py bible:fr-en --minutes 30 --max-examples 20000
    .venv/bin/python benchmarks/translation_quality.py ding:de-en --minutes 30

`ding:de-en` is about 17,000 everyday German -> English example sentences
from the Ding dictionary of Debian's `trans-de-en` package, written to
benchmarks/results/ding_de_en.tsv by ding_pairs_tsv.py on first use (any
`tsv:PATH` of sentence pairs works too). `--arm ours` / `--arm peer` runs one
arm and `--report` prints the saved results; `--threads N` limits TensorFlow to
N threads (e.g. both arms side by side on one core each, which halves the
wall-clock time but gives each arm half the machine).

`--arm ours --variant NAME --settings JSON` trains ours with other
`TranslatorSettings` (e.g. `'{"schedule": "cosine"}'`) and keeps its results
as arm `ours-NAME`, reported beside the defaults'.

`--arm ours --compare-endings` also scores, on the validation and the test
split, other ends of the same run: the last epoch and the averages of the
last 5 and 10 epochs' weights beside the kept epoch, then beam widths and
length penalties; the result keeps them under "endings".

The curve of BLEU against training time: `--snapshots 5,10,20,30,45,60
--minutes 60` saves weights at those minutes and scores each. Results go to
`benchmarks/results/translation_quality/`.
"""

import argparse
import dataclasses
import json
import math
import os
import re
import sys
import time

import ding_pairs_tsv
import keras
from bench_common import set_tensorflow_threads, written_once
from keras_hub_translator import DECODER_INPUTS, ENCODER_INPUTS, build_peer_translator

from keras_transformer.training.callbacks import RecentEpochWeights, set_trainable_weights

RESULTS_DIR = os.path.join("benchmarks", "results", "translation_quality")
BEAM_WIDTH = 4
LENGTH_PENALTY = 0.6
DECODE_BATCH = 100
AVERAGED_EPOCHS = (5, 10)  # --compare-endings: the windows of last epochs averaged
BEAM_SWEEP = ((4, 0.0), (4, 1.2), (8, 0.6))  # --compare-endings: (width, length penalty)
# Written into each peer result, so a report tells this recipe's results from earlier ones
# (a fixed 64-token padding, a warmup over a tenth of the budget, the model's own sizes;
# then Keras' default AdamW decay of 0.999).
PEER_RECIPE = "bucketed-beta0.98-2026-11"
PEER_WARMUP_STEPS = 400
PEER_WARMUP_FRACTION = 0.1  # of the budget: where the warmup ends if 400 steps take longer
PEER_PEAK_LEARNING_RATE = 2e-3
# The peer's blocks a side, width, feed-forward size and heads (`--peer-sizes`).
PEER_SIZES = (3, 256, 512, 4)
PEER_DROPOUT = 0.1
PEER_BETA_2 = 0.98
# Bucket width (tokens) of the peer's batches, which are padded to their bucket's longest.
PEER_BUCKET_WIDTH = 8

# Corpora a neighbouring script writes from an installed package:
# name -> (pairs file, the script's main).
WRITTEN_CORPORA = {"ding:de-en": (ding_pairs_tsv.DEFAULT_OUT, ding_pairs_tsv.main)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "data", help=f"a translation source, e.g. bible:es-en, or {', '.join(WRITTEN_CORPORA)}"
    )
    parser.add_argument(
        "--minutes", type=float, default=30.0, help="training wall-clock budget per arm"
    )
    parser.add_argument("--arm", choices=("both", "ours", "peer"), default="both")
    parser.add_argument(
        "--snapshots", default="", help="comma-separated minutes at which to score too"
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="TensorFlow threads per process (0: all)"
    )
    parser.add_argument("--max-examples", type=int, default=None, help="training pairs to keep")
    parser.add_argument("--test-size", type=int, default=1000, help="held-out pairs scored")
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument(
        "--layers",
        default=None,
        metavar="ENC+DEC",
        help="ours with other block counts, e.g. 5+1 (results kept as arm 'ours-5+1')",
    )
    parser.add_argument(
        "--variant",
        default=None,
        help="ours with --settings, results kept as arm 'ours-NAME' beside the defaults'",
    )
    parser.add_argument(
        "--settings",
        default="{}",
        help="JSON of TranslatorSettings fields for ours, e.g. '{\"shared_vocabulary\": true}'; "
        "needs --variant",
    )
    parser.add_argument(
        "--peer-sizes",
        default=None,
        metavar="LAYERS,WIDTH,FF,HEADS",
        help=f"the peer with other sizes (default {','.join(map(str, PEER_SIZES))}; results "
        "kept as arm 'peer-L,W,F,H')",
    )
    parser.add_argument(
        "--peer-init-stddev",
        type=float,
        default=None,
        metavar="S",
        help="the peer's block kernels drawn from TruncatedNormal(stddev=S), the initializer "
        "of KerasHub's BERT backbones (0.02), instead of KerasHub's default Glorot; results "
        "kept as arm 'peer-stdS'",
    )
    parser.add_argument(
        "--peer-dropout",
        type=float,
        default=None,
        metavar="D",
        help=f"the peer's dropout rate (default {PEER_DROPOUT:g}); results kept as arm "
        "'peer-dropD'",
    )
    parser.add_argument(
        "--peer-beta-2",
        type=float,
        default=None,
        metavar="B",
        help=f"the second-moment decay of the peer's AdamW (default {PEER_BETA_2:g}, the "
        "paper's; Keras' own default is 0.999); results kept as arm 'peer-b2B'",
    )
    parser.add_argument(
        "--compare-endings",
        action="store_true",
        help="ours: also score, on validation and test, the last epoch and the averages of the "
        f"last {' and '.join(map(str, AVERAGED_EPOCHS))} epochs beside the kept one, and beam "
        "widths and length penalties (kept in the result's 'endings')",
    )
    parser.add_argument("--report", action="store_true", help="only print the saved results")
    args = parser.parse_args()
    snapshots = sorted({float(value) for value in args.snapshots.split(",") if value.strip()})
    try:
        args.layers = None if args.layers is None else tuple(int(n) for n in args.layers.split("+"))
    except ValueError:
        args.layers = ()
    if args.layers is not None and (len(args.layers) != 2 or min(args.layers) < 1):
        parser.error("--layers takes two positive block counts, e.g. 5+1")
    if args.layers and args.arm != "ours":
        parser.error("--layers changes our arm only: add --arm ours")
    try:
        args.settings = json.loads(args.settings)
    except json.JSONDecodeError as error:
        parser.error(f"--settings is not JSON: {error}")
    if not isinstance(args.settings, dict):
        parser.error("--settings must be a JSON object of TranslatorSettings fields")
    if args.settings and not args.variant:
        parser.error(
            "--settings needs --variant NAME, so that its results do not replace the defaults' ones"
        )
    if args.variant is not None and (
        args.layers or args.arm != "ours" or not re.fullmatch(r"[A-Za-z0-9_.]+", args.variant)
    ):
        parser.error(
            "--variant takes letters, digits, '_' and '.', with --arm ours and without --layers"
        )
    if args.compare_endings and args.arm != "ours":
        parser.error("--compare-endings studies our arm: add --arm ours")
    if args.peer_sizes is not None:
        try:
            args.peer_sizes = tuple(int(n) for n in args.peer_sizes.split(","))
        except ValueError:
            args.peer_sizes = ()
        if len(args.peer_sizes) != 4 or min(args.peer_sizes) < 1 or args.arm != "peer":
            parser.error(
                "--peer-sizes takes four positive integers, e.g. 3,256,512,4, with --arm peer"
            )
        if args.peer_sizes[1] % args.peer_sizes[3]:
            parser.error("--peer-sizes: the heads must divide the width")
    if args.peer_init_stddev is not None and (args.peer_init_stddev <= 0 or args.arm != "peer"):
        parser.error("--peer-init-stddev takes a positive standard deviation, with --arm peer")
    if args.peer_dropout is not None and not (0 <= args.peer_dropout < 1 and args.arm == "peer"):
        parser.error("--peer-dropout takes a rate in [0, 1), with --arm peer")
    if args.peer_beta_2 is not None and not (0 < args.peer_beta_2 < 1 and args.arm == "peer"):
        parser.error("--peer-beta-2 takes a decay in (0, 1), with --arm peer")
    if any(minute > args.minutes for minute in snapshots):
        parser.error("--snapshots must not exceed --minutes")
    os.makedirs(RESULTS_DIR, exist_ok=True)
    if not args.report:
        set_tensorflow_threads(args.threads)
        data = _load(args)
        for arm in ("ours", "peer") if args.arm == "both" else (args.arm,):
            result = (run_ours if arm == "ours" else run_peer)(data, args, snapshots)
            with open(_result_path(args, _arm_name(args, arm)), "w") as result_file:
                json.dump(result, result_file, indent=2)
    report(args)


# --- shared ----------------------------------------------------------------------


def _load(args):
    from keras_transformer.data import load_translation_data

    source = args.data
    if args.data in WRITTEN_CORPORA:
        source = f"tsv:{written_once(*WRITTEN_CORPORA[args.data])}"
    data = load_translation_data(
        source, seed=args.seed, max_examples=args.max_examples, test_size=args.test_size
    )
    print(f"{args.data}: {len(data.train)} training pairs, {len(data.test)} test pairs", flush=True)
    return data


def _result_path(args, arm):
    name = args.data.replace(":", "_").replace("/", "_")
    return os.path.join(RESULTS_DIR, f"{name}-{args.minutes:g}min-{arm}.json")


def _arm_name(args, arm):
    if arm == "peer":
        sizes = [",".join(map(str, args.peer_sizes))] if args.peer_sizes else []
        stddev = [f"std{args.peer_init_stddev:g}"] if args.peer_init_stddev else []
        dropout = [] if args.peer_dropout is None else [f"drop{args.peer_dropout:g}"]
        beta_2 = [] if args.peer_beta_2 is None else [f"b2{args.peer_beta_2:g}"]
        return "-".join(["peer", *sizes, *stddev, *dropout, *beta_2])
    if arm == "ours" and args.variant:
        return f"ours-{args.variant}"
    return f"{arm}-{args.layers[0]}+{args.layers[1]}" if arm == "ours" and args.layers else arm


def _run_dir(args, arm):
    return os.path.join(
        RESULTS_DIR, "runs", os.path.basename(_result_path(args, arm))[: -len(".json")]
    )


class Snapshots(keras.callbacks.Callback):
    """Saves the weights when training time passes each of `minutes`."""

    def __init__(self, minutes, directory):
        super().__init__()
        self.minutes = list(minutes)
        self.directory = directory
        self.paths = {}
        os.makedirs(directory, exist_ok=True)

    def on_train_begin(self, logs=None):
        self.start = time.monotonic()
        self.pending = list(self.minutes)

    def on_train_batch_end(self, batch, logs=None):
        elapsed = (time.monotonic() - self.start) / 60
        while self.pending and elapsed >= self.pending[0]:
            mark = self.pending.pop(0)
            self.paths[mark] = os.path.join(self.directory, f"snapshot-{mark:g}min.weights.h5")
            self.model.save_weights(self.paths[mark])


class StepCount(keras.callbacks.Callback):
    """Counts the training steps `fit` takes and the seconds inside them, for steps a
    second beside the peer's: ours also validates and decodes `val_chrf` every
    epoch, which the training seconds include and the step seconds do not."""

    steps, step_seconds = 0, 0.0

    def on_train_batch_begin(self, batch, logs=None):
        self.started = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        self.step_seconds += time.monotonic() - self.started


def score(hypotheses, references):
    import sacrebleu

    return {
        "bleu": round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2),
        "chrf": round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2),
    }


def _decode_all(translate, sources):
    """Strings in batches of `DECODE_BATCH` through `translate` (strings -> strings)."""
    import tensorflow as tf

    outputs = []
    for start in range(0, len(sources), DECODE_BATCH):
        batch = tf.constant(sources[start : start + DECODE_BATCH])
        outputs.extend(text.decode("utf-8") for text in translate(batch).numpy())
    return outputs


def _evaluate_snapshots(model, snapshot_paths, evaluate):
    """`evaluate()` on each snapshot's weights, then on the final weights."""
    final_weights = model.get_weights()
    points = []
    for minute, path in sorted(snapshot_paths.items()):
        model.load_weights(path)
        points.append({"minutes": minute, **evaluate()})
    model.set_weights(final_weights)
    return points


# --- ours ------------------------------------------------------------------------


def run_ours(data, args, snapshots):
    import tensorflow as tf

    from keras_transformer.decoding import beam_search, greedy_decode
    from keras_transformer.training.translator.pipeline import train_translator
    from keras_transformer.training.translator.settings import TranslatorSettings

    settings = TranslatorSettings(**{"epochs": 10_000, "seed": args.seed, **args.settings})
    if args.layers:
        settings.num_layers, settings.num_decoder_layers = args.layers
    run_dir = _run_dir(args, _arm_name(args, "ours"))
    snapshot_callback, step_count = (
        Snapshots(snapshots, os.path.join(run_dir, "snapshots")),
        StepCount(),
    )
    recent_epochs = [RecentEpochWeights(max(AVERAGED_EPOCHS))] if args.compare_endings else []
    run = train_translator(
        data,
        settings,
        run_dir,
        time_budget_minutes=args.minutes,
        verbose=2,
        callbacks=[snapshot_callback, step_count, *recent_epochs],
    )
    model, source_tokenizer, target_tokenizer = (
        run.model,
        run.source_tokenizer,
        run.target_tokenizer,
    )
    start_id, end_id = target_tokenizer.token_id("[START]"), target_tokenizer.token_id("[END]")
    max_length = model.sequence_length

    def beam_translator(beam_width, length_penalty):
        @tf.function(autograph=False)
        def translate(texts):
            source_ids = source_tokenizer.encode(texts, max_length)
            token_ids, _ = beam_search(
                model,
                source_ids,
                max_length,
                start_id,
                end_id,
                beam_width=beam_width,
                length_penalty=length_penalty,
            )
            return target_tokenizer.detokenize(token_ids)

        return translate

    translate_beam = beam_translator(BEAM_WIDTH, LENGTH_PENALTY)

    @tf.function(autograph=False)
    def translate_greedy(texts):
        source_ids = source_tokenizer.encode(texts, max_length)
        return target_tokenizer.detokenize(
            greedy_decode(model, source_ids, max_length, start_id, end_id)
        )

    def evaluate(with_greedy=True):
        started = time.monotonic()
        beam = _decode_all(translate_beam, data.test.sources)
        beam_seconds = time.monotonic() - started
        greedy = _decode_all(translate_greedy, data.test.sources) if with_greedy else None
        return {
            "beam": score(beam, data.test.targets),
            **({"greedy": score(greedy, data.test.targets)} if with_greedy else {}),
            "beam_decode_seconds": round(beam_seconds, 1),
            "examples": [
                {"source": s, "reference": r, "translation": t}
                for s, r, t in zip(data.test.sources[:5], data.test.targets[:5], beam)
            ],
        }

    # Snapshots by beam search only (the curve); the final weights both ways.
    points = _evaluate_snapshots(
        model, snapshot_callback.paths, lambda: evaluate(with_greedy=False)
    )
    final = evaluate()
    print(
        f"ours: BLEU {final['beam']['bleu']} (beam), {final['greedy']['bleu']} (greedy)", flush=True
    )
    endings = (
        _compare_endings(
            model, data, recent_epochs[0], beam_translator, translate_greedy, run.metrics
        )
        if args.compare_endings
        else None
    )
    return {
        "arm": "ours",
        "data": args.data,
        "settings": {
            **vars(run.settings),
            "beam_width": BEAM_WIDTH,
            "length_penalty": LENGTH_PENALTY,
        },
        "threads": args.threads,
        "train_pairs": len(data.train),
        "test_pairs": len(data.test),
        "training_seconds": round(run.training_seconds, 1),
        "steps": step_count.steps,
        "step_seconds": round(step_count.step_seconds, 1),
        "batch_size": run.settings.batch_size,
        "epochs": run.epochs_completed,
        "parameters": model.count_params(),
        "snapshots": points,
        "final": final,
        **({"endings": endings} if endings else {}),
    }


def _compare_endings(model, data, recent_epochs, beam_translator, translate_greedy, metrics):
    """Validation and test scores of other ends of the same run: the kept epoch, the last
    epoch, the averages of the last `AVERAGED_EPOCHS` epochs (greedy and beam), then beam
    widths and length penalties (`BEAM_SWEEP`) on the one of those that validation prefers.
    Leaves the model with the kept epoch's weights."""
    kept = [keras.ops.convert_to_numpy(v) for v in model.trainable_weights]
    default_beam = beam_translator(BEAM_WIDTH, LENGTH_PENALTY)

    def scores(translate):
        return {
            split: score(_decode_all(translate, pairs.sources), pairs.targets)
            for split, pairs in (("validation", data.validation), ("test", data.test))
        }

    candidates = {"kept": kept, "last": recent_epochs.average(last=1)}
    windows = [n for n in AVERAGED_EPOCHS if n <= len(recent_epochs.epoch_numbers)]
    candidates.update({f"average_last_{n}": recent_epochs.average(last=n) for n in windows})
    endings = {"kept_epoch": metrics.get("kept_epoch"), "weights": {}, "beams": {}}
    for name, weights in candidates.items():
        set_trainable_weights(model, weights)
        endings["weights"][name] = {
            "greedy": scores(translate_greedy),
            f"beam{BEAM_WIDTH}": scores(default_beam),
        }
        print(f"ending {name}: {endings['weights'][name]}", flush=True)
    # The sweep on the one candidate validation prefers: decoding a corpus of verses with
    # wide beams costs minutes.
    best = max(
        endings["weights"],
        key=lambda name: endings["weights"][name][f"beam{BEAM_WIDTH}"]["validation"]["bleu"],
    )
    set_trainable_weights(model, candidates[best])
    for width, penalty in BEAM_SWEEP:
        key = f"{best} beam{width} lp{penalty:g}"
        endings["beams"][key] = scores(beam_translator(width, penalty))
        print(f"ending {key}: {endings['beams'][key]}", flush=True)
    set_trainable_weights(model, kept)
    return endings


# --- the KerasHub peer --------------------------------------------------------------


def _peer_kernel_initializer(args):
    if args.peer_init_stddev is None:
        return "glorot_uniform"
    return keras.initializers.TruncatedNormal(stddev=args.peer_init_stddev)


def run_peer(data, args, snapshots):
    import keras_hub
    import tensorflow as tf

    from keras_transformer.text.wordpiece import join_punctuation
    from keras_transformer.training.callbacks import TimeBudget
    from keras_transformer.training.compiling import build_optimizer
    from keras_transformer.training.data_rules import large_corpus_settings, vocabulary_size_for
    from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
    from keras_transformer.training.translator.settings import TranslatorSettings

    # The recipe's sizes (or --peer-sizes), and the WordPiece budget per side that ours
    # picks for this corpus: 8,000 pieces learned from a few thousand pairs would
    # handicap the peer.
    num_layers, d_model, intermediate_dim, num_heads = args.peer_sizes or PEER_SIZES
    settings = dataclasses.replace(
        large_corpus_settings(TranslatorSettings(seed=args.seed)),
        num_layers=num_layers,
        d_model=d_model,
        intermediate_dim=intermediate_dim,
        num_heads=num_heads,
        dropout=PEER_DROPOUT if args.peer_dropout is None else args.peer_dropout,
        label_smoothing=0.1,
    )
    source_vocabulary_size, _ = vocabulary_size_for(data.train.sources)
    target_vocabulary_size, _ = vocabulary_size_for(data.train.targets)
    print(
        f"peer: WordPiece vocabularies of {source_vocabulary_size} / {target_vocabulary_size} "
        "pieces",
        flush=True,
    )
    keras.utils.set_random_seed(settings.seed)
    sequence_length = settings.sequence_length
    reserved = ["[PAD]", "[UNK]", "[START]", "[END]"]
    print("peer: building KerasHub WordPiece vocabularies...", flush=True)

    def tokenizer_for(texts, vocabulary_size):
        vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
            tf.data.Dataset.from_tensor_slices(texts).batch(1000),
            vocabulary_size=vocabulary_size,
            reserved_tokens=reserved,
            lowercase=False,
        )
        return keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocabulary, lowercase=False)

    source_tokenizer = tokenizer_for(data.train.sources, source_vocabulary_size)
    target_tokenizer = tokenizer_for(data.train.targets, target_vocabulary_size)
    start_id, end_id = (
        target_tokenizer.token_to_id("[START]"),
        target_tokenizer.token_to_id("[END]"),
    )
    source_packer = keras_hub.layers.StartEndPacker(sequence_length=sequence_length)

    def encode(sources, targets):
        # Whole batches of texts through each tokenizer (one call per text was most of
        # the first epoch), as padded rows and their lengths: tf.data unbatches a
        # ragged batch into elements that padded_batch refuses.
        source_ids = source_tokenizer(sources)[:, :sequence_length]
        target_ids = target_tokenizer(targets)[:, : sequence_length - 1]
        ends = tf.ones_like(target_ids[:, :1])
        target_ids = tf.concat([ends * start_id, target_ids, ends * end_id], axis=1)
        return (
            source_ids.to_tensor(),
            source_ids.row_lengths(),
            target_ids.to_tensor(),
            target_ids.row_lengths(),
        )

    def unpadded(source_ids, source_length, target_ids, target_length):
        return source_ids[:source_length], target_ids[:target_length]

    def teacher_forcing(source_ids, target_ids):
        inputs = {ENCODER_INPUTS: source_ids, DECODER_INPUTS: target_ids[:, :-1]}
        return inputs, target_ids[:, 1:]

    # Batches of pairs of similar length, each padded to its bucket's longest length
    # (a multiple of PEER_BUCKET_WIDTH, less one): padded to each batch's own longest
    # pair, every new width retraced the train step (191 steps in 5 minutes, against
    # 330 of ours). A target is at most sequence_length + 1 tokens.
    boundaries = list(
        range(PEER_BUCKET_WIDTH, sequence_length + 2 + PEER_BUCKET_WIDTH, PEER_BUCKET_WIDTH)
    )
    # The longest batch, padded to its bucket: the position tables cover it.
    padded_length = boundaries[-1]
    train_dataset = (
        tf.data.Dataset.from_tensor_slices((data.train.sources, data.train.targets))
        .batch(1024)
        .map(encode)
        .unbatch()
        .map(unpadded)
        .cache()
        .shuffle(len(data.train), seed=settings.seed, reshuffle_each_iteration=True)
        .bucket_by_sequence_length(
            lambda source_ids, target_ids: tf.maximum(
                tf.shape(source_ids)[0], tf.shape(target_ids)[0]
            ),
            bucket_boundaries=boundaries,
            bucket_batch_sizes=[settings.batch_size] * (len(boundaries) + 1),
            pad_to_bucket_boundary=True,
        )
        .map(teacher_forcing, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )

    model = build_peer_translator(
        source_tokenizer.vocabulary_size(),
        target_tokenizer.vocabulary_size(),
        padded_length,
        settings.num_layers,
        settings.d_model,
        settings.intermediate_dim,
        settings.num_heads,
        settings.dropout,
        kernel_initializer=_peer_kernel_initializer(args),
    )

    peak_learning_rate = PEER_PEAK_LEARNING_RATE
    optimizer = keras.optimizers.AdamW(
        peak_learning_rate,
        weight_decay=0.01,
        clipnorm=settings.clip_norm,
        beta_2=PEER_BETA_2 if args.peer_beta_2 is None else args.peer_beta_2,
    )
    model.compile(
        optimizer=optimizer,
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=settings.label_smoothing),
    )
    build_optimizer(model)  # as train_translator does: one trace of the train step, not two
    run_dir = _run_dir(args, _arm_name(args, "peer"))
    snapshot_callback = Snapshots(snapshots, os.path.join(run_dir, "snapshots"))
    step_count = StepCount()
    schedule = WarmupCosineByTime(
        args.minutes, PEER_WARMUP_STEPS, PEER_WARMUP_FRACTION, peak_learning_rate
    )
    started = time.monotonic()
    history = model.fit(
        train_dataset,
        epochs=10_000,
        callbacks=[TimeBudget(args.minutes), schedule, snapshot_callback, step_count],
        verbose=2,
    )
    training_seconds = time.monotonic() - started
    # an evaluation crash loses no training
    model.save_weights(os.path.join(run_dir, "final.weights.h5"))

    @tf.function(autograph=False)
    def translate_greedy(texts):
        # The keras.io example's decoding: the whole prefix through the whole model at every step.
        source_ids = source_packer(source_tokenizer(texts))
        batch_size = tf.shape(source_ids)[0]
        prompt = tf.concat(
            [
                tf.fill([batch_size, 1], start_id),
                tf.zeros([batch_size, sequence_length - 1], tf.int32),
            ],
            axis=1,
        )

        def keep_going(index, prompt, finished):
            return tf.logical_and(
                index < sequence_length - 1, tf.logical_not(tf.reduce_all(finished))
            )

        def step(index, prompt, finished):
            step_logits = model([source_ids, prompt], training=False)[:, index, :]
            next_ids = tf.cast(tf.argmax(step_logits, axis=-1), tf.int32)
            next_ids = tf.where(finished, 0, next_ids)
            column = tf.one_hot(index + 1, sequence_length, on_value=1, off_value=0, dtype=tf.int32)
            return (
                index + 1,
                prompt + next_ids[:, None] * column[None, :],
                finished | (next_ids == end_id),
            )

        # An explicit while_loop, not AutoGraph: AutoGraph re-reads this file's
        # source, which an edit during a long run would silently break.
        _, prompt, _ = tf.while_loop(
            keep_going, step, (tf.constant(0), prompt, tf.zeros([batch_size], tf.bool))
        )
        generated = prompt[:, 1:]
        keep = (generated != 0) & (generated != start_id) & (generated != end_id)
        words = target_tokenizer.detokenize(tf.ragged.boolean_mask(generated, keep))
        return join_punctuation(words)

    def evaluate():
        started = time.monotonic()
        greedy = _decode_all(translate_greedy, data.test.sources)
        return {
            "greedy": score(greedy, data.test.targets),
            "greedy_decode_seconds": round(time.monotonic() - started, 1),
            "examples": [
                {"source": s, "reference": r, "translation": t}
                for s, r, t in zip(data.test.sources[:5], data.test.targets[:5], greedy)
            ],
        }

    points = _evaluate_snapshots(model, snapshot_callback.paths, evaluate)
    final = evaluate()
    print(f"peer: BLEU {final['greedy']['bleu']} (greedy)", flush=True)
    return {
        "arm": "peer",
        "data": args.data,
        "recipe": PEER_RECIPE,
        "settings": {
            **vars(settings),
            "peak_learning_rate": peak_learning_rate,
            "warmup_steps": PEER_WARMUP_STEPS,
            "warmup_fraction": PEER_WARMUP_FRACTION,
            "bucket_width": PEER_BUCKET_WIDTH,
            "normalize_first": True,
            "beta_2": optimizer.beta_2,
            "kernel_initializer": keras.initializers.serialize(
                keras.initializers.get(_peer_kernel_initializer(args))
            ),
        },
        "warmup_ended_at_step": schedule.warmup_ended_at_step,
        "threads": args.threads,
        "train_pairs": len(data.train),
        "test_pairs": len(data.test),
        "training_seconds": round(training_seconds, 1),
        "steps": step_count.steps,
        "step_seconds": round(step_count.step_seconds, 1),
        "batch_size": settings.batch_size,
        "epochs": len(history.history.get("loss", [])),
        "parameters": model.count_params(),
        "snapshots": points,
        "final": final,
    }


class WarmupCosineByTime(keras.callbacks.Callback):
    """A linear warmup over the first `warmup_steps` steps, or over the first
    `warmup_fraction` of the wall-clock budget if that ends first (the rate rises by
    whichever is further along), then a cosine decay from the peak that reaches zero
    exactly when the budget ends.

    A step-count schedule alone can't know how many steps a time budget holds (a
    500-step warmup was longer than a whole 30-minute run on one core); the time
    cap keeps the recipe's warmup on a fast machine and a sane one on a slow one.
    """

    def __init__(self, minutes, warmup_steps, warmup_fraction, peak):
        super().__init__()
        self.seconds, self.peak = minutes * 60, peak
        self.warmup_steps, self.warmup_fraction = warmup_steps, warmup_fraction
        self.warmup_ended_at_step = None

    def on_train_begin(self, logs=None):
        self.start, self.step, self.decay_start = time.monotonic(), 0, None

    def on_train_batch_begin(self, batch, logs=None):
        progress = min(1.0, (time.monotonic() - self.start) / self.seconds)
        warmup = max((self.step + 1) / self.warmup_steps, progress / self.warmup_fraction)
        if self.decay_start is None and warmup > 1.0:
            self.decay_start, self.warmup_ended_at_step = progress, self.step
        if self.decay_start is None:
            rate = self.peak * warmup
        else:
            decay = (progress - self.decay_start) / max(1e-9, 1.0 - self.decay_start)
            rate = self.peak * 0.5 * (1 + math.cos(math.pi * decay))
        self.model.optimizer.learning_rate.assign(rate)
        self.step += 1


# --- report ----------------------------------------------------------------------


def report(args):
    results = {}
    prefix = os.path.basename(_result_path(args, ""))[: -len(".json")]
    variants = {
        kind: sorted(
            name[len(prefix) : -len(".json")]
            for name in os.listdir(RESULTS_DIR)
            if name.startswith(f"{prefix}{kind}-") and name.endswith(".json")
        )
        for kind in ("ours", "peer")
    }
    for arm in ("ours", *variants["ours"], "peer", *variants["peer"]):
        path = _result_path(args, arm)
        if os.path.exists(path):
            with open(path) as result_file:
                results[arm] = json.load(result_file)
    if not results:
        sys.exit(f"No results for {args.data} at {args.minutes:g} minutes in {RESULTS_DIR}.")
    print(f"\n{args.data}, {args.minutes:g} minutes of training per arm")
    print(
        f"{'arm':16} {'decoding':8} {'BLEU':>6} {'chrF':>6} {'epochs':>6} {'train s':>8} "
        f"{'steps/s':>7} {'threads':>7}"
    )
    for arm, result in results.items():
        # Results saved before the step count was recorded have none.
        steps_per_second = (
            f"{result['steps'] / result['step_seconds']:7.2f}" if "steps" in result else "      -"
        )
        for decoding in ("beam", "greedy"):
            if decoding in result["final"]:
                metrics = result["final"][decoding]
                print(
                    f"{arm:16} {decoding:8} {metrics['bleu']:6.2f} {metrics['chrf']:6.2f} "
                    f"{result['epochs']:6d} {result['training_seconds']:8.0f} "
                    f"{steps_per_second} {result['threads'] or 'all':>7}"
                )
    old_recipe = [
        arm
        for arm, result in results.items()
        if arm.startswith("peer") and result.get("recipe") != PEER_RECIPE
    ]
    if old_recipe:
        print(f"{', '.join(old_recipe)}: an earlier, weaker peer recipe; run the peer again")
    peers = {
        arm: result["final"]["greedy"]["bleu"]
        for arm, result in results.items()
        if arm.startswith("peer") and arm not in old_recipe
    }
    if "ours" in results and peers:
        best = max(peers, key=peers.get)
        gap = results["ours"]["final"]["beam"]["bleu"] - peers[best]
        print(f"BLEU gap, ours (beam) - the best peer ({best}): {gap:+.2f} (target: at least +5)")
    for arm, result in results.items():
        if result["snapshots"]:
            key = "greedy" if arm.startswith("peer") else "beam"
            curve = ", ".join(
                f"{p['minutes']:g} min {p[key]['bleu']:.1f}" for p in result["snapshots"]
            )
            print(
                f"{arm} BLEU over training time: {curve}, {args.minutes:g} min "
                f"{result['final'][key]['bleu']:.1f}"
            )
    _plot(args, results)


def _plot(args, results):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not any(result["snapshots"] for result in results.values()):
        return
    figure, axes = plt.subplots(figsize=(6, 4))
    for arm, result in results.items():
        key = "greedy" if arm.startswith("peer") else "beam"
        minutes = [p["minutes"] for p in result["snapshots"]] + [result["training_seconds"] / 60]
        bleu = [p[key]["bleu"] for p in result["snapshots"]] + [result["final"][key]["bleu"]]
        axes.plot(minutes, bleu, marker="o", label=f"{arm} ({key})")
    axes.set_xlabel("training time (minutes)")
    axes.set_ylabel("BLEU (sacrebleu, test split)")
    axes.set_title(args.data)
    axes.grid(alpha=0.3)
    axes.legend()
    path = _result_path(args, "curve")[: -len(".json")] + ".png"
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"curve: {path}")


if __name__ == "__main__":
    main()
