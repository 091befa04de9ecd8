"""TF-IDF + logistic regression on word n-grams against the same on WordPiece n-grams.

    .venv/bin/python benchmarks/tfidf_features.py     # the suite's corpora, seed 1337
    .venv/bin/python benchmarks/tfidf_features.py --corpora bbc --seed 1

What our bag of n-grams can reach with its features: scikit-learn's
`TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), min_df=2)` and
`LogisticRegression(C)` fit on the training split only (as ours fits first),
scored by test accuracy, once on words (scikit-learn's tokens, as the TF-IDF
arm of classifier_quality.py) and once on the WordPiece pieces of the
vocabulary our default run of that split built (run classifier_quality.py's
`ours` arm on the split first), cut at its sequence length as ours sees them,
then uncut, then joined back into words at `##` (whole texts, keeping the
words of two or more word characters, as scikit-learn's token pattern does),
the joined words cut, and both units in one bag (cut and whole): what
separates our features from the words, the cut or the units.

With `--ours`, three more columns: our `BagOfNgrams` itself fit as the
same logistic regression (`keras_transformer.training.classifier.bag_of_ngrams`, penalty
`1 / (2 C n)`) on the ids our run's bag sees (cut at its `ngram_length`), with
its units as `--ngram-units` sets them: the pieces, the words they spell,
and both.

    .venv/bin/python benchmarks/tfidf_features.py --corpora bbc --seed 1 --c 10 --ours
"""

import argparse
import json
import os
import re
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import classifier_quality


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", default=",".join(classifier_quality.SUITE))
    parser.add_argument("--seed", type=int, default=classifier_quality.DEFAULT_SEED)
    parser.add_argument("--c", default="3,10,30", help="the regression's C values, comma-separated")
    parser.add_argument(
        "--ours", action="store_true", help="also our BagOfNgrams on pieces, words and both"
    )
    args = parser.parse_args(argv)

    import numpy as np
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from keras_transformer.data import load_classification_data
    from keras_transformer.text.wordpiece import WordPieceTokenizer

    print(
        "| corpus | seed | C | words | pieces, cut | pieces, whole texts | pieces joined into "
        "words, whole texts "
        "| joined words, cut | pieces + joined words, cut | pieces + joined words, whole texts |"
        + (" ours: pieces | ours: words | ours: both |" if args.ours else "")
    )
    print("|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if args.ours else ""))
    for name in args.corpora.split(","):
        data = load_classification_data(classifier_quality.corpus_source(name), seed=args.seed)
        run_dir = os.path.join(classifier_quality.results_dir(args.seed), "runs", f"{name}-ours")
        if not os.path.exists(os.path.join(run_dir, "settings.json")):
            sys.exit(
                f"error: {run_dir} has no run: run classifier_quality.py {name} --arms ours --seed "
                f"{args.seed} first"
            )
        with open(os.path.join(run_dir, "settings.json")) as settings_file:
            run_settings = json.load(settings_file)["settings"]
        sequence_length = run_settings["sequence_length"]
        # What our bag of n-grams reads: up to its `ngram_length` where the run has one.
        ngram_length = max(sequence_length, run_settings.get("ngram_length") or 0)
        tokenizer = WordPieceTokenizer(os.path.join(run_dir, "vocabulary.txt"))

        with open(os.path.join(run_dir, "vocabulary.txt"), encoding="utf-8") as vocabulary_file:
            vocabulary = vocabulary_file.read().splitlines()

        def pieces(texts, cut=None):
            return [
                " ".join(f"t{piece}" for piece in ids[:cut])
                for ids in tokenizer.tokenize(texts).to_list()
            ]

        def joined_words(texts, cut=None, prefix=""):
            texts_words = []
            for ids in tokenizer.tokenize(texts).to_list():
                words = []
                for piece in ids[:cut]:
                    if vocabulary[piece].startswith("##") and words:
                        words[-1] += vocabulary[piece][2:]
                    else:
                        words.append(vocabulary[piece])
                texts_words.append(
                    " ".join(prefix + word for word in words if re.fullmatch(r"\w\w+", word))
                )
            return texts_words

        train, test = data.train, data.test
        inputs = {
            "words": (train.texts, test.texts),
            "pieces": (pieces(train.texts, sequence_length), pieces(test.texts, sequence_length)),
            "whole": (pieces(train.texts), pieces(test.texts)),
            "joined": (joined_words(train.texts), joined_words(test.texts)),
            "joined, cut": (
                joined_words(train.texts, sequence_length),
                joined_words(test.texts, sequence_length),
            ),
        }
        # Both kinds of feature in one bag (one norm), as one model could hold them; the
        # words are marked so that no word is read as a piece.
        for kind, cut in (("pieces + joined, cut", sequence_length), ("pieces + joined", None)):
            inputs[kind] = tuple(
                [
                    f"{a} {b}"
                    for a, b in zip(pieces(texts, cut), joined_words(texts, cut, prefix="w_"))
                ]
                for texts in (train.texts, test.texts)
            )
        for c in [float(value) for value in args.c.split(",")]:
            accuracies = {}
            for kind, (train_inputs, test_inputs) in inputs.items():
                pattern = r"(?u)\b\w\w+\b" if kind == "words" else r"\S+"
                model = make_pipeline(
                    TfidfVectorizer(
                        sublinear_tf=True, ngram_range=(1, 2), min_df=2, token_pattern=pattern
                    ),
                    LogisticRegression(C=c, max_iter=3000),
                )
                model.fit(train_inputs, train.labels)
                accuracies[kind] = float(
                    np.mean(model.predict(test_inputs) == np.asarray(test.labels))
                )
            if args.ours:
                for kind, features in (
                    ("ours: pieces", ("pieces",)),
                    ("ours: words", ("words",)),
                    ("ours: both", ("pieces", "words")),
                ):
                    accuracies[kind] = ours_accuracy(
                        tokenizer, vocabulary, ngram_length, data, features, c
                    )
            print(
                f"| `{name}` | {args.seed} | {c:g} | "
                + " | ".join(f"{accuracy:.4f}" for accuracy in accuracies.values())
                + " |",
                flush=True,
            )


def ours_accuracy(tokenizer, vocabulary, length, data, features, c):
    """Test accuracy of our BagOfNgrams with `features`, fit alone on the training split as
    `LogisticRegression(C=c)` is, on the ids our run sees."""
    import numpy as np
    import tensorflow as tf

    from keras_transformer.layers import BagOfNgrams
    from keras_transformer.training.classifier.bag_of_ngrams import fit_logistic_regression
    from keras_transformer.training.classifier.data_rules import ngram_buckets_for

    train_ids = tokenizer.encode(tf.constant(data.train.texts), length).numpy()
    test_ids = tokenizer.encode(tf.constant(data.test.texts), length).numpy()
    buckets, _ = ngram_buckets_for(train_ids)
    layer = BagOfNgrams(
        len(vocabulary),
        len(data.class_names),
        num_buckets=buckets,
        num_word_buckets=buckets,
        use_bias=True,
    )
    layer.set_vocabulary(vocabulary)
    layer.adapt(train_ids, features=features)
    fit_logistic_regression(layer, train_ids, data.train.labels, 1.0 / (2 * c * len(train_ids)))
    predicted = np.argmax(np.asarray(layer(test_ids)), axis=1)
    return float(np.mean(predicted == np.asarray(data.test.labels)))


if __name__ == "__main__":
    main()
