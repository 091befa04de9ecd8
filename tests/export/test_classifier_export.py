"""The classifier SavedModel from `apps.train_classifier`, loaded the ways its users
load it: in a process that cannot import this project (TF2 and the TF1 session
loader TensorFlow Serving uses), and listed by `saved_model_cli`. And an export
that fails half-way leaves the versions before it as they were."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

from keras_transformer.export import export_classifier
from keras_transformer.export.parts import attention_notice, read_parts
from tests.classifier_fixtures import CLASS_NAMES, load_export, load_keras_model, snapshot
from tests.export.fresh_loader import LOADER_HEADER

# Edge cases first, then one keyword text per class in CLASS_NAMES order
# (business, culture, sport).
EDGE_TEXTS = [b"", b"   ", b"\xff\xfe\xfa", b"goal " * 200_000 + b"x"]  # the last is 1 MB
KEYWORD_TEXTS = [b"stocks market shares", b"film music actor", b"goal match team"]
TEXTS = EDGE_TEXTS + KEYWORD_TEXTS

# Runs with only tensorflow and tensorflow_text. Lists the export with
# `saved_model_cli show --all`, then loads it twice: with `tf.saved_model.load`
# (TF2) and with the TF1 session loader, feeding and fetching the
# `serving_default` signature's tensors by name.
LOADER = LOADER_HEADER + textwrap.dedent(
    """
    import tensorflow_text  # noqa: F401  registers the tokenizer ops
    model = tf.saved_model.load(path)
    outputs = model.signatures["serving_default"](text=tf.constant(texts, tf.string))
    result = {
        "probabilities": outputs["probabilities"].numpy().tolist(),
        "probabilities_dtype": outputs["probabilities"].dtype.name,
        "labels": [label.decode("utf-8") for label in outputs["label"].numpy()],
    }
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        signature = meta_graph.signature_def["serving_default"]
        probabilities, labels = session.run(
            [signature.outputs["probabilities"].name, signature.outputs["label"].name],
            {signature.inputs["text"].name: texts},
        )
    result["tf1_probabilities"] = probabilities.tolist()
    result["tf1_labels"] = [label.decode("utf-8") for label in labels]
    result["cli"] = cli
    print("RESULT " + json.dumps(result))
    """
)


def fresh_environment():
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return env


@pytest.fixture(scope="module", autouse=True)
def outside_process(trained_classifier, tmp_path_factory):
    """Starts the loader script (saved_model_cli's listing included) in a fresh
    process from an empty folder when the module starts: it runs while this
    process does the in-process tests."""
    cwd = tmp_path_factory.mktemp("elsewhere")
    texts_path = cwd / "texts.json"
    texts_path.write_text(json.dumps([text.hex() for text in TEXTS]))
    process = subprocess.Popen(
        [sys.executable, "-c", LOADER, trained_classifier.version_dir, str(texts_path)],
        cwd=cwd,
        env=fresh_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    yield process
    if process.poll() is None:
        process.kill()
        process.communicate()


@pytest.fixture(scope="module")
def loaded_outside(outside_process):
    stdout, stderr = outside_process.communicate(timeout=300)
    stderr = stderr.decode(errors="replace")
    assert outside_process.returncode == 0, stderr[-3000:]
    [line] = [
        line for line in stdout.decode(errors="replace").splitlines() if line.startswith("RESULT ")
    ]
    result = json.loads(line[len("RESULT ") :])
    result["stderr"] = stderr
    return result


def test_export_answers_as_the_trained_model(trained_classifier):
    import tensorflow as tf

    from keras_transformer.text import WordPieceTokenizer

    texts = [text.decode("utf-8", errors="replace") for text in TEXTS if len(text) < 1000]
    model = load_keras_model(os.path.join(trained_classifier.run_dir, "model.keras"))
    tokenizer = WordPieceTokenizer(os.path.join(trained_classifier.run_dir, "vocabulary.txt"))
    expected = model.predict(
        tokenizer.encode(tf.constant(texts), model.sequence_length).numpy(), verbose=0
    )
    exported = load_export(trained_classifier.version_dir)
    served = exported.signatures["serving_default"](text=tf.constant(texts))[
        "probabilities"
    ].numpy()
    np.testing.assert_allclose(served, expected, atol=1e-5)


def test_attention_signature_and_class_names(trained_classifier):
    import tensorflow as tf

    with open(
        os.path.join(trained_classifier.version_dir, "assets.extra", "class_names.txt"),
        encoding="utf-8",
    ) as names_file:
        assert names_file.read().splitlines() == CLASS_NAMES
    exported = load_export(trained_classifier.version_dir)
    outputs = exported.signatures["attention"](text=tf.constant(["goal match team", ""]))
    tokens = outputs["tokens"].numpy()
    scores = outputs["attention_scores"].numpy()
    pieces = [token.decode() for token in tokens[0] if token]
    assert "".join(piece.removeprefix("##") for piece in pieces) == "goalmatchteam"
    length = len(pieces)
    # Trimmed to the longest text, not the model's sequence_length (32).
    assert tokens.shape == (2, length) and length < 32
    assert not any(tokens[0][length:]) and not any(tokens[1])  # "" at padding
    assert scores.shape == (2, 1, 2, length, length)  # [batch, layers, heads, T, T]
    # Each real token's attention is a distribution over the real tokens only.
    np.testing.assert_allclose(scores[0, :, :, :length, :length].sum(axis=-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(scores[0, :, :, :length, length:], 0.0, atol=1e-6)


def test_the_parts_weights_travel_with_the_export(trained_classifier):
    with open(os.path.join(trained_classifier.run_dir, "metrics.json")) as metrics_file:
        combination = json.load(metrics_file)["bag_of_ngrams"]
    with open(os.path.join(trained_classifier.run_dir, "settings.json")) as settings_file:
        settings = json.load(settings_file)["settings"]
    assert read_parts(trained_classifier.version_dir) == {
        "transformer_weight": combination["transformer_weight"],
        "transformer_tokens": settings["sequence_length"],
        "bag_weight": combination["bag_weight"],
        "bag_tokens": max(settings["sequence_length"], settings["ngram_length"]),
        "encoder": combination["transformer_weight"] != 0.0,
    }


@pytest.mark.parametrize(
    "parts, says",
    [
        (
            {
                "transformer_weight": 0.0,
                "transformer_tokens": 8,
                "bag_weight": 1.0,
                "bag_tokens": 8,
            },
            "do not change them",
        ),
        (
            {
                "transformer_weight": 1.0,
                "transformer_tokens": 8,
                "bag_weight": 0.5,
                "bag_tokens": 40,
            },
            "reads up to 40 tokens, past the attention's 8",
        ),
        (
            {
                "transformer_weight": 1.0,
                "transformer_tokens": 8,
                "bag_weight": 1.0,
                "bag_tokens": 8,
            },
            "reads up to 8 tokens.",
        ),
    ],
)
def test_the_attention_notice_names_what_the_maps_do_not_show(parts, says):
    assert says in attention_notice(parts)
    alone = {"transformer_weight": 1.0, "transformer_tokens": 8, "bag_weight": None}
    assert attention_notice({**alone, "bag_tokens": None}) is None
    assert attention_notice({**parts, "bag_weight": 0.0, "transformer_weight": 1.0}) is None


def test_no_optimizer_state_in_the_export(trained_classifier):
    import tensorflow as tf

    model = load_keras_model(os.path.join(trained_classifier.run_dir, "model.keras"))
    weights = model.count_params()
    stored = sum(
        int(np.prod(shape))
        for name, shape in tf.train.list_variables(
            os.path.join(trained_classifier.version_dir, "variables", "variables")
        )
        if name.startswith("variables/")
    )
    # The weights (plus a few dropout seed states); AdamW's two moments per
    # weight would triple it.
    assert weights <= stored < 1.5 * weights


def test_a_failed_export_leaves_earlier_versions_alone(trained_classifier, tmp_path, monkeypatch):
    from keras_transformer.text import WordPieceTokenizer

    base = str(tmp_path / "export")
    shutil.copytree(trained_classifier.export_dir, base)
    before = snapshot(base)
    model = keras.models.load_model(os.path.join(trained_classifier.run_dir, "model.keras"))
    tokenizer = WordPieceTokenizer(os.path.join(trained_classifier.run_dir, "vocabulary.txt"))
    seen = []

    def write_half_then_fail(self, filepath, *args, **kwargs):
        os.makedirs(os.path.join(filepath, "variables"), exist_ok=True)
        with open(os.path.join(filepath, "saved_model.pb"), "wb") as partial:
            partial.write(b"\x08\x01partial")
        seen.append(filepath)
        raise OSError("No space left on device")

    # keras.export.ExportArchive() hands back an instance of a backend class.
    archive_class = type(keras.export.ExportArchive())
    monkeypatch.setattr(archive_class, "write_out", write_half_then_fail)
    with pytest.raises(OSError, match="No space left"):
        export_classifier(model, tokenizer, CLASS_NAMES, base)
    assert len(seen) == 1 and os.path.dirname(seen[0]) == base  # it did start writing
    assert sorted(os.listdir(base)) == ["1"]  # no version 2, no .staging-* leftover
    assert snapshot(base) == before


# --- the outside process's answers (it ran while the tests above did) ---------------


def test_export_loads_and_answers_without_the_project(loaded_outside):
    probabilities = np.asarray(loaded_outside["probabilities"])
    assert loaded_outside["probabilities_dtype"] == "float32"
    assert probabilities.shape == (len(TEXTS), len(CLASS_NAMES))
    assert np.all(np.isfinite(probabilities))
    assert np.all(probabilities >= 0)
    np.testing.assert_allclose(probabilities.sum(axis=-1), 1.0, atol=1e-5)
    labels = loaded_outside["labels"]
    assert len(labels) == len(TEXTS)
    assert set(labels) <= set(CLASS_NAMES)
    # The label is the most probable class.
    assert labels == [CLASS_NAMES[index] for index in probabilities.argmax(axis=-1)]
    # Texts without a single token all pool to the same zero vector.
    np.testing.assert_allclose(probabilities[0], probabilities[1], atol=1e-6)
    assert labels[len(EDGE_TEXTS) :] == CLASS_NAMES


def test_tf1_session_loader_answers_as_the_tf2_loader(loaded_outside):
    np.testing.assert_allclose(
        np.asarray(loaded_outside["tf1_probabilities"]),
        np.asarray(loaded_outside["probabilities"]),
        atol=1e-5,
    )
    assert loaded_outside["tf1_labels"] == loaded_outside["labels"]


def test_saved_model_cli_lists_the_string_signatures(loaded_outside):
    status, stdout = loaded_outside["cli"]["status"], loaded_outside["cli"]["stdout"]
    assert status == 0, loaded_outside["stderr"][-3000:]
    sections = {}
    for block in stdout.split("signature_def['")[1:]:
        name, _, body = block.partition("']")
        sections[name] = body
    assert {"serving_default", "attention"} <= set(sections)
    serving = sections["serving_default"]
    inputs, _, outputs = serving.partition("contains the following output(s)")
    assert "inputs['text']" in inputs and "dtype: DT_STRING" in inputs
    assert "outputs['probabilities']" in outputs and "outputs['label']" in outputs
    assert "DT_FLOAT" in outputs and "DT_STRING" in outputs
    assert f"shape: (-1, {len(CLASS_NAMES)})" in outputs
    attention_inputs = sections["attention"].partition("contains the following output(s)")[0]
    assert "inputs['text']" in attention_inputs and "dtype: DT_STRING" in attention_inputs
