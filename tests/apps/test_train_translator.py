"""`keras-transformer train-translator` on a tiny TSV: the run folder and bad input.

The run is tests/apps/translator_runs.py's raw run, which test_tokenize_app.py
shares; it does not export: that an app run exports its first version is
checked on the run of tests/training/test_shared_vocabulary.py."""

import csv
import json
import os

import keras
import numpy as np
import pytest

from keras_transformer.cli import train_translator
from tests.apps.translator_runs import translator_app_runs
from tests.classifier_fixtures import expect_usage_error

NUMBERS = ["uno", "dos", "tres", "cuatro", "cinco", "seis"]
ENGLISH = ["one", "two", "three", "four", "five", "six"]
FLAGS = [
    "--max-length",
    "12",
    "--vocab-size",
    "120",
    "--num-layers",
    "1",
    "--d-model",
    "32",
    "--num-heads",
    "2",
    "--intermediate-dim",
    "64",
    "--batch-size",
    "16",
    "--warmup-steps",
    "10",
    "--validation-size",
    "8",
    "--test-size",
    "8",
    "--verbose",
    "0",
]


def write_pairs(path, count=96, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as pairs_file:
        for _ in range(count):
            picks = rng.integers(0, len(NUMBERS), size=3)
            source = " ".join(NUMBERS[i] for i in picks)
            target = " ".join(ENGLISH[i] for i in picks).capitalize() + "."
            pairs_file.write(f"{source}\t{target}\tCC-BY attribution\n")
    return str(path)


@pytest.fixture(scope="module")
def translator_runs(tmp_path_factory):
    return translator_app_runs(tmp_path_factory)


@pytest.fixture(scope="module")
def translator_run(translator_runs):
    """`(exit status, run folder)` of the raw TSV run of tests/apps/translator_runs.py."""
    return translator_runs["outputs"]["raw"][0], translator_runs["raw"]


def test_length_bucketed_epochs_do_not_run_out_of_data(translator_runs):
    # Bucketing leaves the number of batches unknown; an epoch of fixed steps
    # over a repeated stream keeps Keras from warning (and stopping) each epoch.
    messages = translator_runs["raw_warnings"]
    assert not [message for message in messages if "ran out of data" in message]


def test_run_trains_and_writes_its_folder(translator_run):
    status, run_dir = translator_run
    assert status == 0
    with open(os.path.join(run_dir, "history.csv"), newline="") as history_file:
        rows = list(csv.DictReader(history_file))
    assert [int(row["epoch"]) for row in rows] == [0, 1, 2]
    losses = [float(row["loss"]) for row in rows]
    assert losses[-1] < losses[0]
    for name in (
        "source_vocabulary.txt",
        "target_vocabulary.txt",
        "learning_curves.png",
        "settings.json",
        "metrics.json",
    ):
        assert os.path.exists(os.path.join(run_dir, name)), name
    with open(os.path.join(run_dir, "samples.json"), encoding="utf-8") as samples_file:
        samples = json.load(samples_file)
    assert len(samples) == 5
    assert all(set(sample) == {"source", "reference", "translation"} for sample in samples)
    assert all(sample["source"].split()[0] in NUMBERS for sample in samples)


def test_the_run_scores_its_whole_test_split(translator_run):
    """metrics.json's BLEU and chrF are sacrebleu's on test_translations.tsv, whose
    translations are the saved model's greedy decode (the export's graph op) of each source."""
    import sacrebleu
    import tensorflow as tf

    from keras_transformer.decoding import greedy_decode
    from keras_transformer.training.runs import RunFolder
    from keras_transformer.training.translator.settings import TranslatorSettings
    from keras_transformer.training.translator.tokenizing import run_tokenizers

    _, run_dir = translator_run
    with open(os.path.join(run_dir, "metrics.json"), encoding="utf-8") as metrics_file:
        metrics = json.load(metrics_file)
    with open(os.path.join(run_dir, "test_translations.tsv"), encoding="utf-8") as rows_file:
        rows = list(csv.DictReader(rows_file, delimiter="\t"))
    assert metrics["split"] == "test" and metrics["decoding"] == "greedy"
    assert metrics["pairs"] == len(rows) == 8  # --test-size 8
    assert all(row["source"].split()[0] in NUMBERS for row in rows)

    with open(os.path.join(run_dir, "settings.json"), encoding="utf-8") as settings_file:
        settings = TranslatorSettings(**json.load(settings_file)["settings"])
    source_tokenizer, target_tokenizer = run_tokenizers(RunFolder(run_dir), settings)
    model = keras.models.load_model(os.path.join(run_dir, "model.keras"), compile=False)
    source_ids = source_tokenizer.encode(
        tf.constant([row["source"] for row in rows]), settings.sequence_length
    )
    generated = greedy_decode(
        model,
        source_ids,
        settings.sequence_length,
        target_tokenizer.token_id("[START]"),
        target_tokenizer.token_id("[END]"),
    )
    translations = [row["translation"] for row in rows]
    assert translations == [
        text.decode("utf-8") for text in target_tokenizer.detokenize(generated).numpy()
    ]

    references = [row["reference"] for row in rows]
    bleu = sacrebleu.corpus_bleu(translations, [references])
    assert metrics["bleu"] == pytest.approx(bleu.score, abs=0.005)
    chrf = sacrebleu.corpus_chrf(translations, [references])
    assert metrics["chrf"] == pytest.approx(chrf.score, abs=0.005)
    assert "tok:13a" in metrics["bleu_scorer"] and "case:mixed" in metrics["bleu_scorer"]
    assert metrics["chrf_scorer"].startswith("sacrebleu chrF")


def test_saved_model_reloads_with_the_same_logits(translator_run):
    _, run_dir = translator_run
    model = keras.models.load_model(os.path.join(run_dir, "model.keras"))
    # Early stopping restores the best epoch's weights before model.keras is saved.
    again = keras.models.load_model(os.path.join(run_dir, "checkpoints", "best.keras"))
    inputs = {
        "source_ids": np.array([[7, 8, 9]], np.int32),
        "target_ids": np.array([[4, 10]], np.int32),
    }
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model(inputs)),
        keras.ops.convert_to_numpy(again(inputs)),
        atol=1e-5,
    )


