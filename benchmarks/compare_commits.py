"""One benchmark, two commits of the library, in one run.

Runs a benchmark script of this checkout (`layer_speed.py`,
`train_throughput.py`, `decode_speed.py`, ...) once with the library of an
older commit and once with the library of a newer one (default: this working
tree), `--repeats` times, alternating which goes first (old new, new old, ...),
so drift in the machine's load falls on both alike. The benchmark script, its
peers (Keras' layers, the tutorial's decoder) and its settings are the same in
every run; only `keras_transformer` changes, taken from a `git worktree` of
each commit through `PYTHONPATH` (checked before timing).

The benchmarks time ours against a peer in the same process, so their ratios
(`ratio`, `paired_ratio`, `paired_ours_over_this`, `speedup_vs_tutorial`)
cancel the machine's speed of the moment. The table gives each ratio's median
over the repeats for both commits, and new / old (>= 0.95 means the new commit
kept within 5 % of the old one's speed relative to the peer).

Usage (from the repository root):

    .venv/bin/python benchmarks/compare_commits.py --old 86f2015 -- layer_speed.py --no-xla
    .venv/bin/python benchmarks/compare_commits.py --old 86f2015 --repeats 3 -- \
        train_throughput.py --family classifier --only L2 --rounds 7
    .venv/bin/python benchmarks/compare_commits.py --old 86f2015 -- decode_speed.py
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench_common import write_json

BENCHMARKS = os.path.dirname(os.path.abspath(__file__))
REPOSITORY = os.path.dirname(BENCHMARKS)
WORKING_TREE = "working-tree"
# Keys of the benchmarks' JSON that hold a speed ratio against the in-process peer.
RATIO_KEYS = ("ratio", "paired_ratio", "ours_over_this", "paired_ours_over_this")
# decode_speed.py's rows hold every decoder's speed-up; only ours change between commits.
LABEL_KEYS = ("name", "decoder", "batch_size")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="the older commit (any git revision)")
    parser.add_argument(
        "--new", default=WORKING_TREE, help=f"the newer commit (default: {WORKING_TREE})"
    )
    parser.add_argument(
        "--repeats", type=int, default=2, help="runs of the benchmark per commit (default 2)"
    )
    parser.add_argument(
        "--output",
        default=os.path.join("benchmarks", "results", "compare_commits.json"),
        help="where the summary is written as JSON",
    )
    parser.add_argument("benchmark", help="a script in benchmarks/, e.g. layer_speed.py")
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help="the benchmark's own flags")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    script = os.path.join(BENCHMARKS, args.benchmark)
    if not os.path.isfile(script):
        parser.error(f"no benchmark {args.benchmark!r} in {BENCHMARKS}")
    arguments = [a for a in args.arguments if a != "--"]
    if "--output" in arguments:
        parser.error("leave --output to this script: it gives every run its own file")

    with tempfile.TemporaryDirectory(prefix="compare_commits_") as folder:
        trees = {"old": _tree(args.old, folder, "old"), "new": _tree(args.new, folder, "new")}
        try:
            ratios = {"old": [], "new": []}
            for repeat in range(args.repeats):
                for label in ("old", "new") if repeat % 2 == 0 else ("new", "old"):
                    output = os.path.join(folder, f"{label}-{repeat}.json")
                    print(f"--- {label} ({_revision(args, label)}), run {repeat + 1}", flush=True)
                    _run(script, arguments, trees[label], output)
                    with open(output) as handle:
                        ratios[label].append(dict(_ratios(json.load(handle))))
        finally:
            for label in ("old", "new"):
                if trees[label] != REPOSITORY:
                    _git("worktree", "remove", "--force", trees[label])
    summary = _summary(ratios)
    _print_summary(summary, args)
    write_json(
        args.output,
        {
            "benchmark": args.benchmark,
            "arguments": arguments,
            "old": _revision(args, "old"),
            "new": _revision(args, "new"),
            "repeats": args.repeats,
            "runs": ratios,
            "medians": summary,
        },
    )
    print(f"wrote {args.output}")
    return summary


def _git(*arguments):
    return subprocess.run(
        ["git", "-C", REPOSITORY, *arguments], check=True, capture_output=True, text=True
    ).stdout.strip()


def _revision(args, label):
    revision = getattr(args, label)
    if revision == WORKING_TREE:
        return f"{WORKING_TREE} at {_git('rev-parse', '--short', 'HEAD')}"
    return _git("rev-parse", "--short", revision)


def _tree(revision, folder, label):
    """The folder whose `keras_transformer` is the library at `revision`."""
    if revision == WORKING_TREE:
        return REPOSITORY
    tree = os.path.join(folder, label)
    _git("worktree", "add", "--detach", tree, revision)
    return tree


def _run(script, arguments, tree, output):
    environment = dict(
        os.environ, PYTHONPATH=os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")])
    )
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util; print(importlib.util.find_spec('keras_transformer').origin)",
        ],
        env=environment,
        # The script's folder, as sys.path[0] of the run (`-c` would put the cwd there).
        cwd=os.path.dirname(script),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not imported.startswith(os.path.join(tree, "keras_transformer")):
        raise SystemExit(f"expected keras_transformer from {tree}, Python imports {imported}")
    subprocess.run(
        [sys.executable, script, *arguments, "--output", output],
        env=environment,
        cwd=REPOSITORY,
        check=True,
    )


def _ratios(report, path=""):
    """(path, value) for every speed ratio in a benchmark's JSON report."""
    if isinstance(report, dict):
        for key, value in report.items():
            if key in RATIO_KEYS and isinstance(value, (int, float)):
                yield f"{path}/{key}", float(value)
            elif key == "speedup_vs_tutorial" and str(report.get("decoder", "")).startswith("ours"):
                yield f"{path}/{key}", float(value)
            else:
                yield from _ratios(value, f"{path}/{key}")
    elif isinstance(report, list):
        for index, item in enumerate(report):
            label = index
            if isinstance(item, dict) and any(key in item for key in LABEL_KEYS):
                label = " ".join(str(item[key]) for key in LABEL_KEYS if key in item)
            yield from _ratios(item, f"{path}[{label}]")


def _summary(ratios):
    paths = [path for path in ratios["old"][0] if all(path in run for run in ratios["new"])]
    summary = {}
    for path in paths:
        old = statistics.median(run[path] for run in ratios["old"])
        new = statistics.median(run[path] for run in ratios["new"])
        summary[path] = {"old": old, "new": new, "new_over_old": new / old}
    return summary


def _print_summary(summary, args):
    width = max([len(path) for path in summary] + [5])
    print(
        f"\nRatios against the benchmark's own peer (>= 1: ours not slower), median of "
        f"{args.repeats} runs per commit; old {_revision(args, 'old')}, new "
        f"{_revision(args, 'new')}"
    )
    print(f"{'ratio':{width}}  {'old':>7}  {'new':>7}  {'new/old':>7}")
    for path, row in summary.items():
        print(f"{path:{width}}  {row['old']:7.3f}  {row['new']:7.3f}  {row['new_over_old']:7.3f}")


if __name__ == "__main__":
    main()
