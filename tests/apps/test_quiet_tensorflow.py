"""The apps quiet TensorFlow's C++ start-up chatter unless the user set
`TF_CPP_MIN_LOG_LEVEL` (apps/__init__.py)."""

import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# What TensorFlow's CUDA build prints while it loads (oneDNN, the CUDA stub)
# and at its first op on a machine without a GPU (cuInit).
CHATTER = ("oneDNN", "cudart_stub", "absl::InitializeLog", "cpu_feature_guard", "cuInit")


def run_predict(trained_classifier, log_level):
    """`python -m apps.predict` on the session's export: TensorFlow loads, then
    runs its first ops (where a machine without a GPU logs cuInit's error)."""
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    env.update(KERAS_BACKEND="tensorflow")
    if log_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = log_level
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "apps.predict",
            trained_classifier.export_dir,
            "goal match team today",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.startswith(f"Model: {trained_classifier.version_dir}\n"), finished.stdout
    return finished.stderr


@pytest.mark.parametrize("log_level", [None, "0"], ids=["unset", "user_set_0"])
def test_start_up_chatter_is_quiet_unless_the_user_sets_the_level(trained_classifier, log_level):
    stderr = run_predict(trained_classifier, log_level)
    chatter = [line for line in stderr.splitlines() if any(marker in line for marker in CHATTER)]
    if log_level is None:
        assert chatter == [], stderr
    else:
        # Proof that the run above had chatter to remove: TensorFlow logs as the user asked.
        assert chatter, stderr


def test_only_chatter_is_dropped_from_what_the_import_wrote(tmp_path, monkeypatch):
    """The caught stderr of an import is written back without TensorFlow's
    INFO and WARNING lines, and in order."""
    module_path = tmp_path / "noisy_module.py"
    module_path.write_text(
        "import os\n"
        "os.write(2, b'WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\\n')\n"
        "os.write(2, b'I0000 00:00:1795499913.699817    6034 port.cc:153] oneDNN custom operations are on.\\n')\n"
        "os.write(2, b'a line of the module\\n')\n"
        "os.write(2, b'W0000 00:00:1795499913.749437    6034 cpu_feature_guard.cc:227] optimized\\n')\n"
        "os.write(2, b'To enable the following instructions: AVX2, rebuild TensorFlow\\n')\n"
        "os.write(2, b'E0000 00:00:1795499917.371998    6034 cuda_platform.cc:52] a real error\\n')\n",
        encoding="utf-8",
    )
    script = (
        "import importlib.util, sys\n"
        "import apps\n"
        f"spec = importlib.util.spec_from_file_location('noisy_module', {str(module_path)!r})\n"
        "spec.loader = apps._QuietLoader(spec.loader)\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "sys.stderr.write('after the import\\n')\n"
    )
    finished = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert finished.returncode == 0, finished.stderr
    assert finished.stderr.splitlines() == [
        "a line of the module",
        "E0000 00:00:1795499917.371998    6034 cuda_platform.cc:52] a real error",
        "after the import",
    ]
