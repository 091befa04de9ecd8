"""`--distribute data_parallel`: Keras' `DataParallel` on JAX, over two virtual CPU devices.

The JAX checks run in a subprocess: the number of host devices is fixed by
`XLA_FLAGS` before JAX starts, and the backend by `KERAS_BACKEND` before
Keras is imported.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_transformer.cli import train_classifier, train_translator
from keras_transformer.training.distribute import SplittableBatches
from tests.classifier_fixtures import expect_usage_error, write_keyword_csv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A tiny classifier as `train_classifier` builds and compiles it, trained one epoch on fixed
# NumPy batches on one device and with data_parallel from the same initial weights.
ON_TWO_DEVICES = r"""
import contextlib, io, json, sys
import jax, keras, numpy as np
from keras_transformer.cli import train_classifier
from keras_transformer.training import distribute
from keras_transformer.training.classifier.model import build_classifier_model
from keras_transformer.training.classifier.settings import ClassifierSettings

VOCABULARY, CLASSES, LENGTH, BATCH = 50, 3, 16, 8
rng = np.random.default_rng(0)


class Batches(keras.utils.PyDataset):
    def __init__(self, sizes):
        super().__init__()
        self.batches = [(rng.integers(1, VOCABULARY, (size, LENGTH)).astype("int32"),
                         rng.integers(0, CLASSES, size).astype("int32")) for size in sizes]

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, index):
        return self.batches[index]


