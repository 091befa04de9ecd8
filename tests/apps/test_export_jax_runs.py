"""Runs trained on JAX export under TensorFlow with `python -m apps.export`, and
the SavedModels answer raw strings as the JAX models do.

A subprocess with `KERAS_BACKEND=jax` trains a tiny classifier and a tiny
translator with the training apps (`--no-export`; tokenization still uses
tensorflow-text there) and computes the JAX models' own answers from their
`model.keras`. This process exports both run folders with `apps.export`; a
fresh process that cannot import the project loads the exports with
`tf.saved_model.load` and answers the same texts.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from apps import export as export_app
from tests.apps.test_train_translator import FLAGS as TRANSLATOR_FLAGS
from tests.apps.test_train_translator import write_pairs
from tests.classifier_fixtures import CLASS_NAMES
from tests.classifier_fixtures import MODEL_FLAGS as CLASSIFIER_FLAGS
from tests.classifier_fixtures import write_keyword_csv
from tests.export.fresh_loader import LOADER_HEADER
from tests.export.test_translator_export import fresh_environment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Raw strings for both models: keyword texts and number words, seen and unseen
# combinations, and words neither vocabulary has.
TEXTS = [
    "the team scored a goal in the match",
    "stocks and shares fell on the market today",
    "a new film with music and an actor",
    "uno dos tres",
    "seis cinco cuatro",
    "dos dos uno",
    "zebra quantum xylophone",
]

# The JAX side. The translator's end-of-run samples are greedy translations;
# the library's greedy decoder is a TensorFlow while loop, which cannot run a
# JAX model, so the app is given `cached_greedy` below instead: the same
# algorithm (the model's own `encode`, `initialize_cache` and `decode_step`,
# argmax, zeros after [END]) stepped in Python. It is also what the JAX
# model's translations are computed with: the fair comparison for the export's
# `greedy` signature, which runs the same steps in a `tf.while_loop`.
JAX_SIDE = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import keras
    assert keras.backend.backend() == "jax", keras.backend.backend()
    import tensorflow as tf

    from apps import train_classifier, train_translator
    from keras_transformer.training.run_export import read_run
    from keras_transformer.text.wordpiece import WordPieceTokenizer
    from keras_transformer.training.callbacks import RunFolder
    import keras_transformer.training.translator as translator_training

    def cached_greedy(model, source_ids, max_length, start_id, end_id):
        source_ids = np.asarray(source_ids)
        encoder_output, source_mask = model.encode(source_ids, training=False)
        cache, constants = model.initialize_cache(encoder_output, source_mask, max_length)
        batch_size = len(source_ids)
        tokens = np.full([batch_size], start_id, np.int32)
        finished = np.zeros([batch_size], bool)
        outputs = np.zeros([batch_size, max_length], np.int32)
        for index in range(max_length):
            if finished.all():
                break
            logits, cache = model.decode_step(tokens[:, None], index, cache, constants)
            tokens = np.where(finished, 0, np.argmax(np.asarray(logits), axis=-1)).astype(np.int32)
            outputs[:, index] = tokens
            finished |= tokens == end_id
        return outputs

    translator_training.greedy_decode = cached_greedy

    request = json.loads(sys.argv[1])
    texts = request["texts"]
    answers = {}

    run_dir = request["classifier_run"]
    status = train_classifier.main(request["classifier_argv"])
    assert status == 0, status
    model = keras.models.load_model(os.path.join(run_dir, "model.keras"), compile=False)
    settings = read_run(run_dir).settings
    tokenizer = WordPieceTokenizer(os.path.join(run_dir, "vocabulary.txt"))
    token_ids = tokenizer.encode(tf.constant(texts), model.sequence_length, add_cls=settings.pooling == "cls")
    answers["probabilities"] = np.asarray(model.predict(token_ids.numpy(), verbose=0)).tolist()

    run_dir = request["translator_run"]
    status = train_translator.main(request["translator_argv"])
    assert status == 0, status
    model = keras.models.load_model(os.path.join(run_dir, "model.keras"), compile=False)
    settings = read_run(run_dir).settings
    source, target = translator_training.run_tokenizers(RunFolder(run_dir), settings)
    source_ids = source.encode(tf.constant(texts), settings.sequence_length).numpy()
    generated = cached_greedy(model, source_ids, settings.sequence_length,
                              target.token_id("[START]"), target.token_id("[END]"))
    answers["translations"] = [text.decode() for text in target.detokenize(generated).numpy()]
    answers["backend"] = keras.backend.backend()
    print("ANSWERS " + json.dumps(answers))
    """
)

