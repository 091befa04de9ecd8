"""Training after tokenization runs to the end on JAX where TensorFlow cannot be imported.

One subprocess (`tests/no_tensorflow.py`) runs tiny classifier and
translator runs (`tests/training/tiny_runs.py`) through the run-folder flow:
an uninterrupted run, a run stopped after its first epoch then resumed from
its backup, and a run stopped by its time budget.
"""

import json
import os

import pytest

from tests.no_tensorflow import run_without_tensorflow

# LLVM's expensive passes off, as in tests/conftest.py (which says why not a lower
# XLA optimization level): the runs are compiled once and train a few steps.
FAST_COMPILE = {"XLA_FLAGS": "--xla_llvm_disable_expensive_passes=true"}

RUNS = """
import json, os, sys
from keras_transformer.training.callbacks import tensorboard
from tests.training.tiny_runs import run_classifier, run_translator
root = sys.argv[1] if len(sys.argv) > 1 else {root!r}
out = {{"tensorboard": [tensorboard(os.path.join(root, "logs"), verbose=1),
                       tensorboard(os.path.join(root, "logs"), verbose=1)]}}
whole, _ = run_classifier(os.path.join(root, "classifier_whole"))
out["classifier_whole"] = whole.history
cut, folder = run_classifier(os.path.join(root, "classifier_cut"), crash_after=0)
out["classifier_backup_after_crash"] = folder.has_backup()
resumed, folder = run_classifier(os.path.join(root, "classifier_cut"))
out["classifier_resumed"] = resumed.history
budget, _ = run_classifier(
    os.path.join(root, "classifier_budget"), epochs=5, time_budget_minutes=1e-6
)
out["classifier_budget"] = [budget.stopped_by_time_budget, budget.history]
whole, folder, samples = run_translator(os.path.join(root, "translator_whole"))
out["translator_whole"] = whole.history
out["translator_best"] = folder.read_best_epoch()
out["samples"] = samples
run_translator(os.path.join(root, "translator_cut"), crash_after=0)
resumed, _, _ = run_translator(os.path.join(root, "translator_cut"))
out["translator_resumed"] = resumed.history
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    result = run_without_tensorflow(RUNS.format(root=str(root)), timeout=480, env=FAST_COMPILE)
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, result.stdout[-3000:]
    return root, json.loads(lines[-1].removeprefix("RESULT ")), result.stdout


def test_tensorboard_is_skipped_with_one_notice(runs):
    root, out, stdout = runs
    assert out["tensorboard"] == [[], []]
    assert stdout.count("TensorBoard logs need TensorFlow; not written") == 1
    assert not os.path.exists(root / "classifier_whole" / "logs")


@pytest.mark.parametrize("kind", ["classifier", "translator"])
def test_runs_leave_their_folder(runs, kind):
    root, out, _ = runs
    for name in ("whole", "cut"):
        folder = root / f"{kind}_{name}"
        for file in (
            "history.csv",
            "learning_curves.png",
            "model.keras",
            "checkpoints/best.keras",
            "checkpoints/best_epoch.json",
        ):
            assert (folder / file).is_file(), (folder, file)
        assert not (folder / "backup").exists()  # a finished run drops its backup
    assert len(out[f"{kind}_whole"]["loss"]) == 2


@pytest.mark.parametrize("kind", ["classifier", "translator"])
def test_a_resumed_run_trains_as_the_uninterrupted_one(runs, kind):
    """Same weights after epoch 1 (the backup) and the same batches in epoch 2 (the
    order a function of seed and epoch), so the same history, epoch 2 included."""
    _, out, _ = runs
    if kind == "classifier":
        assert out["classifier_backup_after_crash"]
    whole, resumed = out[f"{kind}_whole"], out[f"{kind}_resumed"]
    assert sorted(whole) == sorted(resumed)
    for metric in whole:
        assert resumed[metric] == pytest.approx(whole[metric], rel=1e-5, abs=1e-6), metric


def test_the_time_budget_stops_training(runs):
    _, out, _ = runs
    stopped, history = out["classifier_budget"]
    assert stopped and len(history["loss"]) == 1  # of 5 epochs


def test_the_translator_logs_val_chrf_and_translates_samples(runs):
    _, out, _ = runs
    chrf = out["translator_whole"]["val_chrf"]
    assert len(chrf) == 2 and all(0.0 <= value <= 100.0 for value in chrf)
    assert out["translator_best"]["monitor"] == "val_chrf"
    assert out["translator_best"]["value"] == max(chrf)
    assert len(out["samples"]) == 4 and all(isinstance(text, str) for text in out["samples"])


def test_the_harness_fails_a_run_that_imports_tensorflow():
    with pytest.raises(AssertionError, match="exit status"):
        run_without_tensorflow("import tensorflow", timeout=60)
    with pytest.raises(AssertionError, match="exit status"):
        run_without_tensorflow("import tensorflow_text", timeout=60)
