"""benchmarks/strip_optimizer.py: model files made small enough to come back from a device
call, and still the same model.

Without the optimizer the file holds the same weights; with `--float16` each
float32 weight is the original rounded to float16 (NumPy's rounding, the
reference here), loaded into float32 variables, in a file about half the size.
"""

import shutil
import zipfile

import h5py
import keras
import numpy as np
import pytest
import strip_optimizer

from keras_transformer.models import TransformerClassifier

TOKEN_IDS = np.random.default_rng(0).integers(1, 300, size=(8, 12)).astype("int32")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """`(path, model)`: a small classifier after one Adam step, saved with its optimizer."""
    keras.utils.set_random_seed(0)
    model = TransformerClassifier(
        300, 3, sequence_length=12, num_layers=1, d_model=32, num_heads=2, intermediate_dim=64
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(TOKEN_IDS, np.arange(8) % 3, epochs=1, verbose=0)
    path = tmp_path_factory.mktemp("trained") / "model.keras"
    model.save(path)
    return path, model


def stripped(trained, folder, *flags):
    folder.mkdir(exist_ok=True)
    path = folder / "model.keras"
    shutil.copyfile(trained[0], path)
    assert strip_optimizer.main([*flags, str(path), str(folder / "absent.keras")]) == 0
    return path


def weights_datasets(path):
    """`{dataset name: dtype}` of the weights file inside a `.keras` archive."""
    found = {}
    with zipfile.ZipFile(path) as archive, archive.open(strip_optimizer.WEIGHTS_MEMBER) as data:
        with h5py.File(data, "r") as weights:
            weights.visititems(
                lambda name, item: (
                    found.update({name: item.dtype}) if isinstance(item, h5py.Dataset) else None
                )
            )
    return found


def test_without_the_optimizer_the_file_holds_the_same_weights(trained, tmp_path):
    path = stripped(trained, tmp_path)
    assert path.stat().st_size < 0.6 * trained[0].stat().st_size  # Adam's two slots gone
    assert not any(name.startswith("optimizer") for name in weights_datasets(path))
    loaded = keras.models.load_model(path, compile=False)
    for variable, original in zip(loaded.weights, trained[1].weights, strict=True):
        np.testing.assert_array_equal(variable.numpy(), original.numpy())


def test_float16_stores_the_rounded_weights_in_half_the_bytes(trained, tmp_path):
    full = stripped(trained, tmp_path / "float32")
    half = stripped(trained, tmp_path / "float16", "--float16")
    # Half the weights' bytes saved (the file's structure and config stay as they were).
    float32_bytes = sum(weight.numpy().nbytes for weight in trained[1].weights)
    saved = full.stat().st_size - half.stat().st_size
    assert saved >= 0.49 * float32_bytes, (saved, float32_bytes)
    assert set(weights_datasets(half).values()) == {np.dtype("float16")}
    loaded = keras.models.load_model(half, compile=False)
    for variable, original in zip(loaded.weights, trained[1].weights, strict=True):
        assert variable.dtype == "float32", variable.path
        np.testing.assert_array_equal(
            variable.numpy(), original.numpy().astype(np.float16).astype(np.float32)
        )
    # float16 keeps 11 significant bits; the probabilities move by far less than 1e-2.
    difference = np.abs(
        loaded.predict(TOKEN_IDS, verbose=0) - trained[1].predict(TOKEN_IDS, verbose=0)
    )
    assert 0 < difference.max() < 1e-2, difference.max()


class Counting(keras.layers.Layer):
    """A float weight and an integer one, as layers that keep counts have."""

    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(3, 2), name="kernel")
        self.bias = self.add_weight(shape=(2,), name="bias")
        self.count = self.add_weight(
            shape=(2,), dtype="int32", initializer="zeros", trainable=False, name="count"
        )

    def call(self, inputs):
        return inputs @ self.kernel + self.bias


def test_weights_float16_cannot_hold_and_integer_ones_stay_as_they_are(tmp_path):
    layer = Counting()
    model = keras.Sequential([keras.Input((3,)), layer])
    large = np.array([[1e5, 0.5], [0.25, 1.0], [2.0, -3.0]], np.float32)
    layer.kernel.assign(large)
    layer.bias.assign([0.1, 0.2])
    layer.count.assign([7, 9])
    path = tmp_path / "model.keras"
    model.save(path)
    path.chmod(0o644)
    strip_optimizer.store_float16(path)
    assert path.stat().st_mode & 0o777 == 0o644
    dtypes = sorted(weights_datasets(path).values(), key=str)
    assert dtypes == [np.dtype("float16"), np.dtype("float32"), np.dtype("int32")]
    loaded = keras.models.load_model(
        path, custom_objects={"Counting": Counting}, compile=False
    ).layers[0]
    np.testing.assert_array_equal(loaded.kernel.numpy(), large)
    np.testing.assert_array_equal(loaded.bias.numpy(), np.float16([0.1, 0.2]).astype(np.float32))
    np.testing.assert_array_equal(loaded.count.numpy(), [7, 9])


def test_a_file_that_is_not_a_keras_archive_is_named(tmp_path):
    path = tmp_path / "model.keras"
    path.write_text("not a zip archive")
    with pytest.raises(ValueError, match="model.keras is not a Keras model file"):
        strip_optimizer.store_float16(path)
    assert path.read_text() == "not a zip archive"
