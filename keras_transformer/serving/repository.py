"""The models a server holds: the versions each serves, swapped as new ones appear.

As TensorFlow Serving's file-system source does, each model's base path is
polled and its version policy (`latest` N, the default 1; `specific`; `all`)
says which version folders serve. A new version (our exports appear by an
atomic rename, see `keras_transformer.export.versions`) is loaded beside the
ones serving and only then takes requests; a version the policy no longer
wants (replaced by a newer one, or its folder deleted) is then unloaded and
released. A request holds the version it started with, so a switch never
fails or drops a request in flight. A version that fails to load is logged,
reported in the status, and retried with backoff on later polls (it may still
be being copied in), while the newest versions that did load keep serving.
Folders not named by ASCII digits are ignored.

Only `serving_default` and the signatures a model's config names are served:
the others are dropped where a version loads, so every API sees the same set.
"""

import gc
import logging
import os
import threading
import time
import weakref

from keras_transformer.export.controls import read_request_controls
from keras_transformer.serving.model_config import model_configs
from keras_transformer.serving.protocol import TensorSpec
from keras_transformer.serving.service import DEFAULT_SIGNATURE

logger = logging.getLogger("keras_transformer.serving")

# Version states, as TensorFlow Serving's GetModelStatus names them.
AVAILABLE, LOADING, END = "AVAILABLE", "LOADING", "END"


class ServedVersion:
    """One loaded SavedModel version: its public signatures and their input/output specs."""

    def __init__(self, model_name, version, path, loaded, public_signatures=(DEFAULT_SIGNATURE,)):
        self.model_name = model_name
        self.version = version
        self.path = path
        self.loaded = loaded  # keeps the variables alive while signatures are in use
        self.retired = False  # set once the version no longer takes new requests
        self.signatures = {
            name: function
            for name, function in loaded.signatures.items()
            if name in public_signatures
        }
        self.inputs = {name: _input_specs(function) for name, function in self.signatures.items()}
        self.outputs = {name: _output_specs(function) for name, function in self.signatures.items()}
        # {signature name: its per-request controls}, as the export recorded them.
        self.controls = {}
        recorded = read_request_controls(path)
        if recorded and recorded.get("signature") in self.signatures:
            self.controls[recorded["signature"]] = recorded

    def batchable(self, signature_name):
        """Whether requests can be merged: every input and output has a leading batch axis."""
        specs = list(self.inputs[signature_name].values()) + list(
            self.outputs[signature_name].values()
        )
        return all(spec.shape and spec.shape[0] is None for spec in specs)

    def warm_up(self):
        """Runs every signature once, so the first request after a switch does
        not pay for the first call's setup (as TensorFlow Serving's warm-up
        requests do). Signatures whose inputs are not all strings are skipped."""
        import numpy as np

        for name, specs in self.inputs.items():
            if all(spec.dtype == "DT_STRING" and spec.shape == [None] for spec in specs.values()):
                self.run(
                    name, {input_name: np.array([b"warm up"], dtype=object) for input_name in specs}
                )

    def run(self, signature_name, inputs):
        """{input name: numpy array} -> {output name: numpy array}, in the signature's order."""
        import tensorflow as tf

        function = self.signatures[signature_name]
        arguments = {
            name: tf.constant(value, dtype=_tf_dtype(self.inputs[signature_name][name].dtype))
            for name, value in inputs.items()
        }
        outputs = function(**arguments)
        return {name: outputs[name].numpy() for name in self.outputs[signature_name]}


