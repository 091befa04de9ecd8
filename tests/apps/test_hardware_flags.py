"""The training apps' `--mixed-precision`, `--jit-compile` and `--distribute` on CPU:
tiny runs that train and export, the float16 wiring, and bad combinations.

(Two-worker `--distribute multi_worker` runs are in test_multi_worker.py.)
"""

import csv
import json
import os

import keras
import numpy as np
import pytest

from keras_transformer.cli import train_classifier, train_translator
from keras_transformer.training.classifier import pipeline as classifier_training
from tests.apps.test_train_translator import FLAGS as TRANSLATOR_FLAGS
from tests.apps.test_train_translator import write_pairs
from tests.classifier_fixtures import TRAIN_FLAGS, expect_usage_error, write_keyword_csv


def losses(run_dir):
    with open(os.path.join(run_dir, "history.csv"), newline="") as history_file:
        return [float(row["loss"]) for row in csv.DictReader(history_file)]


def saved_settings(run_dir):
    with open(os.path.join(run_dir, "settings.json")) as settings_file:
        return json.load(settings_file)["settings"]


@pytest.fixture
def built_classifiers(monkeypatch):
    """The classifiers `apps.train_classifier` builds during the test, in order."""
    models = []
    build = classifier_training.build_classifier_model

    def keeping(*args, **kwargs):
        models.append(build(*args, **kwargs))
        return models[-1]

    monkeypatch.setattr(classifier_training, "build_classifier_model", keeping)
    return models


def test_bfloat16_xla_mirrored_classifier_trains_and_exports_float32(
    tmp_path, capsys, built_classifiers
):
    """All three flags in one short run (each run costs seconds). XLA compiles
    once per batch shape: 6 tokens cut every text to one length. Dropout is
    off: its random-number ops are most of XLA's compile time on CPU."""
    import tensorflow as tf

    from keras_transformer.text import WordPieceTokenizer

    data = write_keyword_csv(tmp_path / "data.csv")
    run_dir, export_dir = str(tmp_path / "run"), str(tmp_path / "export")
    status = train_classifier.main(
        [
            "--data",
            f"csv:{data}",
            *TRAIN_FLAGS,
            "--epochs",
            "2",
            "--dropout",
            "0",
            "--sequence-length",
            "6",
            "--mixed-precision",
            "bfloat16",
            "--jit-compile",
            "--distribute",
            "mirrored",
            "--run-dir",
            run_dir,
            "--export-dir",
            export_dir,
        ]
    )
    assert status == 0
    assert "MirroredStrategy: 1 replica (CPU:0)" in capsys.readouterr().out
    assert [model.jit_compile for model in built_classifiers] == [
        True
    ]  # XLA, not quietly turned off
    settings = saved_settings(run_dir)
    assert settings["mixed_precision"] == "bfloat16" and settings["jit_compile"] is True
    history = losses(run_dir)
    assert np.all(np.isfinite(history)) and history[-1] < history[0], history
    assert keras.config.dtype_policy().name == "float32"  # the app's policy did not leak

    model = keras.models.load_model(os.path.join(run_dir, "model.keras"))
    assert model.dtype_policy.name == "mixed_bfloat16"
    # Float weights stay float32 (the bag of n-grams' piece kinds are ids, int32).
    assert {variable.dtype for variable in model.weights} - {"int32"} == {"float32"}
    texts = ["goal match team", "stocks market shares", "film music actor", "the news of the week"]
    token_ids = WordPieceTokenizer(os.path.join(run_dir, "vocabulary.txt")).encode(
        tf.constant(texts), 6
    )
    predicted = model.predict(token_ids, verbose=0)

    serve = tf.saved_model.load(os.path.join(export_dir, "1")).signatures["serving_default"]
    assert serve.structured_outputs["probabilities"].dtype == tf.float32
    served = serve(text=tf.constant(texts))["probabilities"]
    assert served.dtype == tf.float32
    # The export drops the padding the batch shares; in bfloat16 (8 bits of
    # mantissa, ~0.4% relative) the shorter sums round a little differently.
    np.testing.assert_allclose(served.numpy(), predicted, atol=2e-2)
    np.testing.assert_array_equal(np.argmax(served.numpy(), -1), np.argmax(predicted, -1))


