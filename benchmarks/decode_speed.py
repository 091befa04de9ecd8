"""Decoding speed of our translator export against a tutorial-style export.

Both SavedModels hold the same weights and take raw strings:

* **ours**: `export_translator` (what `apps.train_translator` writes): the
  encoder runs once per batch, then one decoder position per step with every
  block's key/value cache (`greedy` signature; `serving_default` is beam
  search, width 4).
* **tutorial**: the decoding loop of the TensorFlow tutorial "Neural machine
  translation with a Transformer and Keras": at every step the whole model,
  encoder included, runs on the source and on the whole prefix generated so
  far, and the last position's logits pick the next token.

The `[END]` logit is pushed to -1e9 in the shared weights, so every sentence
decodes exactly `--tokens` tokens in both exports and the loops do the same
number of steps. Each export is called on batches of 1 and 32 Spanish verses,
interleaved (`bench_common.time_interleaved`: the order of the decoders
changes from call to call) after a warm-up; the table shows median seconds per
batch and `speed-up = tutorial / ours`.

Weights: a trained run's (`--run-dir`, a folder written by
`apps.train_translator`) or, by default, a freshly initialized model of the
default `TranslatorSettings` sizes with vocabularies learned from the
`bible:es-en` training split, as `apps.train_translator` learns them, or
from its first `--vocabulary-examples` pairs (the sizes learned are printed).
Speed does not depend on the weight values, only on the sizes; the output
projection's size is the vocabulary's.

Usage (from the repository root):

    .venv/bin/python benchmarks/decode_speed.py
    .venv/bin/python benchmarks/decode_speed.py --run-dir runs/demo-translator
"""

import argparse
import os
import platform
import shutil
import statistics
import tempfile

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops the exports need)
from bench_common import paired_ratio, set_tensorflow_threads, time_interleaved, write_json

from keras_transformer.data import load_translation_data
from keras_transformer.export.translator import export_translator
from keras_transformer.export.versions import write_new_version
from keras_transformer.text import (
    WordPieceTokenizer,
    build_vocabulary,
    save_vocabulary,
    trim_shared_padding,
)
from keras_transformer.text.wordpiece import END, START
from keras_transformer.training.data_rules import large_corpus_settings
from keras_transformer.training.translator.model import build_translator_model
from keras_transformer.training.translator.settings import TranslatorSettings

RESULTS = os.path.join("benchmarks", "results", "decode_speed.json")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", help="a translator run folder (model.keras and vocabularies)")
    parser.add_argument("--tokens", type=int, default=64, help="output tokens per sentence")
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed calls per export and batch size"
    )
    parser.add_argument("--threads", type=int, default=0, help="TensorFlow threads (0: all)")
    parser.add_argument(
        "--vocabulary-examples",
        type=int,
        default=None,
        help="learn the random model's vocabularies from this many training pairs (default: all)",
    )
    parser.add_argument(
        "--save-export",
        help="also copy our export here (to time it from another commit's run)",
    )
    parser.add_argument(
        "--baseline-export",
        help="a translator export written by another commit (its --save-export), decoding --tokens "
        "tokens and never [END]; timed in the same rounds as ours, as `baseline greedy` and "
        "`baseline beam 4`",
    )
    parser.add_argument("--output", default=RESULTS, help=f"JSON results path (default {RESULTS})")
    args = parser.parse_args()
    set_tensorflow_threads(args.threads)

    data = load_translation_data("bible:es-en", seed=1337)
    # The same random weights every run: with other draws, two near-tied logits can
    # make the cached and the uncached greedy loops part ways.
    keras.utils.set_random_seed(1337)
    model, source_tokenizer, target_tokenizer, weights = _model_and_tokenizers(
        args.run_dir, data, args.vocabulary_examples
    )
    if args.tokens >= model.sequence_length:
        parser.error(
            f"--tokens must be below the model's sequence_length ({model.sequence_length})."
        )
    _never_end(model, target_tokenizer.token_id(END))

    with tempfile.TemporaryDirectory() as folder:
        print("Writing both exports...", flush=True)
        ours_dir = export_translator(
            model,
            source_tokenizer,
            target_tokenizer,
            os.path.join(folder, "ours"),
            max_output_length=args.tokens,
        )
        tutorial_dir = export_tutorial_style(
            model, source_tokenizer, target_tokenizer, os.path.join(folder, "tutorial"), args.tokens
        )
        if args.save_export:
            shutil.copytree(ours_dir, args.save_export)
        ours = tf.saved_model.load(ours_dir)
        tutorial = tf.saved_model.load(tutorial_dir)
        decoders = {
            "ours greedy": ours.signatures["greedy"],
            "ours beam 4": ours.signatures["serving_default"],
            "tutorial greedy": tutorial.signatures["serving_default"],
        }
        if args.baseline_export:
            baseline = tf.saved_model.load(args.baseline_export)
            decoders["baseline greedy"] = baseline.signatures["greedy"]
            decoders["baseline beam 4"] = baseline.signatures["serving_default"]
        rows, baseline_ratios = [], []
        for batch_size in [int(size) for size in args.batch_sizes.split(",")]:
            texts = tf.constant((data.test.sources * batch_size)[:batch_size])
            _check_same_output(decoders, texts, args.tokens)
            # A loaded signature's first call is far slower than the rest: warm-up.
            rounds = time_interleaved(
                {
                    name: lambda decode=decode: decode(text=texts)
                    for name, decode in decoders.items()
                },
                args.repeats,
                warmup=1,
            )
            seconds = {name: statistics.median(values) for name, values in rounds.items()}
            tutorial_seconds = seconds["tutorial greedy"]
            for name, value in seconds.items():
                rows.append(
                    {
                        "decoder": name,
                        "batch_size": batch_size,
                        "seconds": value,
                        "tokens_per_second": batch_size * args.tokens / value,
                        "speedup_vs_tutorial": tutorial_seconds / value,
                    }
                )
            for kind in ("greedy", "beam 4") if args.baseline_export else ():
                baseline_ratios.append(
                    {
                        "decoder": kind,
                        "batch_size": batch_size,
                        "ours_over_baseline": paired_ratio(
                            rounds[f"ours {kind}"], rounds[f"baseline {kind}"]
                        ),
                    }
                )
    print(f"Weights: {weights}")
    _print_table(rows, args.tokens)
    if baseline_ratios:
        print(
            "\nSeconds of ours / seconds of the baseline export, median over rounds (below 1: ours "
            "is faster)"
        )
        for row in baseline_ratios:
            print(
                f"{row['decoder']:8} batch {row['batch_size']:3d}: {row['ours_over_baseline']:.3f}"
            )
    write_json(
        args.output,
        {
            "machine": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "weights": weights,
            "tokens": args.tokens,
            "rows": rows,
            "baseline_export": args.baseline_export,
            "baseline_ratios": baseline_ratios,
        },
    )
    print(f"Results: {args.output}")


