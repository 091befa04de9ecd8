"""Tokenize here, train on JAX where TensorFlow is not, export here: the
SavedModels answer raw strings as the JAX models do.

`apps.tokenize` writes a classifier's and a translator's token folders. A
subprocess with `KERAS_BACKEND=jax`, where `import tensorflow` fails
(`tests/no_tensorflow.py`), trains both with the training apps from
`--data tokens:DIR` and computes the models' own answers from their
`model.keras`: probabilities, and greedy translations by the library's
TensorFlow-free decode loop and detokenizer. `apps.export` exports both run
folders (the classifier's in a TensorFlow process of its own, as a JAX
training app does); a fresh process that cannot import the project loads the
exports with `tf.saved_model.load` and answers the raw strings.
"""

import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from apps import export as export_app
from apps import tokenize as tokenize_app
from keras_transformer.data.tokens import read_token_folder
from keras_transformer.text.wordpiece import WordPieceTokenizer
from keras_transformer.training.runs import PLOTS_NOTICE
from tests.apps.test_train_translator import FLAGS as TRANSLATOR_FLAGS
from tests.apps.test_train_translator import write_pairs
from tests.classifier_fixtures import CLASS_NAMES, write_keyword_csv
from tests.classifier_fixtures import MODEL_FLAGS as CLASSIFIER_FLAGS
from tests.export.fresh_loader import LOADER_HEADER
from tests.export.test_translator_export import fresh_environment
from tests.no_tensorflow import run_without_tensorflow

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

# What shapes the tokens: given to apps.tokenize, not to training (which takes them from the
# folder).
TRANSLATOR_TOKEN_FLAGS = [
    "--max-length",
    "12",
    "--vocab-size",
    "120",
    "--validation-size",
    "8",
    "--test-size",
    "8",
]
TRANSLATOR_TRAINING_FLAGS = [
    flag
    for index, flag in enumerate(TRANSLATOR_FLAGS)
    if flag not in TRANSLATOR_TOKEN_FLAGS[::2]
    and TRANSLATOR_FLAGS[index - 1] not in TRANSLATOR_TOKEN_FLAGS[::2]
]

# The JAX side, without TensorFlow or matplotlib: train from the token folders,
# then answer `TEXTS` (encoded here, with the folders' vocabularies) with each model.
JAX_SIDE = """
import sys
sys.modules["matplotlib"] = None  # the core install, as on a GPU machine: no plots

import json, os
import numpy as np
import keras

from apps import train_classifier, train_translator
from keras_transformer.decoding import greedy_decode_loop
from keras_transformer.text.vocabulary import END, START, detokenize
from keras_transformer.training.runs import RunFolder
from keras_transformer.training.translator.settings import TranslatorSettings
from keras_transformer.training.translator.tokenizing import run_vocabularies

request = json.loads(os.environ["JAX_REQUEST"])
answers = {}

assert train_classifier.main(request["classifier_argv"]) == 0
model = keras.models.load_model(os.path.join(request["classifier_run"], "model.keras"), compile=False)
answers["probabilities"] = np.asarray(
    model.predict(np.asarray(request["classifier_ids"], np.int32), verbose=0)).tolist()

run_dir = request["translator_run"]
assert train_translator.main(request["translator_argv"]) == 0
model = keras.models.load_model(os.path.join(run_dir, "model.keras"), compile=False)
with open(os.path.join(run_dir, "settings.json")) as settings_file:
    settings = TranslatorSettings(**json.load(settings_file)["settings"])
_, target_vocabulary = run_vocabularies(RunFolder(run_dir), settings)
generated = greedy_decode_loop(model, np.asarray(request["translator_ids"], np.int32), settings.sequence_length,
                               target_vocabulary.index(START), target_vocabulary.index(END))
answers["translations"] = detokenize(generated, target_vocabulary)
answers["backend"] = keras.backend.backend()
from keras_transformer.training.distribute import compile_with_xla
answers["xla_without_the_flag"] = compile_with_xla(False)
with open(os.path.join(run_dir, "samples.json")) as samples_file:
    answers["samples"] = json.load(samples_file)
print("ANSWERS " + json.dumps(answers))
"""

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
    return json.loads(line[len(prefix) :])


