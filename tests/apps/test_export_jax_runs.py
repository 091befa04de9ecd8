"""Tokenize here, train on JAX where TensorFlow is not, export here: the
SavedModels answer raw strings as the JAX models do.

`apps.tokenize` writes a classifier's and a translator's token folders. A
subprocess with `KERAS_BACKEND=jax`, where `import tensorflow` fails
(`tests/no_tensorflow.py`), trains both with the training apps from
`--data tokens:DIR` and computes the models' own answers from their
`model.keras`: probabilities, and greedy and beam translations by the
library's TensorFlow-free decode loops and detokenizer. `apps.export` exports both run
folders (the classifier's in a TensorFlow process of its own, as a JAX
training app does); a fresh process that cannot import the project loads the
exports with `tf.saved_model.load` and answers the raw strings. A second
subprocess, on PyTorch and without TensorFlow, decodes the same translator run
with the same loops: its greedy and beam translations are the export's.

With transformers and PyTorch installed, a small random BERT checkpoint
(`save_pretrained`) goes the same way: `apps.tokenize classifier --pretrained`
encodes a mixed-case corpus (checked id for id against Hugging Face's
`BertTokenizer`), the same subprocess fine-tunes it from the token folder, and
the export answers raw strings as the JAX model does on `BertTokenizer`'s ids.
"""

import contextlib
import importlib.util
import io
import json
import os
import random
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.cli import export as export_app
from keras_transformer.cli import tokenize as tokenize_app
from keras_transformer.cli import train_classifier as train_classifier_app
from keras_transformer.cli.training_flags import classification_data_from_flags
from keras_transformer.data.tokens import classifier_input_length, read_token_folder
from keras_transformer.text.wordpiece import WordPieceTokenizer
from keras_transformer.training.runs import PLOTS_NOTICE
from tests.apps.test_train_translator import FLAGS as TRANSLATOR_FLAGS
from tests.apps.test_train_translator import write_pairs
from tests.classifier_fixtures import (
    CLASS_NAMES,
    expect_usage_error,
    keyword_text,
    write_keyword_csv,
)
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

# The translator run's model answers `TEXTS` (the request's ids) with the library's
# TensorFlow-free decoding loops, on whichever backend runs it.
TRANSLATOR_ANSWERS = """
import json, os
import numpy as np
import keras

import keras_transformer.models  # registers the classes model.keras names
from keras_transformer.decoding import beam_search_loop, greedy_decode_loop
from keras_transformer.text.vocabulary import END, START, detokenize
from keras_transformer.training.runs import RunFolder
from keras_transformer.training.translator.settings import TranslatorSettings
from keras_transformer.training.translator.tokenizing import run_vocabularies

run_dir = request["translator_run"]
model = keras.models.load_model(os.path.join(run_dir, "model.keras"), compile=False)
with open(os.path.join(run_dir, "settings.json")) as settings_file:
    settings = TranslatorSettings(**json.load(settings_file)["settings"])
_, target_vocabulary = run_vocabularies(RunFolder(run_dir), settings)
generated = greedy_decode_loop(model, np.asarray(request["translator_ids"], np.int32), settings.sequence_length,
                               target_vocabulary.index(START), target_vocabulary.index(END))
answers["translations"] = detokenize(generated, target_vocabulary)
best, _ = beam_search_loop(model, np.asarray(request["translator_ids"], np.int32), settings.sequence_length,
                           target_vocabulary.index(START), target_vocabulary.index(END),
                           beam_width=request["beam_width"], length_penalty=request["length_penalty"])
answers["beam_translations"] = detokenize(best, target_vocabulary)
"""

# The JAX side, without TensorFlow or matplotlib: train from the token folders,
# then answer `TEXTS` (encoded here, with the folders' vocabularies) with each model.
JAX_SIDE = (
    """
import sys
sys.modules["matplotlib"] = None  # the core install, as on a GPU machine: no plots

import json, os
import numpy as np
import keras

from keras_transformer.cli import train_classifier, train_translator

request = json.loads(os.environ["JAX_REQUEST"])
answers = {}

assert train_classifier.main(request["classifier_argv"]) == 0
model = keras.models.load_model(os.path.join(request["classifier_run"], "model.keras"), compile=False)
answers["probabilities"] = np.asarray(
    model.predict(np.asarray(request["classifier_ids"], np.int32), verbose=0)).tolist()

assert train_translator.main(request["translator_argv"]) == 0
"""
    + TRANSLATOR_ANSWERS
    + """

if "pretrained_argv" in request:  # a checkpoint fine-tuned from its token folder
    assert train_classifier.main(request["pretrained_argv"]) == 0
    model = keras.models.load_model(os.path.join(request["pretrained_run"], "model.keras"), compile=False)
    answers["pretrained_probabilities"] = np.asarray(
        model.predict(np.asarray(request["pretrained_ids"], np.int32), verbose=0)).tolist()
answers["backend"] = keras.backend.backend()
from keras_transformer.training.distribute import compile_with_xla
answers["xla_without_the_flag"] = compile_with_xla(False)
with open(os.path.join(run_dir, "samples.json")) as samples_file:
    answers["samples"] = json.load(samples_file)
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
        "beam": [text.decode() for text in translator.signatures["serving_default"](text=tf.constant(texts))["translation"].numpy()],
        "cli": cli,
    }
    print("RESULT " + json.dumps(result))
    """
)


