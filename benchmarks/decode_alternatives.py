"""Two ways one might hope to speed up batch-1 greedy decoding, measured.

At one sentence a decoding step reads all of the decoder's float32 weights
(the output projection the largest of them) to do little arithmetic with
them, so its speed is set by memory bandwidth and by the cost of launching
many small ops. Two changes could help either:

* **XLA**: the same greedy loop (`keras_transformer.decoding.greedy_decode`)
  in a `tf.function(jit_compile=True)`, which fuses the small ops;
* **bfloat16**: the same model with every weight and activation in
  bfloat16 (`dtype="bfloat16"`), which halves the bytes a step reads.

Each is timed against the float32 graph we export, interleaved
(`bench_common.time_interleaved`: the order changes from round to round) on
one source sentence decoding `--tokens` tokens with `[END]` suppressed, median
of `--repeats`. It also times the step's largest product alone (one row times
the output projection, `[1, d] x [d, V]`) in float32, bfloat16 and int8
(`tf.matmul` with `output_type=tf.int32`, what int8 weights would run). With `--run-dir`
(a trained translator's run folder) it also decodes `--sentences` test
verses of `bible:es-en` with float32 and with bfloat16, and prints how many
come out token-for-token identical and both BLEU scores (sacrebleu, needs
`make bench-venv`). Random weights say nothing about agreement.

Usage (from the repository root):

    .venv/bin/python benchmarks/decode_alternatives.py --threads 1
    .venv/bin/python benchmarks/decode_alternatives.py --threads 1 \\
        --run-dir benchmarks/results/translation_quality/runs/bible_es-en-60min-ours
"""

import argparse
import statistics

import numpy as np
import tensorflow as tf
from bench_common import set_tensorflow_threads, time_interleaved
from decode_speed import _model_and_tokenizers, _never_end

from keras_transformer.data import load_translation_data
from keras_transformer.decoding import greedy_decode
from keras_transformer.models import Seq2SeqTransformer
from keras_transformer.text import trim_shared_padding
from keras_transformer.text.wordpiece import END, START


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", help="a translator run folder (model.keras and vocabularies)")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--sentences", type=int, default=200, help="test verses for the agreement check"
    )
    parser.add_argument("--threads", type=int, default=0, help="TensorFlow threads (0: all)")
    args = parser.parse_args()
    set_tensorflow_threads(args.threads)

    data = load_translation_data(
        "bible:es-en", seed=1337, max_examples=20000 if args.run_dir else 2000
    )
    model, source_tokenizer, target_tokenizer, weights = _model_and_tokenizers(args.run_dir, data)
    low_precision = _bfloat16_copy(model)
    start_id, end_id = target_tokenizer.token_id(START), target_tokenizer.token_id(END)

    def encode(texts):
        return trim_shared_padding(
            source_tokenizer.encode(tf.constant(texts), model.sequence_length)
        )

    def greedy(some_model, jit_compile=False):
        return tf.function(
            lambda source_ids: greedy_decode(some_model, source_ids, args.tokens, start_id, end_id),
            jit_compile=jit_compile,
        )

    if args.run_dir:
        _agreement(
            data, encode, greedy(model), greedy(low_precision), target_tokenizer, args.sentences
        )

    _never_end(model, end_id)
    _never_end(low_precision, end_id)
    decoders = {
        "float32 graph (exported)": greedy(model),
        "float32 XLA": greedy(model, jit_compile=True),
        "bfloat16 graph": greedy(low_precision),
    }
    one_sentence = encode(data.test.sources[:1])
    reference = decoders["float32 graph (exported)"](one_sentence).numpy()
    for name, decode in decoders.items():
        # also the warm-up (XLA compiles)
        same = np.array_equal(decode(one_sentence).numpy(), reference)
        print(f"{name}: same tokens as the float32 graph: {same}", flush=True)
    calls = {name: lambda decode=decode: decode(one_sentence) for name, decode in decoders.items()}
    seconds = time_interleaved(calls, args.repeats, wait=lambda token_ids: token_ids.numpy())
    _time_products(model.d_model, model.target_vocabulary_size, args.repeats)
    baseline = statistics.median(seconds["float32 graph (exported)"])
    print(f"\nWeights: {weights}; batch 1, {args.tokens} tokens, median of {args.repeats}")
    print(f"{'decoder':28s} {'seconds':>8s} {'speed-up':>9s}")
    for name, values in seconds.items():
        median = statistics.median(values)
        print(f"{name:28s} {median:8.3f} {baseline / median:8.2f}x")


def _time_products(d_model, vocabulary_size, repeats, calls=50):
    row = tf.random.normal([1, d_model])
    weights = tf.random.normal([d_model, vocabulary_size])
    row_int8 = tf.cast(tf.clip_by_value(row * 40, -127, 127), tf.int8)
    weights_int8 = tf.cast(tf.clip_by_value(weights * 40, -127, 127), tf.int8)
    weights_bfloat16 = tf.cast(weights, tf.bfloat16)
    products = {
        "float32": tf.function(lambda: tf.matmul(row, weights)),
        "bfloat16": tf.function(lambda: tf.matmul(tf.cast(row, tf.bfloat16), weights_bfloat16)),
        "int8 -> int32": tf.function(
            lambda: tf.matmul(row_int8, weights_int8, output_type=tf.int32)
        ),
    }
    seconds = time_interleaved(
        products, repeats, calls=calls, warmup=1, wait=lambda product: product.numpy()
    )
    baseline = statistics.median(seconds["float32"])
    print(
        f"\nThe output projection's product alone, [1, {d_model}] x [{d_model}, {vocabulary_size}]:"
    )
    for name, values in seconds.items():
        median = statistics.median(values)
        print(f"  {name:14s} {median * 1e6:8.1f} us  {baseline / median:5.2f}x")


def _bfloat16_copy(model):
    config = model.get_config()
    config["dtype"] = "bfloat16"
    copy = Seq2SeqTransformer.from_config(config)
    copy.build()
    copy.set_weights(model.get_weights())
    return copy


def _agreement(data, encode, float32_greedy, bfloat16_greedy, target_tokenizer, sentences):
    import sacrebleu

    sources, references = data.test.sources[:sentences], data.test.targets[:sentences]
    source_ids = encode(sources)
    outputs = {
        "float32": float32_greedy(source_ids).numpy(),
        "bfloat16": bfloat16_greedy(source_ids).numpy(),
    }
    identical = np.mean(
        [np.array_equal(a, b) for a, b in zip(outputs["float32"], outputs["bfloat16"])]
    )
    print(
        f"{sentences} test verses: {identical:.1%} decode token-for-token identically in bfloat16"
    )
    for name, token_ids in outputs.items():
        hypotheses = [
            text.decode("utf-8") for text in target_tokenizer.detokenize(token_ids).numpy()
        ]
        print(f"  greedy BLEU {name}: {sacrebleu.corpus_bleu(hypotheses, [references]).score:.2f}")


if __name__ == "__main__":
    main()
