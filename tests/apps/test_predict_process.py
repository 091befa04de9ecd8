"""`keras-transformer predict EXPORT texts...`, run as a user runs it, prints for
every text the label and probabilities that the SavedModel's own
`serving_default` gives, loaded with `tf.saved_model.load` (no project code);
and the apps quiet TensorFlow's C++ start-up chatter unless the user set
`TF_CPP_MIN_LOG_LEVEL` (keras_transformer/cli/__init__.py).

Texts span the classes, words outside the vocabulary and non-ASCII, and a
batch size smaller than the number of texts, so that a text paired with
another's answer, or a batch's rows shifted, shows.

Each fresh process pays for a TensorFlow import, so two runs check everything: the JSON run
with `TF_CPP_MIN_LOG_LEVEL` unset (no chatter), the plain run with the user's level 0
(chatter), both started together when the module starts."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.apps.test_predict import chosen_weights
from tests.classifier_fixtures import CLASS_NAMES, load_export

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TEXTS = [
    "goal match team the city",
    "stocks market shares today",
    "film music actor week",
    "the a of and report",
    "goal stocks film",
    "zebra quantum xylophone",
    "café crème 日本語 🙂",
    "match match match market market actor",
    "x",
]


# What TensorFlow's CUDA build prints while it loads (oneDNN, the CUDA stub)
# and at its first op on a machine without a GPU (cuInit).
CHATTER = ("oneDNN", "cudart_stub", "absl::InitializeLog", "cpu_feature_guard", "cuInit")
LOG_LEVELS = {"json": None, "plain": "0"}  # the user's TF_CPP_MIN_LOG_LEVEL of each run


def start_predict(args, log_level, stdin):
    """`keras-transformer predict ARGS` in a fresh process, reading `stdin` (a file or
    DEVNULL): TensorFlow loads, then runs its first ops (where a machine without a GPU logs
    cuInit's error)."""
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    env.update(PYTHONPATH=REPO_ROOT, KERAS_BACKEND="tensorflow")
    if log_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = log_level
    return subprocess.Popen(
        [sys.executable, "-m", "apps.predict", *args],
        cwd=REPO_ROOT,
        env=env,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )


@pytest.fixture(scope="module", autouse=True)
def predict_processes(trained_classifier, tmp_path_factory):
    """Both runs, started when the module starts: they run beside `saved_model_answers`."""
    stdin_path = tmp_path_factory.mktemp("predict_stdin") / "texts.txt"
    stdin_path.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    with open(stdin_path, encoding="utf-8") as texts_file:
        processes = {
            # Texts as arguments, to the base folder.
            "json": start_predict(
                [trained_classifier.export_dir, "--json", "--batch-size", "2", *TEXTS],
                LOG_LEVELS["json"],
                subprocess.DEVNULL,
            ),
            # One text per line on stdin, to the version folder.
            "plain": start_predict(
                [trained_classifier.version_dir, "--batch-size", "4"],
                LOG_LEVELS["plain"],
                texts_file,
            ),
        }
    yield processes
    for process in processes.values():
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.fixture(scope="module")
def predicted(predict_processes):
    """{run: (stdout, stderr)} once both runs ended, each with exit status 0."""
    outputs = {}
    for name, process in predict_processes.items():
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr[-3000:]
        outputs[name] = stdout, stderr
    return outputs


@pytest.fixture(scope="module")
def saved_model_answers(trained_classifier):
    """(labels, probabilities [N, classes]) from the export's `serving_default`, called directly."""
    import tensorflow as tf

    loaded = load_export(trained_classifier.version_dir)
    outputs = loaded.signatures["serving_default"](text=tf.constant(TEXTS, tf.string))
    labels = [label.decode("utf-8") for label in outputs["label"].numpy()]
    probabilities = outputs["probabilities"].numpy().astype(np.float64)
    # The texts must not all get one answer, or a mix-up between them could not show.
    assert len(set(labels)) >= 2, labels
    assert np.ptp(probabilities, axis=0).max() > 0.05, probabilities
    return labels, probabilities


@pytest.mark.timeout(600)
def test_json_output_equals_the_saved_models_answer(predicted, saved_model_answers):
    labels, probabilities = saved_model_answers
    output = predicted["json"][0]
    lines = output.splitlines()
    assert len(lines) == len(TEXTS), output
    for index, (text, line) in enumerate(zip(TEXTS, lines)):
        answer = json.loads(line)
        assert answer["text"] == text
        assert answer["label"] == labels[index], (text, answer)
        assert list(answer["probabilities"]) == CLASS_NAMES
        # Printed rounded to 4 decimals.
        np.testing.assert_allclose(
            [answer["probabilities"][name] for name in CLASS_NAMES],
            probabilities[index],
            atol=5.01e-5,
            rtol=0,
            err_msg=text,
        )


@pytest.mark.timeout(600)
def test_plain_output_equals_the_saved_models_answer(
    trained_classifier, predicted, saved_model_answers
):
    labels, probabilities = saved_model_answers
    output = predicted["plain"][0]
    lines = output.splitlines()
    transformer, bag = chosen_weights(trained_classifier)
    assert lines[0] == (
        f"Model: {trained_classifier.version_dir} (the Transformer at weight {transformer}, "
        f"the bag of n-grams at {bag})"
    )
    # Per text: "label  top%  'text'", then "    class p  class p ...".
    answers = list(zip(lines[1::2], lines[2::2]))
    assert len(answers) == len(TEXTS) and len(lines) == 1 + 2 * len(TEXTS), output
    for index, (text, (head, detail)) in enumerate(zip(TEXTS, answers)):
        assert head.split()[0] == labels[index], (text, head)
        assert head.endswith(repr(text)), head
        top = float(head.split()[1].rstrip("%")) / 100
        # printed as a 1-decimal percentage
        assert top == pytest.approx(probabilities[index].max(), abs=5.01e-4)
        fields = detail.split()
        assert fields[0::2] == CLASS_NAMES, detail
        # Printed to 3 decimals, rounded once.
        np.testing.assert_allclose(
            [float(value) for value in fields[1::2]],
            probabilities[index],
            atol=5.001e-4,
            rtol=0,
            err_msg=text,
        )


@pytest.mark.parametrize("run", ["json", "plain"], ids=["unset", "user_set_0"])
def test_start_up_chatter_is_quiet_unless_the_user_sets_the_level(predicted, run):
    stderr = predicted[run][1]
    chatter = [line for line in stderr.splitlines() if any(marker in line for marker in CHATTER)]
    if LOG_LEVELS[run] is None:
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
        "import keras_transformer.cli as cli\n"
        f"spec = importlib.util.spec_from_file_location('noisy_module', {str(module_path)!r})\n"
        "spec.loader = cli._QuietLoader(spec.loader)\n"
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
