"""`python -m apps.predict EXPORT texts...`, run as a user runs it, prints for
every text the label and probabilities that the SavedModel's own
`serving_default` gives, loaded with `tf.saved_model.load` (no project code).

Texts span the classes, words outside the vocabulary and non-ASCII, and a
batch size smaller than the number of texts, so that a text paired with
another's answer, or a batch's rows shifted, shows."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.classifier_fixtures import CLASS_NAMES

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


def run_predict(*args, stdin=None):
    environment = dict(os.environ, PYTHONPATH=REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    completed = subprocess.run(
        [sys.executable, "-m", "apps.predict", *args],
        cwd=REPO_ROOT,
        env=environment,
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout


@pytest.fixture(scope="module")
def saved_model_answers(trained_classifier):
    """(labels, probabilities [N, classes]) from the export's `serving_default`, called directly."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the tokenizer ops of the export

    loaded = tf.saved_model.load(trained_classifier.version_dir)
    outputs = loaded.signatures["serving_default"](text=tf.constant(TEXTS, tf.string))
    labels = [label.decode("utf-8") for label in outputs["label"].numpy()]
    probabilities = outputs["probabilities"].numpy().astype(np.float64)
    # The texts must not all get one answer, or a mix-up between them could not show.
    assert len(set(labels)) >= 2, labels
    assert np.ptp(probabilities, axis=0).max() > 0.05, probabilities
    return labels, probabilities


@pytest.mark.timeout(600)
def test_json_output_equals_the_saved_models_answer(trained_classifier, saved_model_answers):
    labels, probabilities = saved_model_answers
    output = run_predict(trained_classifier.export_dir, "--json", "--batch-size", "2", *TEXTS)
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
def test_plain_output_equals_the_saved_models_answer(trained_classifier, saved_model_answers):
    labels, probabilities = saved_model_answers
    # One text per line on stdin, from the version folder this time.
    output = run_predict(
        trained_classifier.version_dir, "--batch-size", "4", stdin="\n".join(TEXTS) + "\n"
    )
    lines = output.splitlines()
    assert lines[0] == f"Model: {trained_classifier.version_dir}"
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
