"""Writes an everyday translation corpus: the Ding dictionary's German -> English examples.

    .venv/bin/python benchmarks/ding_pairs_tsv.py
    .venv/bin/python benchmarks/translation_quality.py ding:de-en

Debian's `trans-de-en` package ships the Ding dictionary
(/usr/share/trans/de-en), one entry a line: `German | German2 :: English |
English2`, the n-th `|`-separated part of one side translating the n-th of
the other, alternatives within a part separated by `; `, annotations in
`{}`, `[]` and `<>`. Besides words and phrases, the parts hold about 20,000
example sentences ("Ich bin erst um vier dort." -> "I won't be there until
four."): short, everyday, far from Bible verses. A part pair is kept when
both sides end in `.`, `?` or `!` and the German side is at least 3 words
starting with a capital; annotations are removed, the first alternative of
each side kept, parentheses around optional words unwrapped, and pairs with
`/`-alternatives (`comes/arrives`) or `…` placeholders dropped, since no
translator should learn to write them. Repeated pairs are kept once. The
TSV (German<TAB>English, no header) is what the `tsv:` pair loader reads.
"""

import argparse
import os
import re

DEFAULT_OUT = "benchmarks/results/ding_de_en.tsv"
DICTIONARY = "/usr/share/trans/de-en"
INSTALL = "apt-get install -y trans-de-en"
MIN_GERMAN_WORDS = 3
SENTENCE_ENDS = (".", "?", "!")

_ANNOTATION = re.compile(r"\s*(?:\{[^{}]*\}|\[[^\[\]]*\]|<[^<>]*>)")


def _clean(part):
    first_alternative = _ANNOTATION.sub("", part).split("; ")[0]
    return " ".join(first_alternative.replace("(", "").replace(")", "").split())


def _is_sentence_pair(german, english):
    return (
        german.endswith(SENTENCE_ENDS)
        and english.endswith(SENTENCE_ENDS)
        and len(german.split()) >= MIN_GERMAN_WORDS
        and german[0].isupper()
        and not any(mark in german + english for mark in ("/", "…"))
    )


def sentence_pairs(lines):
    """The `(german, english)` example-sentence pairs of the dictionary `lines`."""
    pairs, seen = [], set()
    for line in lines:
        if line.startswith("#") or " :: " not in line:
            continue
        german_side, english_side = line.rstrip("\n").split(" :: ", 1)
        german_parts, english_parts = german_side.split(" | "), english_side.split(" | ")
        if len(german_parts) != len(english_parts):
            continue  # no way to tell which part translates which
        for german_part, english_part in zip(german_parts, english_parts):
            pair = (_clean(german_part), _clean(english_part))
            if _is_sentence_pair(*pair) and pair not in seen:
                seen.add(pair)
                pairs.append(pair)
    return pairs


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "out", nargs="?", default=DEFAULT_OUT, help=f"TSV path to write (default {DEFAULT_OUT})"
    )
    args = parser.parse_args(argv)
    if not os.path.isfile(DICTIONARY):
        raise SystemExit(
            f"No Ding dictionary at {DICTIONARY}: run `make bench-venv` or `{INSTALL}` (as root)."
        )
    with open(DICTIONARY, encoding="utf-8") as dictionary:
        pairs = sentence_pairs(dictionary)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as out_file:
        out_file.writelines(f"{german}\t{english}\n" for german, english in pairs)
    print(f"Wrote {len(pairs)} German -> English sentence pairs to {args.out}")


if __name__ == "__main__":
    main()