class ServedModel:
    """A model's config, the versions it serves and the status of each version seen."""

    def __init__(self, config, loader, retry_seconds=1.0, max_retry_seconds=60.0):
        self.config = config
        self.name = config.name
        self.base_path = config.base_path
        self.labels = dict(config.version_labels)
        self._loader = loader
        self._refresh_lock = threading.Lock()
        # version -> ServedVersion. Replaced whole, never changed in place, so
        # a request reads it without a lock.
        self.served = {}
        self.states = {}  # version -> (state, error message); replaced whole, as `served` is
        self._base_path_missing = False
        self.load_failures = 0  # failed loads of any version, retries included
        # Weak references to unloaded versions that requests still held at
        # the swap: their memory goes back at the first poll after the last
        # such request ends.
        self._releasing = []
        self.retry_seconds = retry_seconds
        self.max_retry_seconds = max_retry_seconds
        # version -> (the wait after its last failure, monotonic time of its next
        # try). A version still being copied in fails until complete, and
        # copying into its subfolders or files need not change the version
        # folder's own mtime, so failed versions are retried on a backoff rather
        # than when rewritten.
        self._failed = {}

    @property
    def current(self):
        """The newest version serving, or None."""
        served = self.served
        return served[max(served)] if served else None

    def resolve(self, version=None):
        """The version to serve a request with (None: the newest), or None if it is not serving."""
        served = self.served
        if version is None:
            return served[max(served)] if served else None
        return served.get(version)

    def refresh(self):
        """Loads the versions the policy wants and unloads the others. Returns True if the
        served set changed."""
        with self._refresh_lock:
            return self._refresh()

    def _refresh(self):
        self._collect_released()
        if not os.path.isdir(self.base_path):
            # As TensorFlow Serving: a missing base path (perhaps a network
            # file system's hiccup) changes nothing, unlike an empty one.
            if not self._base_path_missing:
                logger.warning(
                    "model=%s: no folder at its base path %s; serving what was loaded",
                    self.name,
                    self.base_path,
                )
            self._base_path_missing = True
            return False
        self._base_path_missing = False
        # Imported here: keras_transformer.export imports TensorFlow, and
        # `import keras_transformer.serving` stays light for the serve command to
        # check its flags at once.
        from keras_transformer.export.versions import version_folders

        folders = version_folders(self.base_path)
        self._failed = {
            version: retry for version, retry in self._failed.items() if version in folders
        }
        policy = self.config.version_policy
        limit = policy.limit()
        keep, changed = [], False
        # Newest first: if the newest cannot load yet, an older one serves in
        # its place (and at start, any version beats none).
        for version in policy.candidates(folders):
            if limit is not None and len(keep) == limit:
                break
            if version in self.served:
                keep.append(version)
                continue
            last_delay, next_try = self._failed.get(version, (0.0, 0.0))
            if time.monotonic() < next_try:
                continue
            if self._load(version, os.path.join(self.base_path, folders[version]), last_delay):
                keep.append(version)
                changed = True
        return self._unload_all_but(keep, folders) or changed

    def _load(self, version, path, last_delay):
        """Loads `version` and serves it beside the others; False (and a retry scheduled) if it
        fails."""
        self._set_state(version, LOADING)
        started = time.monotonic()
        try:
            loaded = self._loader(path)
            served = ServedVersion(
                self.name, version, path, loaded, self.config.public_signatures()
            )
            served.warm_up()
        except Exception as error:  # a broken export must not take the server down
            delay = (
                min(2 * last_delay, self.max_retry_seconds) if last_delay else self.retry_seconds
            )
            self._failed[version] = (delay, time.monotonic() + delay)
            self.load_failures += 1
            message = f"{type(error).__name__}: {error}".splitlines()[0][:500]
            self._set_state(version, END, message)
            logger.error(
                "model=%s version=%d failed to load (retrying in %.3g s): %s",
                self.name,
                version,
                delay,
                message,
            )
            return False
        self._failed.pop(version, None)
        self.served = {**self.served, version: served}
        self._set_state(version, AVAILABLE)
        missing = sorted(set(self.config.signatures) - set(loaded.signatures))
        logger.info(
            "model=%s version=%d available (%.1f s to load), signatures %s",
            self.name,
            version,
            time.monotonic() - started,
            sorted(served.signatures),
        )
        if missing:
            logger.warning(
                "model=%s version=%d has no signature %s (it has %s)",
                self.name,
                version,
                ", ".join(missing),
                sorted(loaded.signatures),
            )
        return True

    def _set_state(self, version, state, message=""):
        self.states = {**self.states, version: (state, message)}

    def _unload_all_but(self, keep, folders):
        """Stops serving every version not in `keep`; True if there were any."""
        unloaded = [version for version in self.served if version not in keep]
        if not unloaded:
            return False
        for version in unloaded:
            self.served[version].retired = True
        self._releasing += [weakref.ref(self.served[version]) for version in unloaded]
        self.served = {
            version: served for version, served in self.served.items() if version in keep
        }
        for version in unloaded:
            self._set_state(version, END)
            reason = (
                "its folder was removed"
                if version not in folders
                else f"policy {self.config.version_policy}"
            )
            logger.info("model=%s version=%d unloaded (%s)", self.name, version, reason)
        if not self.served:
            # As TensorFlow Serving, whose source then aspires to no version.
            logger.warning("model=%s: no version left to serve under %s", self.name, self.base_path)
        self._collect_released()
        return True

    def _collect_released(self):
        """Frees the unloaded versions no request holds any more.

        A loaded SavedModel's functions and graphs are held in reference
        cycles: without a collection, their memory (the runtime's copies of
        the functions included) would wait for Python's next full
        collection, piling up a version per swap until then. Requests still
        running on an unloaded version hold it alive; it goes at a later poll.
        """
        if any(reference() is None for reference in self._releasing):
            gc.collect()
            self._releasing = [
                reference for reference in self._releasing if reference() is not None
            ]


class ModelRepository:
    """Every served model by name, and the poller that keeps them current."""

    def __init__(
        self, models, loader=None, poll_seconds=1.0, retry_seconds=1.0, max_retry_seconds=60.0
    ):
        """`models`: `ModelConfig`s, or {name: base path} for the defaults
        (the newest version, `serving_default` only); `loader`: path -> loaded
        SavedModel; a version that fails to load is retried after
        `retry_seconds`, then twice as long after each failure, up to
        `max_retry_seconds`."""
        if isinstance(models, dict):
            models = model_configs(models)
        self.models = {
            config.name: ServedModel(
                config, loader or load_saved_model, retry_seconds, max_retry_seconds
            )
            for config in models
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
    return {
        name: TensorSpec(
            name,
            _dtype_name(spec.dtype),
            spec.shape.as_list() if spec.shape.rank is not None else [],
        )
        for name, spec in sorted(keyword_specs.items())
    }


def _output_specs(function):
    return {
        name: TensorSpec(
            name,
            _dtype_name(spec.dtype),
            spec.shape.as_list() if spec.shape.rank is not None else [],
        )
        for name, spec in sorted(function.structured_outputs.items())
    }


def _dtype_name(dtype):
    from tensorflow.core.framework import types_pb2

    return types_pb2.DataType.Name(dtype.as_datatype_enum)  # "DT_STRING", "DT_FLOAT", ...


def _tf_dtype(dtype_name):
    import tensorflow as tf
    from tensorflow.core.framework import types_pb2

    return tf.as_dtype(types_pb2.DataType.Value(dtype_name))
