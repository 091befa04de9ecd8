"""`--shared-vocabulary`: one cased WordPiece vocabulary from both
languages, one token embedding for the encoder, the decoder and the output
projection; the run exports, loads in a process without the project, and
serves as a translator with two vocabularies does.

The run is also the app run whose export the translator's other tests check
(the first version; `val_chrf` is the chrF of its greedy translations), so
that they need no export of their own."""

import json
import os
import subprocess
import sys

import keras
import pytest
import tensorflow as tf
from starlette.testclient import TestClient

from keras_transformer.cli import train_translator
from keras_transformer.cli.training_flags import translation_data_from_flags
from keras_transformer.decoding import greedy_decode
from keras_transformer.serving import ModelRepository, ServerSettings, create_app
from keras_transformer.serving.model_config import model_configs
from keras_transformer.text import WordPieceTokenizer
from keras_transformer.training.runs import RunFolder
from keras_transformer.training.translator.chrf import chrf_subset, corpus_chrf
from tests.apps.test_train_translator import ENGLISH, FLAGS, NUMBERS, write_pairs
from tests.export.test_translator_export import LOADER, fresh_environment

TEXTS = ["uno dos tres", "seis cinco", "", "cuatro cuatro uno dos"]


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shared")
    data = write_pairs(folder / "pairs.tsv")
    argv = [
        "--data",
        f"tsv:{data}",
        *FLAGS,
        "--epochs",
        "2",
        # The export then holds the kept epoch, whose val_chrf the test recomputes.
        "--average-epochs",
        "0",
        "--shared-vocabulary",
        "--run-dir",
        str(folder / "run"),
        "--export-dir",
        str(folder / "export"),
    ]
    status = train_translator.main(argv)
    assert status == 0
    return {
        "run_dir": str(folder / "run"),
        "export_dir": str(folder / "export"),
        "version_dir": str(folder / "export" / "1"),
        "folder": folder,
        "argv": argv,
    }


def test_one_cased_vocabulary_holds_both_languages(shared_run, outside_process):
    run_dir = shared_run["run_dir"]
    assert not os.path.exists(os.path.join(run_dir, "source_vocabulary.txt"))
    assert not os.path.exists(os.path.join(run_dir, "target_vocabulary.txt"))
    with open(os.path.join(run_dir, "vocabulary.txt"), encoding="utf-8") as vocabulary_file:
        tokens = set(vocabulary_file.read().split())
    assert set(NUMBERS) <= tokens and set(ENGLISH) <= tokens
    # Targets start with a capital ("Two five four."): the shared vocabulary keeps case.
    assert {word.capitalize() for word in ENGLISH} & tokens
    with open(os.path.join(run_dir, "settings.json")) as settings_file:
        assert json.load(settings_file)["settings"]["shared_vocabulary"] is True


def test_run_exports_a_first_version(shared_run):
    assert os.listdir(shared_run["export_dir"]) == ["1"]
    assert os.path.exists(os.path.join(shared_run["version_dir"], "saved_model.pb"))


@pytest.fixture(scope="module")
def trained_model(shared_run):
    """The run's `model.keras`, loaded once for the module."""
    return keras.models.load_model(os.path.join(shared_run["run_dir"], "model.keras"))


def test_one_token_table_embeds_both_sides_and_projects_the_output(trained_model):
    model = trained_model
    assert model.share_embeddings and model.source_vocabulary_size == model.target_vocabulary_size
    assert model.source_embedding is model.target_embedding and model.output_projection is None
    vocabulary_size = model.source_vocabulary_size
    assert [tuple(weight.shape) for weight in model.weights if vocabulary_size in weight.shape] == [
        (vocabulary_size, model.d_model)
    ]


@pytest.fixture(scope="module")
def exported(shared_run):
    import tensorflow_text  # noqa: F401  registers the tokenizer ops

    return tf.saved_model.load(shared_run["version_dir"])


