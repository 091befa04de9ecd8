"""The models a server holds: one loaded version each, swapped when a newer one appears.

As TensorFlow Serving's file-system source does, each model's base path is
polled; when a new version folder appears (our exports appear by an atomic
rename, see `keras_transformer.export.versions`), it is loaded beside the one
being served and only then made current. A request holds the version it
started with, so a switch never fails or drops a request in flight; a version
that fails to load is logged, reported in the status, and retried with backoff
on later polls (it may still be being copied in), while the newest version
that did load keeps serving. Folders not named by ASCII digits are ignored.
"""

import logging
import os
import threading
import time

from keras_transformer.export.versions import version_folders
from keras_transformer.serving.protocol import TensorSpec

logger = logging.getLogger("keras_transformer.serving")

# Version states, as TensorFlow Serving's GetModelStatus names them.
AVAILABLE, LOADING, END = "AVAILABLE", "LOADING", "END"


class ServedVersion:
    """One loaded SavedModel version: its signatures and their input/output specs."""

    def __init__(self, model_name, version, path, loaded):
        self.model_name = model_name
        self.version = version
        self.path = path
        self.loaded = loaded  # keeps the variables alive while signatures are in use
        self.retired = False  # set once a newer version serves new requests
        self.signatures = dict(loaded.signatures)
        self.inputs = {name: _input_specs(function) for name, function in self.signatures.items()}
        self.outputs = {name: _output_specs(function) for name, function in self.signatures.items()}

    def batchable(self, signature_name):
        """Whether requests can be merged: every input and output has a leading batch axis."""
        specs = list(self.inputs[signature_name].values()) + list(self.outputs[signature_name].values())
        return all(spec.shape and spec.shape[0] is None for spec in specs)

    def warm_up(self):
        """Runs every signature once, so the first request after a switch does
        not pay for the first call's setup (as TensorFlow Serving's warm-up
        requests do). Signatures whose inputs are not all strings are skipped."""
        import numpy as np

        for name, specs in self.inputs.items():
            if all(spec.dtype == "DT_STRING" and spec.shape == [None] for spec in specs.values()):
                self.run(name, {input_name: np.array([b"warm up"], dtype=object) for input_name in specs})

    def run(self, signature_name, inputs):
        """{input name: numpy array} -> {output name: numpy array}, in the signature's order."""
        import tensorflow as tf

        function = self.signatures[signature_name]
        arguments = {name: tf.constant(value, dtype=_tf_dtype(self.inputs[signature_name][name].dtype))
                     for name, value in inputs.items()}
        outputs = function(**arguments)
        return {name: outputs[name].numpy() for name in self.outputs[signature_name]}


