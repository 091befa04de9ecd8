"""The ONNX exports against the SavedModels of the same models: size on disk, agreement
(largest probability difference, equal labels, equal greedy translations) and seconds per
call at batch 1 and 32, tokenization included on both sides, timed interleaved.

    python benchmarks/onnx_export.py \
        --classifier exported_models/classifier/1 exported_models/classifier-onnx/1 \
        --translator exported_models/translator/1 exported_models/translator-onnx/1 \
        --texts texts.txt --sources sources.txt

Each of `--classifier` and `--translator` takes a SavedModel version folder and the ONNX
export of the same model (`keras_transformer.export.onnx`); `--texts` and `--sources` are
files of one text per line (the first 32 are used).
"""

import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_common import set_tensorflow_threads, time_interleaved  # noqa: E402


def folder_megabytes(folder):
    total = 0
    for root, _, names in os.walk(folder):
        total += sum(os.path.getsize(os.path.join(root, name)) for name in names)
    return total / 1e6


def read_lines(path, count=32):
    with open(path, encoding="utf-8") as file:
        lines = [line.rstrip("\n") for line in file if line.strip()]
    return (lines * count)[:count]


def compare_classifier(saved_model_dir, onnx_dir, texts, rounds):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the export's tokenizer ops

    from keras_transformer.export.onnx_runtime import OnnxClassifier

    serve = tf.saved_model.load(saved_model_dir).signatures["serving_default"]
    onnx_classifier = OnnxClassifier(onnx_dir)
    expected = serve(text=tf.constant(texts))
    probabilities, labels = onnx_classifier.predict(texts)
    report = {
        "saved_model_mb": folder_megabytes(saved_model_dir),
        "onnx_mb": folder_megabytes(onnx_dir),
        "max_probability_difference": float(
            np.abs(probabilities - expected["probabilities"].numpy()).max()
        ),
        "equal_labels": sum(
            label == expected_label.decode()
            for label, expected_label in zip(labels, expected["label"].numpy())
        ),
        "texts": len(texts),
    }
    for batch in (1, 32):
        batch_texts = texts[:batch]
        seconds = time_interleaved(
            {
                "saved_model": lambda: serve(text=tf.constant(batch_texts))["label"].numpy(),
                "onnx": lambda: onnx_classifier.predict(batch_texts),
            },
            rounds=rounds,
            warmup=2,
        )
        for name, values in seconds.items():
            report[f"{name}_ms_batch_{batch}"] = 1000 * statistics.median(values)
    return report


def compare_translator(saved_model_dir, onnx_dir, sources, rounds):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    from keras_transformer.export.onnx_runtime import OnnxTranslator

    greedy = tf.saved_model.load(saved_model_dir).signatures["greedy"]
    onnx_translator = OnnxTranslator(onnx_dir)
    expected = [text.decode() for text in greedy(text=tf.constant(sources))["translation"].numpy()]
    translations = onnx_translator.translate(sources)
    report = {
        "saved_model_mb": folder_megabytes(saved_model_dir),
        "onnx_mb": folder_megabytes(onnx_dir),
        "equal_translations": sum(a == b for a, b in zip(translations, expected)),
        "sources": len(sources),
    }
    for batch in (1, 32):
        batch_sources = sources[:batch]
        seconds = time_interleaved(
            {
                "saved_model": lambda: greedy(text=tf.constant(batch_sources))[
                    "translation"
                ].numpy(),
                "onnx": lambda: onnx_translator.translate(batch_sources),
            },
            rounds=rounds,
            warmup=2,
        )
        for name, values in seconds.items():
            report[f"{name}_ms_batch_{batch}"] = 1000 * statistics.median(values)
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--classifier", nargs=2, metavar=("SAVED_MODEL", "ONNX"))
    parser.add_argument("--translator", nargs=2, metavar=("SAVED_MODEL", "ONNX"))
    parser.add_argument("--texts", help="the classifier's texts, one per line")
    parser.add_argument("--sources", help="the translator's sources, one per line")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=0, help="TensorFlow threads (0: all)")
    args = parser.parse_args(argv)
    set_tensorflow_threads(args.threads)
    if args.classifier:
        report = compare_classifier(*args.classifier, read_lines(args.texts), args.rounds)
        print("classifier", report)
    if args.translator:
        report = compare_translator(*args.translator, read_lines(args.sources), args.rounds)
        print("translator", report)


if __name__ == "__main__":
    main()