def test_the_export_translates_as_the_trained_model(shared_run, trained_model, exported):
    run_dir = shared_run["run_dir"]
    model = trained_model
    tokenizer = WordPieceTokenizer(os.path.join(run_dir, "vocabulary.txt"), lower_case=False)
    source_ids = tokenizer.encode(tf.constant(TEXTS), model.sequence_length)
    token_ids = greedy_decode(
        model,
        source_ids,
        model.sequence_length - 1,
        tokenizer.token_id("[START]"),
        tokenizer.token_id("[END]"),
    )
    expected = list(tokenizer.detokenize(token_ids).numpy())
    assert (
        list(exported.signatures["greedy"](text=tf.constant(TEXTS))["translation"].numpy())
        == expected
    )
    # One vocabulary file travels with the export, for both sides.
    assets = os.listdir(os.path.join(shared_run["version_dir"], "assets"))
    assert len([name for name in assets if name.endswith(".txt")]) == 1, assets


@pytest.fixture(scope="module")
def outside_process(shared_run):
    """The export loaded by `tests/export`'s loader script in a fresh process that
    cannot import the project; started early, it runs while the other tests do."""
    cwd = shared_run["folder"] / "elsewhere"
    cwd.mkdir()
    texts_path = cwd / "texts.json"
    texts_path.write_text(json.dumps([text.encode().hex() for text in TEXTS]))
    process = subprocess.Popen(
        [sys.executable, "-c", LOADER, shared_run["version_dir"], str(texts_path)],
        cwd=cwd,
        env=fresh_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    yield process
    if process.poll() is None:
        process.kill()
        process.communicate()


def test_the_server_serves_it(shared_run, exported):
    repository = ModelRepository(
        model_configs({"translator": os.path.dirname(shared_run["version_dir"])}), poll_seconds=0
    )
    with TestClient(create_app(repository, ServerSettings())) as client:
        response = client.post("/v1/models/translator:predict", json={"instances": TEXTS})
    assert response.status_code == 200, response.text
    expected = [
        text.decode()
        for text in exported.signatures["serving_default"](text=tf.constant(TEXTS))[
            "translation"
        ].numpy()
    ]
    assert response.json()["predictions"] == expected


def test_the_export_loads_without_the_project(outside_process, exported):
    stdout, stderr = outside_process.communicate(timeout=300)
    assert outside_process.returncode == 0, stderr.decode(errors="replace")[-3000:]
    [line] = [line for line in stdout.decode().splitlines() if line.startswith("RESULT ")]
    result = json.loads(line[len("RESULT ") :])
    for name in ("serving_default", "greedy"):
        expected = [
            text.hex()
            for text in exported.signatures[name](text=tf.constant(TEXTS))["translation"].numpy()
        ]
        assert result[name]["translations"] == expected == result["tf1_" + name]


def test_val_chrf_is_the_chrf_of_the_exported_greedy_translations(shared_run, exported):
    # The run ends on the kept epoch's weights: the export's `greedy`
    # signature on the run's validation subset scores what that epoch logged.
    folder = RunFolder(shared_run["run_dir"])
    kept = folder.read_best_epoch()
    assert kept["monitor"] == "val_chrf"
    with open(folder.file("settings.json")) as settings_file:
        settings = json.load(settings_file)["settings"]
    # The pairs the app split off for validation, as it loaded them.
    validation = translation_data_from_flags(
        train_translator.build_parser().parse_args(shared_run["argv"])
    ).validation
    subset = chrf_subset(len(validation), settings["chrf_pairs"], settings["seed"])
    sources = [validation.sources[index] for index in subset]
    references = [validation.targets[index] for index in subset]
    translations = [
        text.decode("utf-8")
        for text in exported.signatures["greedy"](text=tf.constant(sources))["translation"].numpy()
    ]
    assert corpus_chrf(translations, references) == pytest.approx(kept["value"], abs=1e-9)