class ServedModel:
    """A model name, its base path, the version being served and the status of each seen."""

    def __init__(self, name, base_path, loader, retry_seconds=1.0, max_retry_seconds=60.0):
        self.name = name
        self.base_path = base_path
        self._loader = loader
        self._lock = threading.Lock()
        self.current = None
        self.states = {}  # version -> (state, error message)
        self.load_failures = 0  # failed loads of any version, retries included
        self.retry_seconds = retry_seconds
        self.max_retry_seconds = max_retry_seconds
        # version -> (the wait after its last failure, monotonic time of its next
        # try). A version still being copied in fails until complete, and
        # copying into its subfolders or files need not change the version
        # folder's own mtime, so failed versions are retried on a backoff rather
        # than when rewritten.
        self._failed = {}

    def refresh(self):
        """Loads the newest loadable version newer than the one served. Returns True on a switch."""
        folders = version_folders(self.base_path)
        self._failed = {version: retry for version, retry in self._failed.items() if version in folders}
        if not folders:
            if self.current is None:
                self.states.clear()
            return False
        served = self.current.version if self.current is not None else 0
        # Newest first: if the newest cannot load yet, a newer one than the
        # served version may still (and at start, any version beats none).
        for version in sorted(folders, reverse=True):
            if version <= served:
                return False
            last_delay, next_try = self._failed.get(version, (0.0, 0.0))
            if time.monotonic() < next_try:
                continue
            if self._load(version, os.path.join(self.base_path, folders[version]), last_delay):
                return True
        return False

    def _load(self, version, path, last_delay):
        """Loads `version` and makes it current; False (and a retry scheduled) if it fails."""
        self.states[version] = (LOADING, "")
        started = time.monotonic()
        try:
            loaded = self._loader(path)
            served = ServedVersion(self.name, version, path, loaded)
            served.warm_up()
        except Exception as error:  # a broken export must not take the server down
            delay = min(2 * last_delay, self.max_retry_seconds) if last_delay else self.retry_seconds
            self._failed[version] = (delay, time.monotonic() + delay)
            self.load_failures += 1
            message = f"{type(error).__name__}: {error}".splitlines()[0][:500]
            self.states[version] = (END, message)
            logger.error("model=%s version=%d failed to load (retrying in %.3g s): %s",
                         self.name, version, delay, message)
            return False
        self._failed.pop(version, None)
        with self._lock:
            previous, self.current = self.current, served
        self.states[version] = (AVAILABLE, "")
        if previous is not None:
            # Requests still running on it hold their own reference.
            previous.retired = True
            self.states[previous.version] = (END, "")
        logger.info(
            "model=%s version=%d available (%.1f s to load)%s", self.name, version, time.monotonic() - started,
            f", replacing version {previous.version}" if previous else "",
        )
        return True

    def resolve(self, version=None):
        """The version to serve a request with, or None if it is not available."""
        served = self.current
        if served is None or (version is not None and version != served.version):
            return None
        return served


class ModelRepository:
    """Every served model by name, and the poller that keeps them current."""

    def __init__(self, model_paths, loader=None, poll_seconds=1.0, retry_seconds=1.0, max_retry_seconds=60.0):
        """`model_paths`: {name: base path}; `loader`: path -> loaded SavedModel;
        a version that fails to load is retried after `retry_seconds`, then
        twice as long after each failure, up to `max_retry_seconds`."""
        self.models = {
            name: ServedModel(name, path, loader or load_saved_model, retry_seconds, max_retry_seconds)
            for name, path in model_paths.items()
        }
        self.poll_seconds = poll_seconds
        self._stop = threading.Event()
        self._thread = None

    def refresh_all(self):
        for model in self.models.values():
            model.refresh()

    def ready(self):
        return all(model.current is not None for model in self.models.values())

    def start_polling(self):
        if self.poll_seconds and self.poll_seconds > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._poll, name="version-poller", daemon=True)
            self._thread.start()

    def stop_polling(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _poll(self):
        while not self._stop.wait(self.poll_seconds):
            try:
                self.refresh_all()
            except Exception:  # keep polling whatever one pass met
                logger.exception("Polling the model folders failed")


def load_saved_model(path):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the tokenizer ops our exports use

    return tf.saved_model.load(path)


def _input_specs(function):
    _, keyword_specs = function.structured_input_signature
    return {name: TensorSpec(name, _dtype_name(spec.dtype), spec.shape.as_list() if spec.shape.rank is not None else [])
            for name, spec in sorted(keyword_specs.items())}


def _output_specs(function):
    return {name: TensorSpec(name, _dtype_name(spec.dtype), spec.shape.as_list() if spec.shape.rank is not None else [])
            for name, spec in sorted(function.structured_outputs.items())}


def _dtype_name(dtype):
    from tensorflow.core.framework import types_pb2

    return types_pb2.DataType.Name(dtype.as_datatype_enum)  # "DT_STRING", "DT_FLOAT", ...


def _tf_dtype(dtype_name):
    import tensorflow as tf
    from tensorflow.core.framework import types_pb2

    return tf.as_dtype(types_pb2.DataType.Value(dtype_name))