def test_target_vocabulary_keeps_case(translator_run):
    _, run_dir = translator_run
    with open(os.path.join(run_dir, "target_vocabulary.txt"), encoding="utf-8") as vocabulary_file:
        tokens = set(vocabulary_file.read().split())
    assert any(token[:1].isupper() for token in tokens)


def test_missing_tsv_is_a_usage_error(tmp_path, capsys):
    missing = tmp_path / "nowhere.tsv"
    message = expect_usage_error(
        train_translator.main,
        ["--data", f"tsv:{missing}", *FLAGS, "--run-dir", str(tmp_path / "run")],
        capsys,
    )
    assert str(missing) in message


def test_heads_that_do_not_divide_the_width_are_a_usage_error(tmp_path, capsys):
    message = expect_usage_error(
        train_translator.main,
        ["--data", "bible:es-en", *FLAGS, "--num-heads", "3", "--run-dir", str(tmp_path / "run")],
        capsys,
    )
    assert "num_heads" in message


def test_decoder_depth_can_differ_from_the_encoder_depth():
    from keras_transformer.training.translator.model import build_translator_model
    from keras_transformer.training.translator.settings import TranslatorSettings

    settings = TranslatorSettings(
        sequence_length=8,
        num_layers=2,
        num_decoder_layers=1,
        d_model=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.1,
        source_word_dropout=0.2,
    )
    model = build_translator_model(settings.validate(), 30, 40)
    assert (len(model.encoder_blocks), len(model.decoder_blocks)) == (2, 1)
    assert model.source_word_dropping.rate == 0.2
    same_depth = build_translator_model(
        TranslatorSettings(
            sequence_length=8,
            num_layers=2,
            d_model=16,
            num_heads=2,
            intermediate_dim=32,
            dropout=0.1,
            source_word_dropout=0.0,
        ),
        30,
        40,
    )
    assert (len(same_depth.encoder_blocks), len(same_depth.decoder_blocks)) == (2, 2)


def test_zero_decoder_layers_is_a_usage_error(tmp_path, capsys):
    message = expect_usage_error(
        train_translator.main,
        [
            "--data",
            "bible:es-en",
            *FLAGS,
            "--decoder-layers",
            "0",
            "--run-dir",
            str(tmp_path / "run"),
        ],
        capsys,
    )
    assert "num_decoder_layers" in message