def _model_and_tokenizers(run_dir, data, vocabulary_examples=None):
    if run_dir:
        model = keras.models.load_model(os.path.join(run_dir, "model.keras"))
        source = WordPieceTokenizer(os.path.join(run_dir, "source_vocabulary.txt"))
        target = WordPieceTokenizer(
            os.path.join(run_dir, "target_vocabulary.txt"), lower_case=False
        )
        return model, source, target, f"trained ({run_dir})"
    settings = large_corpus_settings(TranslatorSettings())
    folder = tempfile.mkdtemp()
    source = WordPieceTokenizer(
        save_vocabulary(
            build_vocabulary(data.train.sources[:vocabulary_examples], settings.vocabulary_size),
            os.path.join(folder, "s.txt"),
        )
    )
    target = WordPieceTokenizer(
        save_vocabulary(
            build_vocabulary(
                data.train.targets[:vocabulary_examples], settings.vocabulary_size, lower_case=False
            ),
            os.path.join(folder, "t.txt"),
        ),
        lower_case=False,
    )
    model = build_translator_model(settings, source.vocabulary_size, target.vocabulary_size)
    sizes = f"{source.vocabulary_size} / {target.vocabulary_size} tokens"
    return model, source, target, f"random (default TranslatorSettings sizes, vocabularies {sizes})"


def _never_end(model, end_id):
    """Makes `[END]` unreachable so every sentence decodes the full length."""
    if model.output_projection is None:
        raise SystemExit(
            "This benchmark needs a model with its own output projection (no shared embeddings)."
        )
    bias = model.output_projection.bias
    bias.assign(tf.tensor_scatter_nd_update(bias, [[end_id]], [-1e9]))


def export_tutorial_style(model, source_tokenizer, target_tokenizer, base_dir, tokens):
    """The TensorFlow tutorial's `Translator`: no cache, the whole model each step."""
    start_id = target_tokenizer.token_id(START)
    end_id = target_tokenizer.token_id(END)
    sequence_length = model.sequence_length

    def translate(text):
        # The tutorial pads a batch to its longest source (`RaggedTensor.to_tensor()`).
        source_ids = trim_shared_padding(source_tokenizer.encode(text, sequence_length))
        batch_size = tf.shape(source_ids)[0]
        output = tf.TensorArray(tf.int32, size=tokens + 1, element_shape=[None])
        output = output.write(0, tf.fill([batch_size], start_id))

        def keep_going(index, output, finished):
            return tf.logical_and(index < tokens, tf.logical_not(finished))

        def step(index, output, finished):
            prefix = tf.transpose(output.gather(tf.range(index + 1)))  # [B, index + 1]
            logits = model({"source_ids": source_ids, "target_ids": prefix}, training=False)
            next_ids = tf.argmax(logits[:, -1, :], axis=-1, output_type=tf.int32)
            return index + 1, output.write(index + 1, next_ids), tf.reduce_all(next_ids == end_id)

        _, output, _ = tf.while_loop(keep_going, step, (tf.constant(0), output, tf.constant(False)))
        generated = tf.transpose(output.stack())[:, 1:]
        return {"translation": target_tokenizer.detokenize(generated)}

    def write(folder):
        archive = keras.export.ExportArchive()
        archive.track(model)
        archive.track(source_tokenizer)
        archive.track(target_tokenizer)
        archive.add_endpoint(
            "serving_default",
            translate,
            input_signature=[tf.TensorSpec([None], tf.string, name="text")],
        )
        archive.write_out(folder, verbose=False)

    return write_new_version(base_dir, write)


def _check_same_output(decoders, texts, tokens):
    """Both greedy loops must give the same words, or the timing compares different work."""
    ours = decoders["ours greedy"](text=texts)["translation"].numpy()
    tutorial = decoders["tutorial greedy"](text=texts)["translation"].numpy()
    if not np.array_equal(ours, tutorial):
        raise SystemExit(
            "The two greedy exports disagree; the benchmark would not compare like with like."
        )


def _print_table(rows, tokens):
    print(f"\n{tokens} output tokens per sentence; median seconds per call")
    print(f"{'decoder':16} {'batch':>5} {'seconds':>9} {'tokens/s':>9} {'speed-up':>9}")
    for row in rows:
        print(
            f"{row['decoder']:16} {row['batch_size']:5d} {row['seconds']:9.3f} "
            f"{row['tokens_per_second']:9.0f} {row['speedup_vs_tutorial']:8.1f}x"
        )


if __name__ == "__main__":
    main()