@pytest.fixture(scope="module")
def token_folders(tmp_path_factory):
    """`(classifier, translator)` token folders written by `apps.tokenize` here, under TensorFlow."""
    folder = tmp_path_factory.mktemp("tokens")
    classifier_tokens, translator_tokens = str(folder / "classifier"), str(folder / "translator")
    assert (
        tokenize_app.main(
            [
                "classifier",
                "--data",
                f"csv:{write_keyword_csv(folder / 'keywords.csv')}",
                "--sequence-length",
                "32",
                "--vocab-size",
                "200",
                "--out",
                classifier_tokens,
            ]
        )
        == 0
    )
    assert (
        tokenize_app.main(
            [
                "translator",
                "--data",
                f"tsv:{write_pairs(folder / 'pairs.tsv', count=200)}",
                *TRANSLATOR_TOKEN_FLAGS,
                "--out",
                translator_tokens,
            ]
        )
        == 0
    )
    return classifier_tokens, translator_tokens


def encode_texts(token_folder, task):
    """`TEXTS` as the token folder's vocabulary and settings encode them (the model inputs the
    export makes).
    """
    tokens = read_token_folder(token_folder, task)
    if task == "classifier":
        tokenizer = WordPieceTokenizer(tokens.vocabulary_files["vocabulary.txt"])
        add_cls = tokens.settings["pooling"] == "cls"
        return tokenizer.encode(
            tf.constant(TEXTS), tokens.settings["sequence_length"], add_cls=add_cls
        ).numpy()
    tokenizer = WordPieceTokenizer(tokens.vocabulary_files["source_vocabulary.txt"])
    # The export encodes sources at the model's `sequence_length`, one above the
    # tokens' (which leaves room for [START] / [END] on targets).
    return tokenizer.encode(tf.constant(TEXTS), tokens.settings["sequence_length"] + 1).numpy()


@pytest.fixture(scope="module")
def jax_runs(token_folders, tmp_path_factory):
    """The two run folders trained on JAX without TensorFlow, and the JAX models' answers to
    `TEXTS`.
    """
    classifier_tokens, translator_tokens = token_folders
    folder = tmp_path_factory.mktemp("jax_runs")
    classifier_run, translator_run = str(folder / "classifier_run"), str(folder / "translator_run")
    request = {
        "classifier_run": classifier_run,
        "classifier_ids": encode_texts(classifier_tokens, "classifier").tolist(),
        "classifier_argv": [
            "--data",
            f"tokens:{classifier_tokens}",
            *CLASSIFIER_FLAGS,
            "--epochs",
            "3",
            "--batch-size",
            "16",
            "--learning-rate",
            "0.005",
            "--verbose",
            "0",
            # No TensorFlow to export with: the app says so and leaves the folder alone.
            "--run-dir",
            classifier_run,
            "--export-dir",
            str(folder / "not_exported"),
        ],
        "translator_run": translator_run,
        "translator_ids": encode_texts(translator_tokens, "translator").tolist(),
        # Steps enough that the greedy translations differ from text to text.
        "translator_argv": [
            "--data",
            f"tokens:{translator_tokens}",
            *TRANSLATOR_TRAINING_FLAGS,
            "--epochs",
            "15",
            "--dropout",
            "0",
            "--label-smoothing",
            "0",
            "--learning-rate-scale",
            "2",
            "--patience",
            "0",
            "--run-dir",
            translator_run,
            "--no-export",
        ],
    }
    done = run_without_tensorflow(JAX_SIDE, timeout=420, env={"JAX_REQUEST": json.dumps(request)})
    answers = last_json_line(done.stdout, "ANSWERS ")
    assert answers["backend"] == "jax"
    answers["stdout"] = done.stdout
    answers["not_exported"] = str(folder / "not_exported")
    return classifier_run, translator_run, answers


