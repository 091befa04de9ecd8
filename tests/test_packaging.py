"""The package a Keras user installs: pyproject.toml, the wheel it builds, and
that wheel alone (with JAX, no TensorFlow) in a fresh virtual environment."""

import email.parser
import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import keras_transformer

REPO_ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
EXTRAS = {"tensorflow", "plots", "serve", "data", "search", "bench", "dev", "all"}


def pinned_requirements():
    """requirements.txt and requirements-bench.txt (the tested lock set):
    canonical name -> Requirement, each an exact `==` pin."""
    pins = {}
    for filename in ("requirements.txt", "requirements-bench.txt"):
        for line in (REPO_ROOT / filename).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("-r"):
                continue
            requirement = Requirement(line)
            assert (
                len(requirement.specifier) == 1
                and next(iter(requirement.specifier)).operator == "=="
            ), f"{filename}: {line!r} is not an exact pin"
            pins[canonicalize_name(requirement.name)] = requirement
    return pins


def pinned_version(name):
    return next(iter(pinned_requirements()[canonicalize_name(name)].specifier)).version


def test_pins_satisfy_the_ranges_of_pyproject():
    """Every range in pyproject.toml (core, extras, build backend) holds the
    version requirements.txt pins, so `make`'s --no-deps editable install over
    the pins is a consistent install of the package."""
    pins = pinned_requirements()
    project = PYPROJECT["project"]
    entries = project["dependencies"] + PYPROJECT["build-system"]["requires"]
    entries += [entry for extra in project["optional-dependencies"].values() for entry in extra]
    # `all` names the other extras, through the project itself.
    ranges = [
        Requirement(entry) for entry in entries if not entry.startswith(project["name"] + "[")
    ]
    assert {"keras", "numpy", "hatchling", "tensorflow", "jax"} <= {
        canonicalize_name(r.name) for r in ranges
    }
    for requirement in ranges:
        pin = pins.get(canonicalize_name(requirement.name))
        assert pin is not None, (
            f"pyproject.toml requires {requirement}, which requirements*.txt does not pin"
        )
        version = next(iter(pin.specifier)).version
        assert requirement.specifier.contains(version, prereleases=True), (
            f"pyproject.toml's {requirement} excludes the pinned {pin}"
        )
        assert requirement.extras <= pin.extras, (
            f"{requirement} needs extras the pin {pin} leaves out"
        )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel built from this checkout by the pinned hatchling (as `make` builds the
    editable install): no network, and the build tested is the build shipped."""
    if importlib.util.find_spec("hatchling") is None:
        pytest.fail(
            "hatchling, the build backend pinned in requirements.txt, is not installed: run `make venv`"
        )
    folder = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(folder),
            str(REPO_ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (path,) = folder.glob("*.whl")
    return path


def test_wheel_holds_the_library_only(wheel):
    """Every file of keras_transformer/ and nothing of apps/, tests/ or benchmarks/."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    version = keras_transformer.__version__
    metadata_folder = f"keras_transformer-{version}.dist-info/"
    assert wheel.name == f"keras_transformer-{version}-py3-none-any.whl"
    outside = sorted(
        name for name in names if not name.startswith(("keras_transformer/", metadata_folder))
    )
    assert not outside, outside
    library = REPO_ROOT / "keras_transformer"
    sources = {
        path.relative_to(REPO_ROOT).as_posix()
        for path in library.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert "keras_transformer/layers/attention.py" in sources
    assert sources - names == set(), "files of the library left out of the wheel"
    assert {name for name in names if name.startswith("keras_transformer/")} == sources


def test_wheel_metadata(wheel):
    """One version (keras_transformer.__version__), keras and numpy the only core
    requirements, and the extras the docs name."""
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(
            f"keras_transformer-{keras_transformer.__version__}.dist-info/METADATA"
        ).decode()
    metadata = email.parser.Parser().parsestr(text)
    assert metadata["Name"] == "keras-transformer"
    assert metadata["Version"] == keras_transformer.__version__
    requirements = [Requirement(line) for line in metadata.get_all("Requires-Dist")]
    core = {
        canonicalize_name(requirement.name)
        for requirement in requirements
        if requirement.marker is None
    }
    assert core == {"keras", "numpy"}
    assert set(metadata.get_all("Provides-Extra")) == EXTRAS
    by_extra = {}
    for requirement in requirements:
        for extra in EXTRAS:
            if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}):
                by_extra.setdefault(extra, set()).add(canonicalize_name(requirement.name))
    assert {"tensorflow", "tensorflow-text", "tensorboard"} <= by_extra["tensorflow"]
    assert {"starlette", "uvicorn", "tensorflow", "tensorflow-text"} <= by_extra["serve"]
    assert {"jax", "pytest-timeout", "hatchling"} <= by_extra["dev"]
    assert by_extra["search"] == {"keras-tuner"}
    assert by_extra["all"] == (
        by_extra["tensorflow"]
        | by_extra["plots"]
        | by_extra["serve"]
        | by_extra["data"]
        | by_extra["search"]
    )