# The TensorFlow side: LOADER_HEADER's fresh process (the project unimportable,
# `saved_model_cli` on the classifier) loads both exports.
LOADER = LOADER_HEADER + textwrap.dedent(
    """
    import tensorflow_text  # noqa: F401  registers the tokenizer ops
    classifier = tf.saved_model.load(path).signatures["serving_default"](text=tf.constant(texts))
    import os
    translator = tf.saved_model.load(os.environ["TRANSLATOR_EXPORT"])
    result = {
        "probabilities": classifier["probabilities"].numpy().tolist(),
        "labels": [label.decode() for label in classifier["label"].numpy()],
        "greedy": [text.decode() for text in translator.signatures["greedy"](text=tf.constant(texts))["translation"].numpy()],
        "cli": cli,
    }
    print("RESULT " + json.dumps(result))
    """
)


def last_json_line(stdout, prefix):
    [line] = [line for line in stdout.splitlines() if line.startswith(prefix)]
    return json.loads(line[len(prefix):])


@pytest.fixture(scope="module")
def jax_runs(tmp_path_factory):
    """The two run folders trained on JAX, and the JAX models' answers to `TEXTS`."""
    folder = tmp_path_factory.mktemp("jax_runs")
    classifier_run, translator_run = str(folder / "classifier_run"), str(folder / "translator_run")
    request = {
        "texts": TEXTS,
        "classifier_run": classifier_run,
        # XLA: on JAX, every new batch shape is compiled, and one compiled step
        # costs less than the same step run op by op.
        "classifier_argv": [
            "--data", f"csv:{write_keyword_csv(folder / 'keywords.csv')}", *CLASSIFIER_FLAGS,
            "--epochs", "3", "--batch-size", "16", "--learning-rate", "0.005", "--verbose", "0", "--jit-compile",
            "--run-dir", classifier_run, "--no-export",
        ],
        "translator_run": translator_run,
        # No val_chrf: its greedy decoding is TensorFlow's, like the samples'.
        # Steps enough that the greedy translations differ from text to text.
        "translator_argv": [
            "--data", f"tsv:{write_pairs(folder / 'pairs.tsv', count=200)}", *TRANSLATOR_FLAGS,
            "--epochs", "15", "--dropout", "0", "--label-smoothing", "0", "--learning-rate-scale", "2",
            "--patience", "0", "--chrf-pairs", "0", "--monitor", "val_loss", "--jit-compile",
            "--run-dir", translator_run, "--no-export",
        ],
    }
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": ROOT}
    done = subprocess.run(
        [sys.executable, "-c", JAX_SIDE, json.dumps(request)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=420,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    answers = last_json_line(done.stdout, "ANSWERS ")
    assert answers["backend"] == "jax"
    return classifier_run, translator_run, answers


@pytest.fixture(scope="module")
def exported(jax_runs, tmp_path_factory):
    """Both runs exported by `apps.export` here, under TensorFlow: `(classifier, translator)` version folders."""
    classifier_run, translator_run, _ = jax_runs
    folder = tmp_path_factory.mktemp("jax_exports")
    version_dirs = []
    for run_dir, name in ((classifier_run, "classifier"), (translator_run, "translator")):
        assert export_app.main([run_dir, "--export-dir", str(folder / name)]) == 0
        version_dirs.append(str(folder / name / "1"))
    return version_dirs


@pytest.fixture(scope="module")
def loaded_fresh(exported, tmp_path_factory):
    """The exports' answers to `TEXTS` in a process with only tensorflow and tensorflow_text."""
    classifier_dir, translator_dir = exported
    cwd = tmp_path_factory.mktemp("elsewhere")
    texts_path = cwd / "texts.json"
    texts_path.write_text(json.dumps([text.encode().hex() for text in TEXTS]))
    done = subprocess.run(
        # LOADER_HEADER gives sys.argv to saved_model_cli: the translator's folder goes by the environment.
        [sys.executable, "-c", LOADER, classifier_dir, str(texts_path)],
        cwd=cwd, env={**fresh_environment(), "TRANSLATOR_EXPORT": translator_dir}, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return last_json_line(done.stdout, "RESULT ")


def test_jax_classifier_exports_to_the_same_probabilities(jax_runs, loaded_fresh):
    expected = np.asarray(jax_runs[2]["probabilities"])
    answered = np.asarray(loaded_fresh["probabilities"])
    assert answered.shape == (len(TEXTS), len(CLASS_NAMES))
    np.testing.assert_allclose(answered, expected, atol=1e-4)
    assert loaded_fresh["labels"] == [CLASS_NAMES[index] for index in expected.argmax(axis=-1)]


def test_jax_translator_exports_to_the_same_greedy_translations(jax_runs, loaded_fresh):
    translations = jax_runs[2]["translations"]
    # A model that says one thing to every text would match too easily.
    assert len(set(translations)) > 2, translations
    assert loaded_fresh["greedy"] == translations


def test_the_exports_list_their_string_signatures(loaded_fresh):
    assert loaded_fresh["cli"]["status"] == 0
    assert "serving_default" in loaded_fresh["cli"]["stdout"] and "DT_STRING" in loaded_fresh["cli"]["stdout"]