# Raw strings for the checkpoint: capitals, accents and punctuation its casing rules and
# splitter must handle as Hugging Face's do.
PRETRAINED_TEXTS = [
    "The TEAM scored a Goal in the match.",
    "Stócks and shares fell, the MARKET today",
    "zebra fílm; actors and Music",
]


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


CASING = {"do_lower_case": True, "strip_accents": False}


def write_mixed_case_csv(path, num_examples=90, seed=0):
    """The keyword corpus with capitals, accents and punctuation: what the checkpoint's
    casing rules map to its (lower-case, unaccented) vocabulary or to `[UNK]`."""
    rng = random.Random(seed)
    changes = [str.upper, str.capitalize, lambda word: word.replace("o", "ó"), lambda word: word]
    with open(path, "w", encoding="utf-8") as csv_file:
        csv_file.write("text,label\n")
        for index in range(num_examples):
            label = CLASS_NAMES[index % len(CLASS_NAMES)]
            words = [rng.choice(changes)(word) for word in keyword_text(label, rng).split()]
            # Every fifth text long enough to be cut at the chosen sequence length.
            words += words * 3 * (index % 5 == 0)
            csv_file.write(f'"{" ".join(words)}.",{label}\n')
    return str(path)


def bert_tokenizer_ids(checkpoint, texts, length):
    """Hugging Face's own `BertTokenizer` on the checkpoint's `vocab.txt`: `[CLS] text [SEP]`,
    cut and padded to `length`."""
    import transformers

    reference = transformers.BertTokenizer(str(checkpoint / "vocab.txt"), **CASING)
    return reference(
        list(texts), padding="max_length", truncation=True, max_length=length, return_tensors="np"
    )["input_ids"].astype("int32")


@pytest.fixture(scope="module")
def pretrained_tokens(tmp_path_factory):
    """A small random BERT checkpoint and its token folder, written by `apps.tokenize
    classifier --pretrained`: `(checkpoint, tokenize argv, token folder)`; None without
    transformers and PyTorch (the other tests here need neither)."""
    if not all(importlib.util.find_spec(name) for name in ("transformers", "torch")):
        return None
    from tests.apps.test_train_classifier_pretrained import POSITIONS, VOCABULARY
    from tests.models.test_pretrained import write_checkpoint

    folder = tmp_path_factory.mktemp("pretrained_tokens")
    checkpoint = folder / "checkpoint"
    write_checkpoint(checkpoint, vocab_size=len(VOCABULARY), max_position_embeddings=POSITIONS)
    (checkpoint / "vocab.txt").write_text("".join(f"{token}\n" for token in VOCABULARY))
    # Lower-cased, accents kept: not the rules a folder without them gets (accents follow
    # the lower-casing), so a run that lost them answers otherwise.
    (checkpoint / "tokenizer_config.json").write_text(json.dumps(CASING))
    argv = [
        "classifier",
        "--data",
        f"csv:{write_mixed_case_csv(folder / 'mixed_case.csv')}",
        "--pretrained",
        str(checkpoint),
    ]
    tokens_dir = str(folder / "tokens")
    assert tokenize_app.main([*argv, "--out", tokens_dir]) == 0
    return checkpoint, argv, tokens_dir


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
def jax_runs(token_folders, pretrained_tokens, tmp_path_factory):
    """The two run folders trained on JAX without TensorFlow, and the JAX models' answers to
    `TEXTS` (and, with `pretrained_tokens`, the fine-tuned checkpoint's to
    `PRETRAINED_TEXTS`, on `BertTokenizer`'s ids).
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
        # The beam search apps.export gives the export by default.
        "beam_width": export_app.DEFAULT_BEAM_WIDTH,
        "length_penalty": export_app.DEFAULT_LENGTH_PENALTY,
        # Steps enough that the greedy translations differ from text to text.
        "translator_argv": [
            "--data",
            f"tokens:{translator_tokens}",
            *TRANSLATOR_TRAINING_FLAGS,
            "--epochs",
            "20",
            "--dropout",
            "0",
            "--label-smoothing",
            "0",
            "--learning-rate-scale",
            "1",
            "--patience",
            "0",
            "--run-dir",
            translator_run,
            "--no-export",
        ],
    }
    if pretrained_tokens is not None:
        checkpoint, _, pretrained_dir = pretrained_tokens
        # The checkpoint at another path, as on a machine the folder was copied to.
        elsewhere = folder / "checkpoint_elsewhere"
        shutil.copytree(checkpoint, elsewhere)
        length = read_token_folder(pretrained_dir, "classifier").settings["sequence_length"]
        request["pretrained_run"] = str(folder / "pretrained_run")
        request["pretrained_ids"] = bert_tokenizer_ids(
            checkpoint, PRETRAINED_TEXTS, length
        ).tolist()
        request["pretrained_argv"] = [
            "--data",
            f"tokens:{pretrained_dir}",
            "--pretrained",
            str(elsewhere),
            # A random checkpoint has nothing to keep: a from-scratch learning rate.
            "--learning-rate",
            "0.003",
            "--epochs",
            "2",
            "--batch-size",
            "16",
            "--verbose",
            "0",
            "--run-dir",
            request["pretrained_run"],
            "--no-export",
        ]
    done = run_without_tensorflow(JAX_SIDE, timeout=420, env={"JAX_REQUEST": json.dumps(request)})
    answers = last_json_line(done.stdout, "ANSWERS ")
    assert answers["backend"] == "jax"
    answers["stdout"] = done.stdout
    answers["not_exported"] = str(folder / "not_exported")
    return classifier_run, translator_run, answers


# The JAX-trained translator decoded on PyTorch, without TensorFlow.
TORCH_SIDE = (
    """
