"""The package a Keras user installs: pyproject.toml, the sdist and the wheel
`make dist` builds (the wheel from the sdist), their metadata, and each of them
(with JAX and PyTorch, no TensorFlow) in a fresh virtual environment."""

import email.parser
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

import keras_transformer

REPO_ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
# `keras-transformer` on PyPI is another project that also installs `keras_transformer`.
DISTRIBUTION = "keras-transformer-toolkit"
# File names of the sdist and wheel, and the wheel's metadata folder.
FILE_PREFIX = f"keras_transformer_toolkit-{keras_transformer.__version__}"
EXTRAS = {
    "tensorflow",
    "bleu",
    "plots",
    "serve",
    "data",
    "search",
    "pretrained",
    "bench",
    "dev",
    "deploy",
    "all",
}


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


def library_sources():
    """Every file of keras_transformer/ in this checkout, as `keras_transformer/...`."""
    library = REPO_ROOT / "keras_transformer"
    return {
        path.relative_to(REPO_ROOT).as_posix()
        for path in library.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


@pytest.fixture(scope="module")
def distributions(tmp_path_factory):
    """`(sdist, wheel)` as `make dist` builds them: `python -m build` makes the sdist
    from this checkout, then the wheel from that sdist (so a file the sdist lacks
    is missing from the wheel too), with the pinned hatchling: no network, and the
    build tested is the build shipped."""
    missing = [name for name in ("hatchling", "build") if importlib.util.find_spec(name) is None]
    if missing:
        pytest.fail(f"{missing}, pinned in requirements.txt, not installed: run `make venv`")
    folder = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(folder), str(REPO_ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (sdist,) = folder.glob("*.tar.gz")
    (wheel,) = folder.glob("*.whl")
    return sdist, wheel


@pytest.fixture(scope="module")
def wheel(distributions):
    return distributions[1]


@pytest.fixture(scope="module")
def sdist(distributions):
    return distributions[0]


def wheel_metadata(wheel):
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(f"{FILE_PREFIX}.dist-info/METADATA").decode()
    return email.parser.Parser().parsestr(text)


def sdist_metadata(sdist):
    with tarfile.open(sdist) as archive:
        text = archive.extractfile(f"{FILE_PREFIX}/PKG-INFO").read().decode()
    return email.parser.Parser().parsestr(text)


def test_wheel_holds_the_library_and_its_licence_only(wheel):
    """Every file of keras_transformer/ and nothing of apps/, tests/ or benchmarks/;
    the licence in the metadata folder."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        licence = archive.read(f"{FILE_PREFIX}.dist-info/licenses/LICENSE")
    assert wheel.name == f"{FILE_PREFIX}-py3-none-any.whl"
    assert licence == (REPO_ROOT / "LICENSE").read_bytes()
    outside = sorted(
        name for name in names if not name.startswith(("keras_transformer/", FILE_PREFIX))
    )
    assert not outside, outside
    sources = library_sources()
    assert "keras_transformer/layers/attention.py" in sources
    assert sources - names == set(), "files of the library left out of the wheel"
    assert {name for name in names if name.startswith("keras_transformer/")} == sources


def test_wheel_installs_one_command(wheel):
    """The wheel's one console script, `keras-transformer`, is the command-line apps' entry."""
    with zipfile.ZipFile(wheel) as archive:
        entry_points = archive.read(f"{FILE_PREFIX}.dist-info/entry_points.txt").decode()
    assert entry_points.split() == [
        "[console_scripts]",
        "keras-transformer",
        "=",
        "keras_transformer.cli.main:main",
    ]


def test_sdist_holds_the_library_licence_and_readme(sdist):
    """What a build from source needs, with the licence and the README PyPI shows
    beside it, and nothing of apps/, tests/ or benchmarks/."""
    assert sdist.name == f"{FILE_PREFIX}.tar.gz"
    with tarfile.open(sdist) as archive:
        members = {
            member.name.removeprefix(f"{FILE_PREFIX}/"): member
            for member in archive.getmembers()
            if member.isfile()
        }
        for name in ("LICENSE", "README.md", "pyproject.toml"):
            assert name in members, f"{name} is not in the sdist"
            content = archive.extractfile(members[name]).read()
            assert content == (REPO_ROOT / name).read_bytes(), f"the sdist's {name} differs"
    sources = library_sources()
    assert sources - members.keys() == set(), "files of the library left out of the sdist"
    others = sorted(name for name in members.keys() - sources if "/" in name)
    assert not others, others
    assert set(members) - sources <= {
        "LICENSE",
        "README.md",
        "pyproject.toml",
        "PKG-INFO",
        ".gitignore",
    }


def test_licence_is_apache_2():
    text = (REPO_ROOT / "LICENSE").read_text()
    assert text.split()[:5] == ["Apache", "License", "Version", "2.0,", "January"], text[:200]
    assert "END OF TERMS AND CONDITIONS" in text


def test_wheel_metadata(wheel):
    """One version (keras_transformer.__version__), keras and numpy the only core
    requirements, and the extras the docs name."""
    metadata = wheel_metadata(wheel)
    assert metadata["Name"] == DISTRIBUTION
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
    assert {"jax", "pytest-timeout", "hatchling", "build", "twine"} <= by_extra["dev"]
    assert by_extra["search"] == {"keras-tuner"}
    assert by_extra["pretrained"] == {"safetensors"}
    assert by_extra["bleu"] == {"sacrebleu"} <= by_extra["bench"]
    assert by_extra["all"] == (
        by_extra["tensorflow"]
        | by_extra["plots"]
        | by_extra["serve"]
        | by_extra["data"]
        | by_extra["search"]
        | by_extra["pretrained"]
        | by_extra["bleu"]
        | by_extra["deploy"]
    )
    assert {"ai-edge-litert", "tf2onnx", "onnx", "onnxruntime"} <= by_extra["deploy"]


def test_metadata_a_user_filters_on(distributions):
    """The licence as an SPDX expression with its file (PEP 639, so no `License ::`
    classifier), the import name, the Python versions, the same in the sdist's
    PKG-INFO as in the wheel's METADATA; then twine's check, the one PyPI's
    upload makes, of both files and of the README they carry."""
    sdist, wheel = distributions
    fields = ("Name", "Version", "Import-Name", "License-Expression", "Requires-Python")
    for metadata in (sdist_metadata(sdist), wheel_metadata(wheel)):
        assert {field: metadata[field] for field in fields} == {
            "Name": DISTRIBUTION,
            "Version": keras_transformer.__version__,
            "Import-Name": "keras_transformer",
            "License-Expression": "Apache-2.0",
            "Requires-Python": ">=3.11",
        }
        assert metadata.get_all("License-File") == ["LICENSE"]
        assert metadata.get_all("License") is None
        assert metadata["Description-Content-Type"] == "text/markdown"
        assert "pip install keras-transformer-toolkit" in metadata.get_payload()
        classifiers = metadata.get_all("Classifier")
        assert not [name for name in classifiers if name.startswith("License ::")], classifiers
        python_versions = [
            name.rsplit(" :: ", 1)[1]
            for name in classifiers
            if name.startswith("Programming Language :: Python :: 3.")
        ]
        # The versions claimed are ones pip would install on, and the one running
        # this suite is among them.
        assert all(SpecifierSet(metadata["Requires-Python"]).contains(v) for v in python_versions)
        assert f"{sys.version_info.major}.{sys.version_info.minor}" in python_versions
        assert {"Operating System :: OS Independent", "Intended Audience :: Developers"} <= set(
            classifiers
        )
        assert any(name.startswith("Development Status :: ") for name in classifiers)
    if importlib.util.find_spec("twine") is None:
        pytest.fail("twine, pinned in requirements.txt, is not installed: run `make venv`")
    check = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, NO_COLOR="1"),
    )
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    assert check.stdout.count("PASSED") == 2, check.stdout


def test_import_is_cheap_and_layers_load_on_first_use():
    """`import keras_transformer` imports no Keras or TensorFlow; its `layers` and
    `models` attributes then import them, and no TensorFlow-only subpackage."""
    script = textwrap.dedent(
        """
        import sys
        import keras_transformer
        heavy = sorted(name for name in ("keras", "tensorflow", "jax") if name in sys.modules)
        assert not heavy, heavy
        encoder_block = keras_transformer.layers.TransformerEncoderBlock
        assert encoder_block.__name__ == "TransformerEncoderBlock"
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


# A user's own model from our layers, run where the wheel and a backend other
# than TensorFlow are installed (KERAS_BACKEND names it): fit, save, reload,
# predict, one cached decoding step; TensorFlow must never be imported (and
# cannot be: the first lines prove it is absent).
USER_SCRIPT = textwrap.dedent(
    """
    import importlib.util, os, sys, tempfile
    assert importlib.util.find_spec("tensorflow") is None, "tensorflow is installed here"
    import keras_transformer
    assert keras_transformer.__file__.startswith(sys.prefix), keras_transformer.__file__
    import keras
    import numpy as np
    assert keras.backend.backend() == os.environ["KERAS_BACKEND"]

    layers = keras_transformer.layers
    vocabulary, length, width = 40, 8, 16
    source = keras.Input((length,), dtype="int32")
    target = keras.Input((length,), dtype="int32")
    embed = layers.TokenAndPositionEmbedding
    encoded = embed(vocabulary, length, width, name="source_embedding")(source)
    encoder = layers.TransformerEncoderBlock(num_heads=2, intermediate_dim=32, name="encoder")
    encoded = encoder(encoded)
    decoded = embed(vocabulary, length, width, name="target_embedding")(target)
    decoder = layers.TransformerDecoderBlock(num_heads=2, intermediate_dim=32, name="decoder")
    decoded = decoder(decoded, encoded)
    logits = keras.layers.Dense(vocabulary)(decoded)
    model = keras.Model([source, target], logits)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer="adam", loss=loss)

    rng = np.random.default_rng(0)
    sources = rng.integers(1, vocabulary, (16, length)).astype("int32")
    targets = rng.integers(1, vocabulary, (16, length)).astype("int32")
    before = [weight.copy() for weight in model.get_weights()]
    model.fit([sources, targets], targets, batch_size=8, epochs=1, verbose=0)
    after = model.get_weights()
    assert any(not np.allclose(a, b) for a, b in zip(before, after)), "fit changed nothing"

    path = os.path.join(tempfile.mkdtemp(), "user_model.keras")
    model.save(path)
    reloaded = keras.models.load_model(path)
    expected = model.predict([sources, targets], verbose=0)
    np.testing.assert_array_equal(reloaded.predict([sources, targets], verbose=0), expected)

    # One cached decoding step (the decoder's cache write is TensorFlow-only
    # on TensorFlow) gives the full pass's first position.
    block = reloaded.get_layer("decoder")
    encode = keras.Model(reloaded.inputs[0], reloaded.get_layer("encoder").output)
    encoder_output = encode(sources[:2])
    first = reloaded.get_layer("target_embedding")(targets[:2, :1])
    cache = block.initialize_self_attention_cache(batch_size=2, max_length=length)
    step, cache = block(
        first,
        cross_attention_cache=block.compute_cross_attention_cache(encoder_output),
        encoder_padding_mask=np.ones((2, length), bool),
        self_attention_cache=cache,
        self_attention_cache_update_index=0,
    )
    full = block(reloaded.get_layer("target_embedding")(targets[:2]), encoder_output)
    as_numpy = keras.ops.convert_to_numpy
    np.testing.assert_allclose(as_numpy(step)[:, 0], as_numpy(full)[:, 0], atol=1e-5)

    assert keras_transformer.models.Seq2SeqTransformer.__name__ == "Seq2SeqTransformer"
    assert "tensorflow" not in sys.modules
    print("USER MODEL OK")
    """
)


# The sdist installed over the wheel in the same environment: the distribution
# is ours, built from the sdist, and its package holds exactly the checkout's
# files, which USER_SCRIPT has just run from the wheel. No Keras here: importing
# it would cost more than the rest of the sdist's install and checks together.
SDIST_SCRIPT = textwrap.dedent(
    """
    import importlib.metadata, json, pathlib, sys
    distribution = importlib.metadata.distribution("keras-transformer-toolkit")
    source = json.loads(distribution.read_text("direct_url.json"))["url"]
    assert source.endswith(".tar.gz"), source
    assert distribution.metadata["License-Expression"] == "Apache-2.0"
    assert importlib.metadata.packages_distributions()["keras_transformer"] == [
        "keras-transformer-toolkit"
    ]
    import keras_transformer
    assert keras_transformer.__version__ == distribution.version
    installed = pathlib.Path(keras_transformer.__file__).parent
    assert installed.is_relative_to(sys.prefix), installed
    checkout = pathlib.Path(sys.argv[1]) / "keras_transformer"

    def files(root):
        return {
            path.relative_to(root).as_posix(): path.read_bytes()
            for path in root.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        }

    installed_files, checkout_files = files(installed), files(checkout)
    assert "layers/attention.py" in installed_files
    assert installed_files.keys() == checkout_files.keys(), (
        sorted(installed_files.keys() ^ checkout_files.keys())
    )
    differ = sorted(name for name, data in installed_files.items() if data != checkout_files[name])
    assert not differ, differ
    print("SDIST OK")
    """
)


def pip_into(python, *arguments):
    """This process's pip installs into the environment of `python` (`pip --python`),
    from pip's cache where the pinned wheels already are. --no-compile: the scripts
    import a small part of what is installed, and byte-compiling all of JAX would
    take longer than the install itself."""
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-compile"]
        + list(arguments),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]


def test_wheel_and_sdist_without_tensorflow_in_a_fresh_environment(distributions, tmp_path):
    """`pip install keras-transformer-toolkit` beside jax[cpu] (versions of
    requirements.txt) into a new virtual environment, then a user's model built,
    fit, saved and reloaded there on JAX; the same on PyTorch once torch (the
    pinned CPU build) joins it; then the sdist installed in place of the wheel
    (one environment for all: the backends are the slow part to install) and
    checked."""
    sdist, wheel = distributions
    environment = tmp_path / "venv"
    # No pip inside: `pip_into` installs with this process's pip.
    venv.create(environment, with_pip=False)
    python = str(environment / "bin" / "python")
    pip_into(
        python,
        str(wheel),
        *[f"{name}=={pinned_version(name)}" for name in ("keras", "numpy")],
        f"jax[cpu]=={pinned_version('jax')}",
    )

    # A user's environment: not `make test`'s shared JAX compilation cache either.
    clean = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "KERAS_HOME") and not key.startswith("JAX_")
    }
    on_jax = dict(clean, KERAS_BACKEND="jax", KERAS_HOME=str(tmp_path / "keras_home"))
    absent = subprocess.run(
        [python, "-c", "import tensorflow"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=clean,
        timeout=60,
    )
    assert absent.returncode == 1 and "No module named 'tensorflow'" in absent.stderr, absent.stderr

    for backend in ("jax", "torch"):
        if backend == "torch":
            pip_into(python, f"torch=={pinned_version('torch')}")
        result = subprocess.run(
            [python, "-c", USER_SCRIPT],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env=dict(on_jax, KERAS_BACKEND=backend),
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
        assert result.stdout.strip().endswith("USER MODEL OK"), backend

    check_commands_without_tensorflow(environment, tmp_path, on_jax)

    # pip builds an sdist with the build backend pyproject.toml names, fetched
    # into an isolated environment; here the pinned one is installed beside it
    # instead, so the test needs no index.
    pip_into(python, f"hatchling=={pinned_version('hatchling')}")
    pip_into(python, "--no-deps", "--no-build-isolation", "--force-reinstall", str(sdist))
    result = subprocess.run(
        [python, "-c", SDIST_SCRIPT, str(REPO_ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=on_jax,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert result.stdout.strip().endswith("SDIST OK")
    shutil.rmtree(environment)  # over half a gigabyte; kept when the test fails, to look into


def run_installed(environment, arguments, cwd, env, timeout=300):
    """`keras-transformer ARGUMENTS`, the console script pip wrote into `environment`."""
    return subprocess.run(
        [str(environment / "bin" / "keras-transformer"), *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )


def check_commands_without_tensorflow(environment, cwd, env):
    """Where only the core and a backend are installed: `--help` of the command and of each
    subcommand answers, and a command that needs an extra names it in one line."""
    from keras_transformer.cli.main import COMMANDS

    listing = run_installed(environment, ["--help"], cwd, env)
    assert listing.returncode == 0, listing.stderr[-3000:]
    assert all(command in listing.stdout for command in COMMANDS), listing.stdout
    for command in COMMANDS:
        result = run_installed(environment, [command, "--help"], cwd, env)
        assert result.returncode == 0, (command, result.stderr[-3000:])
        assert result.stdout.startswith(f"usage: keras-transformer {command}"), result.stdout[:200]
    run_dir = cwd / "a_run"
    run_dir.mkdir()
    needs = {
        ("export", str(run_dir)): "tensorflow",
        ("serve", "--model", f"m={run_dir}"): "serve",
    }
    for arguments, extra in needs.items():
        result = run_installed(environment, list(arguments), cwd, env)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, (arguments, result.stderr[-3000:])
        assert f'pip install "keras-transformer-toolkit[{extra}]"' in lines[0], lines


def test_installed_command_trains_exports_and_predicts(wheel, tmp_path):
    """The wheel's `keras-transformer` with no clone: a tiny classifier trained from a CSV
    for one epoch, exported, and asked, each by the installed command, in a folder of the
    user's. The wheel alone is installed here (--no-deps); its dependencies come from this
    environment's site-packages, read through a `.pth` line (not its editable install of
    the checkout: a folder named in a `.pth` file has its own `.pth` files ignored)."""
    from tests.classifier_fixtures import CLASS_NAMES, TRAIN_FLAGS, write_keyword_csv

    environment = tmp_path / "venv"
    venv.create(environment, with_pip=False)
    site_packages = next((environment / "lib").glob("python3*/site-packages"))
    (site_packages / "pinned_set.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip_into(str(environment / "bin" / "python"), "--no-deps", str(wheel))
    user = tmp_path / "user"
    user.mkdir()
    csv_path = write_keyword_csv(user / "keywords.csv")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "KERAS_BACKEND") and not key.startswith("JAX_")
    }

    trained = run_installed(
        environment,
        ["train-classifier", "--data", f"csv:{csv_path}", *TRAIN_FLAGS]
        + ["--epochs", "1", "--run-dir", "run", "--no-export"],
        user,
        env,
        timeout=400,
    )
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    exported = run_installed(environment, ["export", "run", "--export-dir", "exported"], user, env)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert 'Try it: keras-transformer predict exported "your text here"' in exported.stdout
    assert os.listdir(user / "exported") == ["1"]

    predicted = run_installed(
        environment, ["predict", "exported", "--json", "alpha beta", "gamma delta"], user, env
    )
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    answers = [json.loads(line) for line in predicted.stdout.splitlines()]
    assert [answer["text"] for answer in answers] == ["alpha beta", "gamma delta"]
    assert all(answer["label"] in CLASS_NAMES for answer in answers), answers

    # And the code that ran was the wheel's, in that environment, not the checkout's.
    where = subprocess.run(
        [
            str(environment / "bin" / "python"),
            "-c",
            "import keras_transformer; print(keras_transformer.__file__)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=user,
        env=env,
    )
    assert where.stdout.strip().startswith(str(site_packages)), where.stdout + where.stderr
    shutil.rmtree(environment)
