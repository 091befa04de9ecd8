"""Our default classifier against a TF-IDF + logistic-regression baseline.

    .venv/bin/python benchmarks/classifier_quality.py bbc
    .venv/bin/python benchmarks/classifier_quality.py csv:my.csv --text-column t --label-column y

Both train on the same seeded training split (the baseline on train +
validation, which it has no other use for; ours uses validation for early
stopping) and are scored on the same test split. Ours trains with the
default settings of `apps.train_classifier` under a wall-clock budget
(`--minutes`, default 10). Prints both accuracies and macro-F1s and writes
them to benchmarks/results/classifier_quality_<data>.json.
"""

import argparse
import dataclasses
import json
import os
import re
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from keras_transformer.data import load_classification_data  # noqa: E402
from keras_transformer.training.evaluation import classification_report  # noqa: E402


def tfidf_baseline(data):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    started = time.monotonic()
    baseline = make_pipeline(
        TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), min_df=2),
        LogisticRegression(C=10.0, max_iter=2000),
    )
    baseline.fit(
        data.train.texts + data.validation.texts,
        list(data.train.labels) + list(data.validation.labels),
    )
    predictions = baseline.predict(data.test.texts)
    report = classification_report(data.test.labels, predictions, data.class_names)
    report["training_seconds"] = round(time.monotonic() - started, 1)
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", nargs="?", default="bbc")
    parser.add_argument("--text-column", default=None)
    parser.add_argument("--label-column", default=None)
    parser.add_argument("--minutes", type=float, default=10.0, help="training budget for ours")
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--settings", default="{}",
                        help='JSON overrides of ClassifierSettings, e.g. \'{"epochs": 8}\'')
    parser.add_argument("--run-dir", default="benchmarks/results/classifier_quality_run")
    args = parser.parse_args(argv)

    from keras_transformer.training.classifier import ClassifierSettings
    from keras_transformer.training.classifier import train_classifier

    data = load_classification_data(
        args.data, text_column=args.text_column, label_column=args.label_column, seed=args.seed
    )
    print(f"{data.name}: {len(data.train)} train / {len(data.validation)} validation / "
          f"{len(data.test)} test, {data.num_classes} classes", flush=True)

    baseline = tfidf_baseline(data)
    print(f"TF-IDF + logistic regression: accuracy {baseline['accuracy']:.4f}, "
          f"macro-F1 {baseline['macro_f1']:.4f} ({baseline['training_seconds']} s)", flush=True)

    settings = ClassifierSettings(seed=args.seed, **json.loads(args.settings))
    started = time.monotonic()
    run = train_classifier(data, settings, args.run_dir, time_budget_minutes=args.minutes, verbose=2)
    total_seconds = time.monotonic() - started
    ours = run.report

    gap = ours["accuracy"] - baseline["accuracy"]
    print()
    print(f"{'model':<32} {'accuracy':>9} {'macro-F1':>9} {'train s':>8}")
    print(f"{'TF-IDF + logistic regression':<32} {baseline['accuracy']:>9.4f} "
          f"{baseline['macro_f1']:>9.4f} {baseline['training_seconds']:>8.0f}")
    print(f"{'keras_transformer classifier':<32} {ours['accuracy']:>9.4f} "
          f"{ours['macro_f1']:>9.4f} {run.training_seconds:>8.0f}")
    print(f"accuracy gap (ours - baseline): {gap:+.4f}; epochs {run.epochs_completed}"
          f"{' (stopped by the time budget)' if run.stopped_by_time_budget else ''}; "
          f"vocabulary + training + evaluation {total_seconds:.0f} s")

    os.makedirs("benchmarks/results", exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9]+", "_", args.data).strip("_")
    results_path = f"benchmarks/results/classifier_quality_{slug}.json"
    with open(results_path, "w") as results_file:
        json.dump(
            {
                "data": args.data,
                "minutes": args.minutes,
                "baseline": {k: baseline[k] for k in ("accuracy", "macro_f1", "training_seconds")},
                "ours": {
                    "accuracy": ours["accuracy"],
                    "macro_f1": ours["macro_f1"],
                    "training_seconds": round(run.training_seconds, 1),
                    "epochs_completed": run.epochs_completed,
                    "stopped_by_time_budget": run.stopped_by_time_budget,
                    "settings": dataclasses.asdict(settings),
                },
                "accuracy_gap": gap,
            },
            results_file,
            indent=2,
        )
    print(f"Results written to {results_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