def test_float16_classifier_is_wired_for_loss_scaling():
    """The wiring only: the layers' float16 training steps on CPU are in
    tests/layers/test_mixed_precision.py, and a whole run is bfloat16's above."""
    from keras_transformer.training.classifier.model import build_classifier_model
    from keras_transformer.training.classifier.settings import ClassifierSettings

    settings = ClassifierSettings(
        sequence_length=16,
        d_model=8,
        num_heads=2,
        intermediate_dim=16,
        warmup_fraction=0.1,
        ngram_l2=1e-4,
        ngram_buckets=1009,
        mixed_precision="float16",
    )
    model = build_classifier_model(
        settings.validate(), vocabulary_size=50, num_classes=3, steps_per_epoch=4
    )
    assert keras.config.dtype_policy().name == "float32"  # set only while the model was built
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert isinstance(model.optimizer.inner_optimizer, keras.optimizers.AdamW)
    assert model.dtype_policy.name == "mixed_float16"
    assert {layer.compute_dtype for layer in model.encoder_blocks} == {"float16"}
    # Float weights stay float32 (the bag of n-grams' piece kinds are ids, int32).
    assert {variable.dtype for variable in model.weights} - {"int32"} == {"float32"}
    probabilities = model(np.array([[5, 6, 7, 0]], "int32"))
    assert probabilities.dtype == "float32"  # the softmax head stays float32
    np.testing.assert_allclose(keras.ops.convert_to_numpy(probabilities).sum(), 1.0, rtol=1e-5)


def test_translator_flags_reach_its_model(tmp_path, monkeypatch):
    """The translator's flags as far as `fit` (stopped there): an XLA-compiled
    run of it would spend most of the test budget compiling; the same layers train
    under XLA and both mixed policies in tests/layers/test_mixed_precision.py."""

    class Fitted(Exception):
        pass

    def fit(model, *args, **kwargs):
        raise Fitted(model.jit_compile, model.dtype_policy.name, type(model.optimizer).__name__)

    monkeypatch.setattr(keras.Model, "fit", fit)
    data = write_pairs(tmp_path / "pairs.tsv", count=64)
    run_dir = str(tmp_path / "run")
    with pytest.raises(Fitted) as fitted:
        train_translator.main(
            [
                "--data",
                f"tsv:{data}",
                *TRANSLATOR_FLAGS,
                "--jit-compile",
                "--mixed-precision",
                "float16",
                "--run-dir",
                run_dir,
                "--no-export",
            ]
        )
    assert fitted.value.args == (True, "mixed_float16", "LossScaleOptimizer")
    settings = saved_settings(run_dir)
    assert settings["jit_compile"] is True and settings["mixed_precision"] == "float16"
    assert keras.config.dtype_policy().name == "float32"


# --- bad flags ---------------------------------------------------------------------


def test_multi_worker_without_tf_config_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    data = write_keyword_csv(tmp_path / "data.csv", 30)
    for main in (train_classifier.main, train_translator.main):
        message = expect_usage_error(
            main,
            [
                "--data",
                f"csv:{data}",
                "--distribute",
                "multi_worker",
                "--run-dir",
                str(tmp_path / "run"),
            ],
            capsys,
        )
        assert "TF_CONFIG" in message and '"worker"' in message
    assert not os.path.exists(tmp_path / "run")


def test_xla_across_workers_is_a_usage_error(tmp_path, capsys):
    """XLA does not compile the all-reduce between workers (CollectiveGatherV2 on CPU)."""
    data = write_keyword_csv(tmp_path / "data.csv", 30)
    for main in (train_classifier.main, train_translator.main):
        message = expect_usage_error(
            main,
            [
                "--data",
                f"csv:{data}",
                "--distribute",
                "multi_worker",
                "--jit-compile",
                "--run-dir",
                str(tmp_path / "run"),
            ],
            capsys,
        )
        assert "--jit-compile" in message and "multi_worker" in message


@pytest.mark.parametrize(
    "tf_config, expected",
    [
        ("{not json", "not valid JSON"),
        ('{"cluster": {"worker": ["127.0.0.1:1"]}}', '"task"'),
        (
            '{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 1}}',
            "index must be 0 to 0",
        ),
        ('{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "ps", "index": 0}}', "'ps'"),
    ],
)
def test_bad_tf_config_is_a_usage_error(tf_config, expected, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", tf_config)
    data = write_keyword_csv(tmp_path / "data.csv", 30)
    message = expect_usage_error(
        train_classifier.main,
        [
            "--data",
            f"csv:{data}",
            "--distribute",
            "multi_worker",
            "--run-dir",
            str(tmp_path / "run"),
        ],
        capsys,
    )
    assert expected in message


def test_multi_worker_after_tensorflow_ran_is_a_clear_error(monkeypatch):
    """MultiWorkerMirroredStrategy must be created before TensorFlow's first op (the apps
    create it before loading data); later, TensorFlow's RuntimeError becomes a ValueError."""
    import tensorflow as tf

    from keras_transformer.training.distribute import make_strategy

    assert int(tf.constant(1) + 1) == 2  # this process has run TensorFlow ops
    monkeypatch.setenv(
        "TF_CONFIG",
        '{"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}}',
    )
    with pytest.raises(ValueError, match="fresh process"):
        make_strategy("multi_worker")


@pytest.mark.parametrize(
    "flags", [["--mixed-precision", "float8"], ["--distribute", "parameter_server"]]
)
def test_unknown_choices_are_refused(flags, capsys):
    for main in (train_classifier.main, train_translator.main):
        with pytest.raises(SystemExit) as raised:
            main(flags)
        assert raised.value.code == 2
        assert "invalid choice" in capsys.readouterr().err