def test_import_is_cheap_and_layers_load_on_first_use():
    """`import keras_transformer` imports no Keras or TensorFlow; its `layers` and
    `models` attributes then import them, and no TensorFlow-only subpackage."""
    script = textwrap.dedent(
        """
        import sys
        import keras_transformer
        heavy = sorted(name for name in ("keras", "tensorflow", "jax") if name in sys.modules)
        assert not heavy, heavy
        assert keras_transformer.layers.TransformerEncoderBlock.__name__ == "TransformerEncoderBlock"
        assert keras_transformer.models.Seq2SeqTransformer.__name__ == "Seq2SeqTransformer"
        tensorflow_only = ("text", "data", "training", "export", "serving")
        loaded = [name for name in tensorflow_only if "keras_transformer." + name in sys.modules]
        assert not loaded, loaded
        try:
            keras_transformer.training
        except AttributeError as error:
            assert "import keras_transformer.training" in str(error), error
        else:
            raise AssertionError("keras_transformer.training was imported by attribute access")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, KERAS_BACKEND="jax"),
    )
    assert result.returncode == 0, result.stderr[-3000:]


# A user's own model from our layers, run where only the wheel and JAX are
# installed: fit, save, reload, predict, one cached decoding step; TensorFlow
# must never be imported (and cannot be: the first lines prove it is absent).
USER_SCRIPT = textwrap.dedent(
    """
    import importlib.util, os, sys, tempfile
    assert importlib.util.find_spec("tensorflow") is None, "tensorflow is installed here"
    import keras_transformer
    assert keras_transformer.__file__.startswith(sys.prefix), keras_transformer.__file__
    import keras
    import numpy as np
    assert keras.backend.backend() == "jax"

    layers = keras_transformer.layers
    vocabulary, length, width = 40, 8, 16
    source = keras.Input((length,), dtype="int32")
    target = keras.Input((length,), dtype="int32")
    encoded = layers.TokenAndPositionEmbedding(vocabulary, length, width, name="source_embedding")(source)
    encoded = layers.TransformerEncoderBlock(num_heads=2, intermediate_dim=32, name="encoder")(encoded)
    decoded = layers.TokenAndPositionEmbedding(vocabulary, length, width, name="target_embedding")(target)
    decoded = layers.TransformerDecoderBlock(num_heads=2, intermediate_dim=32, name="decoder")(decoded, encoded)
    logits = keras.layers.Dense(vocabulary)(decoded)
    model = keras.Model([source, target], logits)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    rng = np.random.default_rng(0)
    sources = rng.integers(1, vocabulary, (16, length)).astype("int32")
    targets = rng.integers(1, vocabulary, (16, length)).astype("int32")
    before = [weight.copy() for weight in model.get_weights()]
    model.fit([sources, targets], targets, batch_size=8, epochs=1, verbose=0)
    assert any(not np.allclose(a, b) for a, b in zip(before, model.get_weights())), "fit changed nothing"

    path = os.path.join(tempfile.mkdtemp(), "user_model.keras")
    model.save(path)
    reloaded = keras.models.load_model(path)
    expected = model.predict([sources, targets], verbose=0)
    np.testing.assert_array_equal(reloaded.predict([sources, targets], verbose=0), expected)

    # One cached decoding step (the decoder's cache write is TensorFlow-only
    # on TensorFlow) gives the full pass's first position.
    block = reloaded.get_layer("decoder")
    encoder_output = keras.Model(reloaded.inputs[0], reloaded.get_layer("encoder").output)(sources[:2])
    first = reloaded.get_layer("target_embedding")(targets[:2, :1])
    cache = block.initialize_self_attention_cache(batch_size=2, max_length=length)
    step, cache = block(first, cross_attention_cache=block.compute_cross_attention_cache(encoder_output),
                        encoder_padding_mask=np.ones((2, length), bool),
                        self_attention_cache=cache, self_attention_cache_update_index=0)
    full = block(reloaded.get_layer("target_embedding")(targets[:2]), encoder_output)
    np.testing.assert_allclose(np.asarray(step)[:, 0], np.asarray(full)[:, 0], atol=1e-5)

    assert keras_transformer.models.Seq2SeqTransformer.__name__ == "Seq2SeqTransformer"
    assert "tensorflow" not in sys.modules
    print("USER MODEL OK")
    """
)


def test_wheel_with_jax_only_in_a_fresh_environment(wheel, tmp_path):
    """`pip install keras-transformer` beside jax[cpu] (versions of requirements.txt)
    into a new virtual environment, then a user's model built, fit, saved and
    reloaded there on JAX."""
    environment = tmp_path / "venv"
    # No pip inside: this process's pip installs into it (`pip --python`), from
    # pip's cache where the pinned wheels already are. --no-compile: the script
    # imports a small part of what is installed, and byte-compiling all of JAX
    # would take longer than the install itself.
    venv.create(environment, with_pip=False)
    python = str(environment / "bin" / "python")
    packages = (
        [str(wheel)]
        + [f"{name}=={pinned_version(name)}" for name in ("keras", "numpy")]
        + [f"jax[cpu]=={pinned_version('jax')}"]
    )
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "--quiet",
            "--no-compile",
            *packages,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]

    clean = {
        key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "KERAS_HOME")
    }
    absent = subprocess.run(
        [python, "-c", "import tensorflow"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean,
        timeout=60,
    )
    assert absent.returncode == 1 and "No module named 'tensorflow'" in absent.stderr, absent.stderr

    result = subprocess.run(
        [python, "-c", USER_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=dict(clean, KERAS_BACKEND="jax", KERAS_HOME=str(tmp_path / "keras_home")),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert result.stdout.strip().endswith("USER MODEL OK")
    shutil.rmtree(environment)  # over half a gigabyte; kept when the test fails, to look into
