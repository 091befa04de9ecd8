"""`keras-transformer train-classifier --search N`: KerasTuner tries N configurations,
the first the flags as given, and the run folder gets the best on validation."""

import json
import os

import keras
import keras_tuner
import pytest

from keras_transformer.cli import train_classifier
from keras_transformer.training.classifier.search import (
    SEARCH_SPACE,
    SearchTrial,
    format_search,
    trial_settings,
)
from keras_transformer.training.classifier.settings import ClassifierSettings
from tests.classifier_fixtures import TRAIN_FLAGS, expect_usage_error, write_keyword_csv


def test_the_first_trial_is_the_settings_and_later_ones_vary_only_what_is_not_fixed():
    settings = ClassifierSettings(d_model=64, intermediate_dim=96, dropout=0.25)
    first = trial_settings(settings, keras_tuner.HyperParameters(), fixed={"pooling"})
    assert first == settings  # 0.25, not in the space, joins its choices as the default
    hyperparameters = keras_tuner.HyperParameters()
    trial_settings(settings, hyperparameters, fixed={"pooling"})
    assert set(hyperparameters.values) == set(SEARCH_SPACE) - {"pooling"}
    assert 0.25 in hyperparameters._hps["dropout"][0].values
    hyperparameters.values.update({"d_model": 128, "num_layers": 3, "learning_rate": 2e-3})
    drawn = trial_settings(settings, hyperparameters, fixed={"pooling"})
    assert (drawn.d_model, drawn.num_layers, drawn.learning_rate) == (128, 3, 2e-3)
    assert drawn.intermediate_dim == 192  # follows the width: 1.5 times it, as given
    assert drawn.pooling == settings.pooling
    assert (
        trial_settings(
            settings, hyperparameters, fixed={"d_model", "intermediate_dim"}
        ).intermediate_dim
        == 96
    )
    # [CLS] pooling's tokens start with [CLS]: the search keeps it.
    cls = keras_tuner.HyperParameters()
    assert trial_settings(ClassifierSettings(pooling="cls"), cls, fixed=()).pooling == "cls"
    assert "pooling" not in cls.values


# The tiny run of TRAIN_FLAGS, but with width, dropout, pooling and learning rate left to the
# search.
SEARCH_FLAGS = [
    "--sequence-length",
    "32",
    "--vocab-size",
    "200",
    "--num-layers",
    "1",
    "--num-heads",
    "2",
    "--epochs",
    "1",
    "--batch-size",
    "16",
    "--verbose",
    "0",
]


def test_the_search_table_marks_the_kept_trial_in_aligned_columns():
    trials = [
        SearchTrial("0", {"d_model": 128, "pooling": "max"}, 0.9512, 0.2, 3, 1.24),
        SearchTrial("1", {"d_model": 64, "pooling": "mean"}, 0.9634, 0.3, 12, 2.0),
    ]
    lines = format_search(trials, trials[1], "val_accuracy").splitlines()
    assert "kept trial 1" in lines[0]
    header, first, second = lines[1:]
    assert header.split() == [
        "trial",
        "d_model",
        "pooling",
        "val_accuracy",
        "val_loss",
        "epochs",
        "minutes",
    ]
    assert first.split() == [
        "0",
        "128",
        "max",
        "0.9512",
        "0.2000",
        "3",
        "1.2",
    ] and not first.startswith("*")
    assert second.split()[0] == "*" and second.split()[1:3] == ["1", "64"]
    assert len({len(header), len(first), len(second)}) == 1


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    folder = tmp_path_factory.mktemp("search")
    csv_path = write_keyword_csv(folder / "keywords.csv")
    run_dir, export_dir = str(folder / "run"), str(folder / "export")
    status = train_classifier.main(
        [
            "--data",
            f"csv:{csv_path}",
            *SEARCH_FLAGS,
            "--search",
            "2",
            "--run-dir",
            run_dir,
            "--export-dir",
            export_dir,
        ]
    )
    return status, run_dir, export_dir


def test_a_search_keeps_the_trial_best_on_validation_and_exports_it(searched):
    import tensorflow as tf

    status, run_dir, export_dir = searched
    assert status == 0
    with open(os.path.join(run_dir, "search.json")) as search_file:
        search = json.load(search_file)
    trials = search["trials"]
    assert len(trials) == 2 and search["monitor"] == "val_accuracy"
    # The first trial is the defaults; the second differs; --num-layers, given, is not searched.
    defaults = ClassifierSettings()
    assert trials[0]["values"] == {
        "d_model": defaults.d_model,
        "dropout": defaults.dropout,
        "pooling": defaults.pooling,
        "learning_rate": defaults.learning_rate,
    }
    assert trials[1]["values"] != trials[0]["values"] and set(trials[1]["values"]) == set(
        trials[0]["values"]
    )
    best = max(trials, key=lambda trial: (trial["score"], -trial["loss"]))
    assert search["kept"] == best["trial_id"]

    # The run folder is the kept trial's: its settings, its model, its validation scores.
    with open(os.path.join(run_dir, "settings.json")) as settings_file:
        settings = json.load(settings_file)["settings"]
    assert {name: settings[name] for name in best["values"]} == best["values"]
    assert settings["num_layers"] == 1
    assert settings["intermediate_dim"] == 2 * settings["d_model"]
    # Trials are ranked by the Transformer's kept epoch, before the bag of n-grams joins it.
    with open(os.path.join(run_dir, "metrics.json")) as metrics_file:
        kept_epoch = json.load(metrics_file)["kept_epoch"]
    assert (kept_epoch["value"], kept_epoch["val_loss"]) == (best["score"], best["loss"])
    model = keras.models.load_model(os.path.join(run_dir, "model.keras"))
    assert model.pooling == best["values"]["pooling"] and model.d_model == best["values"]["d_model"]
    for trial in trials:
        assert os.path.exists(
            os.path.join(run_dir, "search", f"trial_{trial['trial_id']}", "run", "model.keras")
        )
    exported = tf.saved_model.load(os.path.join(export_dir, "1"))
    answer = exported.signatures["serving_default"](text=tf.constant(["goal match team"]))
    assert answer["probabilities"].shape == (1, 3)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--search", "-1"], "--search takes the number of configurations"),
        (["--search", "2", "--pretrain-epochs", "1"], "--search does not pretrain"),
        (["--search", "2", "--resume"], "--resume does not continue a --search"),
        # TRAIN_FLAGS give every field the search varies.
        (["--search", "2"], "--search varies --num-layers, --d-model, --dropout, --pooling"),
    ],
)
def test_bad_search_flags_are_named(tmp_path, capsys, flags, message):
    csv_path = write_keyword_csv(tmp_path / "keywords.csv")
    line = expect_usage_error(
        train_classifier.main,
        [
            "--data",
            f"csv:{csv_path}",
            *TRAIN_FLAGS,
            *flags,
            "--run-dir",
            str(tmp_path / "run"),
            "--no-export",
        ],
        capsys,
    )
    assert message in line
