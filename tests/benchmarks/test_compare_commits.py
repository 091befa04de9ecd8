"""benchmarks/compare_commits.py: which library each run imports, and which ratios it compares."""

import json
import sys

import compare_commits
import pytest


def _fake_library(tree, marker):
    package = tree / "keras_transformer"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"MARKER = {marker!r}\n")


def test_each_run_imports_the_library_of_its_own_tree(tmp_path):
    script = tmp_path / "bench.py"
    script.write_text(
        "import json, sys\n"
        "import keras_transformer\n"
        "with open(sys.argv[sys.argv.index('--output') + 1], 'w') as f:\n"
        "    json.dump({'marker': keras_transformer.MARKER}, f)\n"
    )
    markers = {}
    for label in ("old", "new"):
        _fake_library(tmp_path / label, label)
        output = tmp_path / f"{label}.json"
        compare_commits._run(str(script), [], str(tmp_path / label), str(output))
        markers[label] = json.loads(output.read_text())["marker"]
    assert markers == {"old": "old", "new": "new"}


def test_a_tree_without_the_library_stops_the_run(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="expected keras_transformer from"):
        compare_commits._run(sys.executable, [], str(tmp_path / "empty"), str(tmp_path / "x.json"))


def test_ratios_are_named_by_configuration_and_only_ours_decoders_count():
    layer_speed = {
        "keras": "3.15.1",
        "results": [
            {"name": "b32 d128", "graph": {"ours_ms": 2.0, "ratio": 1.1, "paired_ratio": 1.2}},
            {"name": "b32 d256", "graph": {"ours_ms": 4.0, "ratio": 0.9, "paired_ratio": 0.8}},
        ],
    }
    assert dict(compare_commits._ratios(layer_speed)) == {
        "/results[b32 d128]/graph/ratio": 1.1,
        "/results[b32 d128]/graph/paired_ratio": 1.2,
        "/results[b32 d256]/graph/ratio": 0.9,
        "/results[b32 d256]/graph/paired_ratio": 0.8,
    }
    decode_speed = {
        "rows": [
            {"decoder": "ours greedy", "batch_size": 1, "speedup_vs_tutorial": 7.0},
            {"decoder": "tutorial greedy", "batch_size": 1, "speedup_vs_tutorial": 1.0},
        ]
    }
    assert dict(compare_commits._ratios(decode_speed)) == {
        "/rows[ours greedy 1]/speedup_vs_tutorial": 7.0
    }


def test_the_summary_takes_medians_over_runs_and_divides_new_by_old():
    runs = {
        "old": [{"r": 1.0}, {"r": 3.0}, {"r": 2.0}],
        "new": [{"r": 1.0}, {"r": 1.5}, {"r": 1.0}],
    }
    assert compare_commits._summary(runs) == {"r": {"old": 2.0, "new": 1.0, "new_over_old": 0.5}}
