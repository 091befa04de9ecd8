"""Keras' own tests for `keras.layers.MultiHeadAttention`, run against ours.

The test file comes from the installed keras wheel (never copied here) and
runs in a pytest process of its own, on this process' backend, with
`ours_as_keras.py` putting our class where Keras' tests take theirs. Each of
its tests must pass, except those in `KERAS_INTERNALS`: they assert what
only Keras' own class can (tests/README.md gives the same list).
"""

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import keras
import pytest

KERAS_TEST_FILE = os.path.join(
    os.path.dirname(keras.__file__), "src", "layers", "attention", "multi_head_attention_test.py"
)

# Test name -> why our class cannot pass it.
KERAS_INTERNALS = {}


@pytest.fixture(scope="module")
def keras_results(tmp_path_factory):
    """`{test name: "passed" | "failed" | "skipped"}` of Keras' test file against our class."""
    folder = tmp_path_factory.mktemp("keras_suite")
    report = folder / "report.xml"
    # An empty configuration of its own: the repository's pytest.ini (found
    # above the keras wheel when the venv is inside the clone) must not
    # choose which copy of the project is imported; PYTHONPATH does.
    configuration = folder / "pytest.ini"
    configuration.write_text("[pytest]\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    environment = dict(
        os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])
    )
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.keras_suite.ours_as_keras",
            "-p",
            "no:cacheprovider",
            "-c",
            str(configuration),
            f"--rootdir={folder}",
            "-q",
            f"--junitxml={report}",
            f"--basetemp={folder / 'tmp'}",
            "--timeout=300",
            KERAS_TEST_FILE,
        ],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert report.exists(), completed.stdout[-3000:] + completed.stderr[-3000:]
    results = {}
    for case in ElementTree.parse(report).iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = f"failed: {child.get('message', '')[:300]}"
            elif child.tag == "skipped":
                outcome = "skipped"
        results[case.get("name")] = outcome
    return results


def test_keras_tests_ran(keras_results):
    # The file holds 31 test functions, some parameterized into several cases.
    assert len(keras_results) >= 45, keras_results


def test_every_keras_test_passes_but_the_internals(keras_results):
    failed = {
        name: outcome
        for name, outcome in keras_results.items()
        if outcome.startswith("failed") and name not in KERAS_INTERNALS
    }
    assert not failed, "\n".join(f"{name}: {outcome}" for name, outcome in sorted(failed.items()))


def test_the_listed_internals_still_fail(keras_results):
    """A listed test that now passes is no longer Keras-private: drop it from the list."""
    passing = [name for name in KERAS_INTERNALS if keras_results.get(name) == "passed"]
    assert not passing, passing


def test_skips_are_keras_own(keras_results):
    """Keras skips its flash-attention tests on TensorFlow; nothing else may skip."""
    skipped = sorted(name for name, outcome in keras_results.items() if outcome == "skipped")
    allowed = {"test_basics_with_flash_attention", "test_flash_attention_with_errors"}
    if keras.backend.backend() == "tensorflow":
        assert set(skipped) <= allowed, skipped
    else:
        assert not skipped, skipped