import json, os
request = json.loads(os.environ["TORCH_REQUEST"])
answers = {}
"""
    + TRANSLATOR_ANSWERS
    + """
answers["backend"] = keras.backend.backend()
print("ANSWERS " + json.dumps(answers))
"""
)


@pytest.fixture(scope="module")
def torch_answers(token_folders, jax_runs):
    """The JAX-trained translator's greedy and beam translations of `TEXTS`, decoded by the
    library's loops on PyTorch."""
    _, translator_run, _ = jax_runs
    request = {
        "translator_run": translator_run,
        "translator_ids": encode_texts(token_folders[1], "translator").tolist(),
        "beam_width": export_app.DEFAULT_BEAM_WIDTH,
        "length_penalty": export_app.DEFAULT_LENGTH_PENALTY,
    }
    done = run_without_tensorflow(
        TORCH_SIDE, timeout=300, env={"TORCH_REQUEST": json.dumps(request)}, backend="torch"
    )
    answers = last_json_line(done.stdout, "ANSWERS ")
    assert answers["backend"] == "torch"
    return answers


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


def test_jax_beam_search_loop_gives_the_exports_beam_translations(jax_runs, loaded_fresh):
    """`beam_search_loop` on JAX keeps the hypotheses the export's graph beam search keeps."""
    assert loaded_fresh["beam"] == jax_runs[2]["beam_translations"]
    # A model that says one thing to every text would match too easily.
    assert len(set(loaded_fresh["beam"])) > 2, loaded_fresh["beam"]


def test_torch_decoding_loops_give_the_exports_greedy_and_beam_translations(
    torch_answers, loaded_fresh
):
    """The same trained weights decoded on PyTorch keep the tokens the export's graph keeps."""
    assert torch_answers["translations"] == loaded_fresh["greedy"]
    assert torch_answers["beam_translations"] == loaded_fresh["beam"]
    assert len(set(loaded_fresh["beam"])) > 2, loaded_fresh["beam"]


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
        f"keras-transformer export {jax_runs[0]} --export-dir {answers['not_exported']}"
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


def needs_pretrained(pretrained_tokens):
    if pretrained_tokens is None:
        pytest.skip("needs transformers and torch, to write a checkpoint")
    return pretrained_tokens


