"""Writes a short-text topic dataset: fortune-cookie quotes labelled by their fortune file.

    .venv/bin/python benchmarks/fortunes_csv.py
    .venv/bin/python benchmarks/classifier_quality.py csv:benchmarks/results/fortunes.csv

Debian's `fortunes` package files its quotes by topic
(/usr/share/games/fortunes/NAME, entries separated by a line holding `%`).
Six topical files of more than 500 usable entries each are the classes:
jokes, aphorisms and quotations whose topic shows in a few words or not at
all, a harder and noisier signal than news. An entry is kept when it reads
as text: at most 80 words and 12 lines, and at least 60% of its visible
characters letters (which drops ASCII art and tables). Overstrike
sequences (`_\\bX`, the files' underlining) keep their last character,
lines are joined with spaces, and a text filed under two topics is
dropped.
"""

import argparse
import os
import re

from bench_common import write_labelled_csv

DEFAULT_OUT = "benchmarks/results/fortunes.csv"
FORTUNES_DIR = "/usr/share/games/fortunes"
TOPICS = ("computers", "men-women", "people", "politics", "science", "work")
INSTALL = "apt-get install -y fortunes"
MAX_WORDS = 80
MAX_LINES = 12
MIN_LETTER_SHARE = 0.6

_ENTRY_SEPARATOR = re.compile(r"^%[ \t]*$", re.MULTILINE)
_OVERSTRUCK = re.compile(".\b")


def fortune_entries(text):
    """The usable entries of one fortune file's `text`, as one-line strings."""
    entries = []
    for entry in _ENTRY_SEPARATOR.split(_OVERSTRUCK.sub("", text)):
        lines = [line for line in entry.strip("\n").split("\n") if line.strip()]
        visible = "".join(entry.split())
        if not lines or len(lines) > MAX_LINES or len(entry.split()) > MAX_WORDS:
            continue
        if sum(character.isalpha() for character in visible) < MIN_LETTER_SHARE * len(visible):
            continue
        entries.append(" ".join(entry.split()))
    return entries


def topic_rows(entries_by_topic):
    """`(text, topic)` rows from {topic: entries}; a text under two topics is dropped,
    one repeated within a topic kept once."""
    topics_of = {}
    for topic, entries in entries_by_topic.items():
        for entry in entries:
            topics_of.setdefault(entry, set()).add(topic)
    rows, written = [], set()
    for topic, entries in entries_by_topic.items():
        for entry in entries:
            if len(topics_of[entry]) == 1 and entry not in written:
                written.add(entry)
                rows.append((entry, topic))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "out", nargs="?", default=DEFAULT_OUT, help=f"CSV path to write (default {DEFAULT_OUT})"
    )
    args = parser.parse_args(argv)
    entries_by_topic = {}
    for topic in TOPICS:
        path = os.path.join(FORTUNES_DIR, topic)
        if not os.path.isfile(path):
            raise SystemExit(
                f"No fortune file {path}: run `make bench-venv` or `{INSTALL}` (as root)."
            )
        with open(path, encoding="utf-8") as fortune_file:
            entries_by_topic[topic] = fortune_entries(fortune_file.read())
    rows = topic_rows(entries_by_topic)
    write_labelled_csv(args.out, rows)
    counts = {topic: sum(1 for _, label in rows if label == topic) for topic in TOPICS}
    print(f"Wrote {len(rows)} quotes ({counts}) to {args.out}")


if __name__ == "__main__":
    main()