class SeenDistribution(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        self.seen = keras.distribution.distribution()


# 5 validation rows do not split over 2 devices; validation runs outside the distribution.
train, validation = Batches([BATCH] * 6), Batches([BATCH, 5])
settings = ClassifierSettings(
    epochs=1, batch_size=BATCH, sequence_length=LENGTH, vocabulary_size=VOCABULARY, d_model=16,
    num_heads=2, intermediate_dim=32, dropout=0.0, warmup_fraction=0.2, ngram_l2=1e-4, ngram_buckets=1009,
    jit_compile=True,
)


def trained(strategy, initial_weights, train=train, validation=validation):
    model = build_classifier_model(settings, VOCABULARY, CLASSES, len(train), strategy)
    model.set_weights(initial_weights)
    seen = SeenDistribution()
    distribute.fit(model, strategy, train, validation, epochs=1, callbacks=[seen], verbose=0)
    weights = model.get_weights()
    return {
        "history": model.history.history, "weights": [w.tolist() for w in weights],
        "moved": max(
            float(np.max(np.abs(after - before)))
            for after, before in zip(weights, initial_weights)
        ),
        "devices_per_variable": sorted(
            {len(v.value.sharding.device_set) for v in model.trainable_variables}
        ),
        "distribution_in_fit": repr(seen.seen),
        "distribution_after": repr(keras.distribution.distribution()),
    }


initial = build_classifier_model(settings, VOCABULARY, CLASSES, len(train)).get_weights()
strategy = distribute.make_strategy("data_parallel")
result = {
    "jax_devices": len(jax.devices()),
    "description": distribute.describe_strategy(strategy),
    "one_device": trained(None, initial),
    "data_parallel": trained(strategy, initial),
}
try:
    distribute.check_batch_size(strategy, 7)
except ValueError as error:
    result["batch_size_error"] = str(error)
# A training batch of 1 row, which SplittableBatches repeats to 2.
short_train = Batches([BATCH, 1])
result["short_batch"] = {"one_device": trained(None, initial, short_train, None)["weights"],
                         "data_parallel": trained(strategy, initial, short_train, None)["weights"]}
try:  # tf.data batches are not cut to fit: the last, 5 rows, cannot be split over 2 devices
    import tensorflow as tf
    uneven = tf.data.Dataset.from_tensor_slices(train.batches[0]).take(5).batch(BATCH)
    model = build_classifier_model(settings, VOCABULARY, CLASSES, len(train), strategy)
    distribute.fit(model, strategy, uneven, None, epochs=1, verbose=0)
except ValueError as error:
    result["uneven_batch_error"] = str(error)
result["distribution_after_error"] = repr(keras.distribution.distribution())
csv_path, run_dir, refused_run_dir = sys.argv[1:4]
with contextlib.redirect_stderr(io.StringIO()) as app_errors:
    try:
        train_classifier.main(["--data", f"csv:{csv_path}", "--distribute", "data_parallel",
                               "--batch-size", "7", "--run-dir", refused_run_dir, "--no-export"])
    except SystemExit as exit:
        result["refused_exit"] = exit.code
result["refused_errors"] = app_errors.getvalue()
with contextlib.redirect_stdout(io.StringIO()) as app_output:  # the app's whole run
    result["app_exit"] = train_classifier.main(
        ["--data", f"csv:{csv_path}", "--distribute", "data_parallel", "--jit-compile",
         "--batch-size", "8", "--epochs", "1", "--vocab-size", "200", "--sequence-length", "16",
         "--d-model", "16", "--num-heads", "2", "--intermediate-dim", "32", "--verbose", "2",
         "--run-dir", run_dir, "--no-export"])
result["app_output"] = app_output.getvalue()
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def two_device_runs(tmp_path_factory):
    """The script's results, with XLA (`--jit-compile`): on JAX the classifier's default
    (no XLA) runs op by op, several times slower; it agrees as well (checked by hand)."""
    folder = tmp_path_factory.mktemp("data_parallel")
    # 120 texts: 96 train, 12 validation, 12 test, every batch of 8 or 4 split in two.
    data = write_keyword_csv(folder / "data.csv", 120)
    # Two host devices, and LLVM's expensive passes off: the script's run is mostly XLA
    # compiling its seven tiny models, and without those passes it no longer ran past the
    # timeout below on a loaded machine. Not a lower XLA optimization level (see
    # tests/conftest.py): under it XLA's CPU code gets this model's gradients below its output
    # layer wrong (the same loss, gradients off by up to their own size, on one device as on
    # two, against three programs that agree to 1e-7 at the default level), and the two
    # devices' losses part from one device's by ~1e-3.
    environment = dict(
        os.environ,
        KERAS_BACKEND="jax",
        XLA_FLAGS=(
            "--xla_force_host_platform_device_count=2 --xla_llvm_disable_expensive_passes=true"
        ),
        TF_CPP_MIN_LOG_LEVEL="3",
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            ON_TWO_DEVICES,
            str(data),
            str(folder / "run"),
            str(folder / "refused"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return {
        **json.loads(result.stdout.strip().splitlines()[-1]),
        "run_dir": folder / "run",
        "refused_run_dir": folder / "refused",
    }


def test_data_parallel_spans_both_devices(two_device_runs):
    assert two_device_runs["jax_devices"] == 2
    assert two_device_runs["description"] == "Data parallel over 2 devices: cpu:0, cpu:1"
    parallel, alone = two_device_runs["data_parallel"], two_device_runs["one_device"]
    assert parallel["distribution_in_fit"].startswith(
        "<DataParallel device_mesh=<DeviceMesh shape=(2,)"
    )
    assert parallel["devices_per_variable"] == [2]  # replicated on both devices
    assert alone["distribution_in_fit"] == "None" and alone["devices_per_variable"] == [1]


def test_data_parallel_trains_as_one_device_does(two_device_runs):
    """Each batch split over two devices, gradients combined: the same epoch as on one device,
    and the same validation, whose last batch (5 rows) two devices could not split."""
    parallel, alone = two_device_runs["data_parallel"], two_device_runs["one_device"]
    for name in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert parallel["history"][name] == pytest.approx(
            alone["history"][name], rel=1e-5, abs=1e-6
        ), name
    assert alone["moved"] > 1e-3  # training changed the weights, so equal weights say something
    for trained, reference in zip(parallel["weights"], alone["weights"]):
        assert np.allclose(trained, reference, rtol=1e-4, atol=1e-5)


def test_a_batch_smaller_than_the_devices_trains_as_on_one_device(two_device_runs):
    short = two_device_runs["short_batch"]
    for trained, reference in zip(short["data_parallel"], short["one_device"]):
        assert np.allclose(trained, reference, rtol=1e-4, atol=1e-5)


def test_distribution_does_not_outlive_its_use(two_device_runs):
    assert two_device_runs["data_parallel"]["distribution_after"] == "None"
    assert two_device_runs["distribution_after_error"] == "None"


def test_uneven_batches_are_clear_errors(two_device_runs):
    assert "--batch-size 7" in two_device_runs["batch_size_error"]
    assert "multiple of 2" in two_device_runs["batch_size_error"]
    message = two_device_runs["uneven_batch_error"]
    assert "could not split a batch evenly over its 2 devices" in message
    assert "dimension size is 5" in message  # JAX's own words for the batch it could not split


def test_app_refuses_a_batch_size_the_devices_cannot_split(two_device_runs):
    assert two_device_runs["refused_exit"] == 2
    lines = two_device_runs["refused_errors"].strip().splitlines()
    assert lines == [
        "error: --batch-size 7 does not split evenly over the 2 devices of --distribute "
        "data_parallel: use a multiple of 2."
    ]
    assert not os.path.exists(two_device_runs["refused_run_dir"])


def test_app_trains_a_run_with_data_parallel(two_device_runs):
    """The whole run: trained over both devices, then evaluated and saved by this (the only)
    process."""
    assert two_device_runs["app_exit"] == 0
    assert (
        "Data parallel over 2 devices: cpu:0, cpu:1" in two_device_runs["app_output"].splitlines()
    )
    run_dir = two_device_runs["run_dir"]
    with open(run_dir / "metrics.json") as metrics_file:
        metrics = json.load(metrics_file)
    assert metrics["epochs_completed"] == 1 and metrics["split"] == "test"
    assert sum(map(sum, metrics["confusion_matrix"])) == 12  # every test text predicted
    assert (run_dir / "model.keras").is_file()


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="checks the refusal on the TensorFlow backend"
)
def test_data_parallel_on_tensorflow_is_a_usage_error(tmp_path, capsys):
    data = write_keyword_csv(tmp_path / "data.csv", 30)
    for main in (train_classifier.main, train_translator.main):
        message = expect_usage_error(
            main,
            [
                "--data",
                f"csv:{data}",
                "--distribute",
                "data_parallel",
                "--run-dir",
                str(tmp_path / "run"),
            ],
            capsys,
        )
        assert "KERAS_BACKEND=jax" in message and "--distribute mirrored" in message
    assert not os.path.exists(tmp_path / "run")


class NumberedBatches(keras.utils.PyDataset):
    """Batches of the given sizes whose rows hold their own numbers; counts its epochs."""

    def __init__(self, sizes):
        super().__init__()
        starts = np.cumsum([0, *sizes])
        self.batches = [
            (np.arange(start, end), np.arange(start, end) * 10, None)
            for start, end in zip(starts, starts[1:])
        ]
        self.epochs_ended = 0

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, index):
        return self.batches[index]

    def on_epoch_end(self):
        self.epochs_ended += 1


@pytest.mark.parametrize(
    "devices, size, rows",
    [
        (2, 8, list(range(8))),  # splits as it is
        (2, 7, list(range(6))),  # loses its last row
        (4, 7, [0, 1, 2, 3]),
        (2, 1, [0, 0]),  # too small to cut: repeated whole, its mean unchanged
        (4, 2, [0, 1, 0, 1]),
        (4, 3, [0, 1, 2] * 4),
    ],
)
def test_splittable_batches_give_every_device_as_many_rows(devices, size, rows):
    batches = SplittableBatches(NumberedBatches([size]), devices)
    features, targets, weights = batches[0]
    assert features.tolist() == rows and targets.tolist() == [row * 10 for row in rows]
    assert weights is None


def test_splittable_batches_keep_the_batches_order_and_epochs():
    numbered = NumberedBatches([4, 4, 3])
    batches = SplittableBatches(numbered, 2)
    assert len(batches) == batches.num_batches == 3
    assert [batches[index][0].tolist() for index in range(3)] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9],
    ]
    batches.on_epoch_end()
    assert numbered.epochs_ended == 1  # a reshuffle reaches the batches underneath