def test_the_checkpoints_token_folder_holds_bert_tokenizers_ids(pretrained_tokens):
    checkpoint, argv, tokens_dir = needs_pretrained(pretrained_tokens)
    tokens = read_token_folder(tokens_dir, "classifier")
    settings = tokens.settings
    with open(checkpoint / "config.json") as config_file:
        config = json.load(config_file)
    assert settings["pretrained"] == str(checkpoint)
    assert (settings["vocabulary_size"], settings["d_model"], settings["num_layers"]) == (
        config["vocab_size"],
        config["hidden_size"],
        config["num_hidden_layers"],
    )
    assert (
        settings["sequence_length"] <= settings["max_length"] == config["max_position_embeddings"]
    )
    # The split apps.tokenize made, encoded by the reference tokenizer.
    data = classification_data_from_flags(
        tokenize_app.build_parser().parse_args([*argv, "--out", "x"])
    )
    cut = 0
    for split in ("train", "validation", "test"):
        texts = getattr(data, split).texts
        # As far as the bag of n-grams beside the encoder reads, where that is further.
        expected = bert_tokenizer_ids(checkpoint, texts, classifier_input_length(settings))
        np.testing.assert_array_equal(getattr(tokens, split).token_ids, expected, err_msg=split)
        # Texts longer than the encoder reads: the bag of n-grams reads on.
        cut += int((expected[:, settings["sequence_length"] :] != 0).any(axis=1).sum())
    assert cut > 0
    # The tokenizer's files, as a run folder of the checkpoint keeps them.
    with open(os.path.join(tokens_dir, "tokenizer_config.json")) as config_file:
        assert json.load(config_file) == CASING


def test_a_checkpoint_fine_tuned_from_tokens_on_jax_exports_to_the_same_probabilities(
    pretrained_tokens, jax_runs, tmp_path
):
    checkpoint, _, tokens_dir = needs_pretrained(pretrained_tokens)
    answers = jax_runs[2]
    run_dir = os.path.join(os.path.dirname(jax_runs[0]), "pretrained_run")
    with open(os.path.join(run_dir, "settings.json")) as settings_file:
        saved = json.load(settings_file)
    with open(os.path.join(run_dir, "tokenizer_config.json")) as casing_file:
        assert json.load(casing_file) == CASING  # the export's tokenizer reads them
    assert saved["data"] == f"tokens:{tokens_dir}"
    assert saved["settings"]["pretrained"].endswith("checkpoint_elsewhere")
    assert saved["settings"]["pooling"] == "mean"  # the fine-tuning default, not the folder's
    assert export_app.main([run_dir, "--export-dir", str(tmp_path / "export")]) == 0

    import tensorflow_text  # noqa: F401  registers the tokenizer ops

    export = tf.saved_model.load(str(tmp_path / "export" / "1"))
    answered = export.signatures["serving_default"](text=tf.constant(PRETRAINED_TEXTS))
    expected = np.asarray(answers["pretrained_probabilities"])
    assert expected.shape == (len(PRETRAINED_TEXTS), len(CLASS_NAMES))
    np.testing.assert_allclose(answered["probabilities"].numpy(), expected, atol=1e-5)


def copy_of_checkpoint(checkpoint, folder, files):
    """The checkpoint's files in `folder`, but those in `files` ({name: text})."""
    shutil.copytree(checkpoint, folder)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize(
    "case, message",
    [
        ("our tokens, a checkpoint", "holds tokens of our own vocabulary, and --pretrained"),
        ("a checkpoint's tokens, none", "holds tokens of the checkpoint"),
        ("a checkpoint's tokens, another vocabulary", "and --pretrained {other} has another"),
        ("a checkpoint's tokens, cased", "casing rules"),
    ],
)
def test_tokens_and_checkpoints_that_do_not_match_are_usage_errors(
    token_folders, pretrained_tokens, tmp_path, capsys, case, message
):
    checkpoint, _, pretrained_dir = needs_pretrained(pretrained_tokens)
    from tests.apps.test_train_classifier_pretrained import VOCABULARY

    swapped = [*VOCABULARY]
    swapped[-1], swapped[-2] = swapped[-2], swapped[-1]
    changed = {
        "another vocabulary": {"vocab.txt": "".join(f"{token}\n" for token in swapped)},
        "cased": {"tokenizer_config.json": '{"do_lower_case": false}'},
    }.get(case.split(", ")[1])
    other = copy_of_checkpoint(checkpoint, tmp_path / "other", changed) if changed else None
    folder = token_folders[0] if case.startswith("our") else pretrained_dir
    # Were the tokens taken, the run would be one epoch, and not exported.
    argv = ["--data", f"tokens:{folder}", "--epochs", "1", "--no-export"]
    argv += ["--verbose", "0", "--run-dir", str(tmp_path / "run")]
    if not case.endswith("none"):
        argv += ["--pretrained", str(other or checkpoint)]
    line = expect_usage_error(train_classifier_app.main, argv, capsys)
    assert f"tokens:{folder}" in line and message.format(other=other) in line, line
    assert not os.path.exists(tmp_path / "run")