@pytest.fixture(scope="module")
def exported(jax_runs, tmp_path_factory):
    """Both runs exported under TensorFlow: `(classifier, translator)` version folders, and what
    the classifier's export said.

    The classifier as a JAX training app with TensorFlow installed exports its run: by
    `apps.export` in a TensorFlow process of its own. The translator by `apps.export` here.
    """
    classifier_run, translator_run, _ = jax_runs
    folder = tmp_path_factory.mktemp("jax_exports")
    with contextlib.redirect_stdout(io.StringIO()) as said:
        export_app._export_in_tensorflow_process(classifier_run, str(folder / "classifier"))
    assert export_app.main([translator_run, "--export-dir", str(folder / "translator")]) == 0
    return str(folder / "classifier" / "1"), str(folder / "translator" / "1"), said.getvalue()


@pytest.fixture(scope="module")
def loaded_fresh(exported, tmp_path_factory):
    """The exports' answers to `TEXTS` in a process with only tensorflow and tensorflow_text."""
    classifier_dir, translator_dir, _ = exported
    cwd = tmp_path_factory.mktemp("elsewhere")
    texts_path = cwd / "texts.json"
    texts_path.write_text(json.dumps([text.encode().hex() for text in TEXTS]))
    done = subprocess.run(
        # LOADER_HEADER gives sys.argv to saved_model_cli: the translator's folder goes by the
        # environment.
        [sys.executable, "-c", LOADER, classifier_dir, str(texts_path)],
        cwd=cwd,
        env={**fresh_environment(), "TRANSLATOR_EXPORT": translator_dir},
        capture_output=True,
        text=True,
        timeout=300,
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
    assert (
        "serving_default" in loaded_fresh["cli"]["stdout"]
        and "DT_STRING" in loaded_fresh["cli"]["stdout"]
    )


def test_the_samples_of_the_run_without_tensorflow_are_the_exports_greedy_translations(
    jax_runs, exported
):
    # The run's end-of-run samples come from the TensorFlow-free decode loop and
    # detokenizer; the export's `greedy` signature decodes in a tf.while_loop.
    import tensorflow_text  # noqa: F401  registers the tokenizer ops

    samples = jax_runs[2]["samples"]
    assert len(samples) == 5
    greedy = tf.saved_model.load(exported[1]).signatures["greedy"]
    answered = greedy(text=tf.constant([sample["source"] for sample in samples]))[
        "translation"
    ].numpy()
    assert [text.decode() for text in answered] == [sample["translation"] for sample in samples]


def test_a_training_app_without_tensorflow_says_how_to_export_instead(jax_runs):
    answers = jax_runs[2]
    assert "TensorFlow is not installed here, so the run is not exported" in answers["stdout"]
    assert (
        f"python -m apps.export {jax_runs[0]} --export-dir {answers['not_exported']}"
        in answers["stdout"]
    )
    assert not os.path.exists(answers["not_exported"])


def test_a_training_app_on_another_backend_exports_in_a_tensorflow_process(exported):
    # What a JAX training app with TensorFlow installed does after training: the classifier's
    # export, which the tests above load.
    classifier_dir, _, said = exported
    assert "Exporting under TensorFlow" in said
    assert os.path.isfile(os.path.join(classifier_dir, "saved_model.pb"))


def test_runs_without_matplotlib_skip_the_plots_and_say_so_once(jax_runs):
    classifier_run, translator_run, answers = jax_runs
    assert answers["stdout"].count(PLOTS_NOTICE) == 1
    for run_dir in (classifier_run, translator_run):
        assert os.path.isfile(os.path.join(run_dir, "history.csv"))
        assert not os.path.exists(os.path.join(run_dir, "learning_curves.png"))
    assert not os.path.exists(os.path.join(classifier_run, "confusion_matrix.png"))


def test_jax_compiles_the_training_step_with_xla_without_the_flag(jax_runs):
    # Op by op, JAX runs a training step several times slower; TensorFlow keeps --jit-compile's
    # choice.
    from keras_transformer.training.distribute import compile_with_xla

    assert jax_runs[2]["xla_without_the_flag"] is True
    assert compile_with_xla(False) is False and compile_with_xla(True) is True
