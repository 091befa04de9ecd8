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

The models themselves may change while the server runs, as TensorFlow
Serving's `--model_config_file_poll_wait_seconds` and
`HandleReloadConfigRequest` change them (`ModelRepository.apply_config`): a
model added is loaded before its name answers; a model removed stops taking
requests and is freed once those it took have finished; a model whose policy
or labels change loads the versions now wanted before it unloads the others;
one whose base path or signatures change is loaded again beside the old one,
which serves until the new one has a version (as TensorFlow Serving's
availability-preserving policy keeps a version until its successor loads).
"""

import gc
import json
import logging
import os
import threading
import time
import weakref

from keras_transformer.export.controls import read_request_controls
from keras_transformer.export.signature_defs import (
    EXAMPLE_METHOD_NAMES,
    PREDICT_METHOD_NAME,
    read_signature_defs,
)
from keras_transformer.serving.model_config import (
    ModelConfigError,
    model_configs,
    parse_model_config,
)
from keras_transformer.serving.protocol import TensorSpec
from keras_transformer.serving.service import DEFAULT_SIGNATURE

logger = logging.getLogger("keras_transformer.serving")

# Version states, as TensorFlow Serving's GetModelStatus names them.
AVAILABLE, LOADING, END = "AVAILABLE", "LOADING", "END"

ASSETS_EXTRA = "assets.extra"
# What of a version's assets.extra the metadata APIs serve: *.json (parsed) and *.txt files,
# each at most ASSETS_EXTRA_FILE_BYTES and all together at most ASSETS_EXTRA_TOTAL_BYTES.
ASSETS_EXTRA_SUFFIXES = (".json", ".txt")
ASSETS_EXTRA_FILE_BYTES = 256 << 10
ASSETS_EXTRA_TOTAL_BYTES = 1 << 20


class ServedVersion:
    """One loaded SavedModel version: its public signatures and their input/output specs."""

    def __init__(self, model_name, version, path, loaded, public_signatures=(DEFAULT_SIGNATURE,)):
        self.model_name = model_name
        self.version = version
        self.path = path
        self.loaded = loaded  # keeps the variables alive while signatures are in use
        self.retired = False  # set once the version no longer takes new requests
        # {signature name: its SignatureDef}, for the method names (Classify and Regress go by
        # them) and the tensor names of TensorFlow Serving's errors. A loader that is not
        # reading this folder's SavedModel (tests) leaves them to the specs.
        from google.protobuf.message import DecodeError

        try:
            signature_defs = read_signature_defs(path)
        except (OSError, DecodeError):
            signature_defs = {}
        # Classification and regression signatures are public as TensorFlow Serving's Classify
        # and Regress find them by name: they are cheap, and no Predict client sees them.
        self.signatures = {
            name: function
            for name, function in loaded.signatures.items()
            if name in public_signatures
            or (name in signature_defs and signature_defs[name].method_name in EXAMPLE_METHOD_NAMES)
        }
        self.signature_defs = {
            name: signature_defs[name] for name in self.signatures if name in signature_defs
        }
        self.inputs = {name: _input_specs(function) for name, function in self.signatures.items()}
        self.outputs = {name: _output_specs(function) for name, function in self.signatures.items()}
        # {signature name: its per-request controls}, as the export recorded them.
        self.controls = {}
        recorded = read_request_controls(path)
        if recorded and recorded.get("signature") in self.signatures:
            self.controls[recorded["signature"]] = recorded
        # {file name: parsed JSON or text}: what the metadata APIs serve as "assets_extra".
        self.assets_extra = read_assets_extra(path, model_name, version)

    def method_name(self, signature_name):
        """The SignatureDef's method name: TensorFlow Serving's predict, classify or regress."""
        signature_def = self.signature_defs.get(signature_name)
        return signature_def.method_name if signature_def else PREDICT_METHOD_NAME

    def batchable(self, signature_name):
        """Whether requests can be merged: every input and output has a leading batch axis."""
        specs = list(self.inputs[signature_name].values()) + list(
            self.outputs[signature_name].values()
        )
        return all(spec.shape and spec.shape[0] is None for spec in specs)

    def warm_up(self, num_request_iterations=1):
        """Replays the export's warm-up requests, so the first requests after a switch do not
        pay for the runtime's setup on a function's first calls.

        As TensorFlow Serving does: the `PredictionLog` records of
        `assets.extra/tf_serving_warmup_requests` are run in order, each
        `num_request_iterations` times (`keras_transformer.export.warmup`); a
        record naming a signature this version does not serve is skipped. An
        export without the file gets every signature whose inputs are all
        strings run once on one text.

        Args:
            num_request_iterations: int, runs of each record.

        Raises:
            WarmupRequestsError: the file does not read, or the model refuses a request in
                it (the version then fails to load, as in TensorFlow Serving).
        """
        from keras_transformer.export.warmup import (
            WarmupRequestsError,
            read_warmup_requests,
            warmup_calls,
        )

        logs = read_warmup_requests(self.path)
        if logs is None:
            return self._warm_up_each_signature()
        started, calls = time.monotonic(), 0
        for index, log in enumerate(logs):
            try:
                record_calls = warmup_calls(log)
            except WarmupRequestsError as error:
                raise WarmupRequestsError(f"Warm-up record {index}: {error}") from None
            for signature_name, inputs in record_calls:
                if signature_name not in self.signatures:
                    logger.debug(
                        "model=%s version=%d: warm-up record %d skipped: signature %s is "
                        "not served",
                        self.model_name,
                        self.version,
                        index,
                        signature_name,
                    )
                    continue
                expected = sorted(self.inputs[signature_name])
                if sorted(inputs) != expected:
                    raise WarmupRequestsError(
                        f"Warm-up record {index} gives signature {signature_name!r} the inputs "
                        f"{sorted(inputs)}; it takes {expected}."
                    )
                for _ in range(num_request_iterations):
                    try:
                        self.run(signature_name, inputs)
                    except Exception as error:
                        reason = " ".join(f"{type(error).__name__}: {error}".split())[:300]
                        raise WarmupRequestsError(
                            f"Warm-up record {index} fails on signature {signature_name!r}: "
                            f"{reason}"
                        ) from error
                    calls += 1
        logger.info(
            "model=%s version=%d warmed up: %d calls from %d warm-up records in %.2f s",
            self.model_name,
            self.version,
            calls,
            len(logs),
            time.monotonic() - started,
        )

    def _warm_up_each_signature(self):
        """Runs every signature whose inputs are all strings once, on one text. A signature
        that refuses it (one that reads serialized tf.Examples, say) is left cold: without a
        warm-up file TensorFlow Serving runs nothing, so this must not refuse the version."""
        import numpy as np
        import tensorflow as tf

        for name, specs in self.inputs.items():
            if all(spec.dtype == "DT_STRING" and spec.shape == [None] for spec in specs.values()):
                try:
                    self.run(
                        name,
                        {input_name: np.array([b"warm up"], dtype=object) for input_name in specs},
                    )
                except tf.errors.InvalidArgumentError as error:
                    logger.debug(
                        "model=%s version=%d: signature %s refused the warm-up text: %s",
                        self.model_name,
                        self.version,
                        name,
                        " ".join(error.message.split())[:200],
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

    def __init__(self, config, loader, retry_seconds=1.0, max_retry_seconds=60.0, warm_up=True):
        self.config = config
        self.name = config.name
        self.base_path = config.base_path
        self.labels = dict(config.version_labels)
        self._loader = loader
        self.warm_up = warm_up
        self._refresh_lock = threading.Lock()
        # Set once the model left the config (or was replaced): polls load nothing more into it.
        self.detached = False
        # Set while versions the policy no longer wants serve because none it wants has loaded.
        self._preserving = False
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
            if self.detached:
                return False
            return self._refresh()

    def reconfigure(self, config):
        """Serves `config`, which differs from the current one only in its
        version policy and labels: the versions it wants are loaded, then the
        labels switch, then the versions it no longer wants are unloaded, so
        no request finds nothing to run on. Returns True if the served set
        changed."""
        with self._refresh_lock:
            if self.detached:
                return False
            self.config = config
            self._failed = {}  # a version the new policy wants is tried at once
            return self._refresh()

    def detach(self, reason):
        """Takes this model out of service for good (`reason`, for the log):
        later polls load nothing into it. Requests that already hold it finish
        on the versions they resolved. Returns weak references to every version
        it loaded, to free their memory once the last such request ends."""
        with self._refresh_lock:
            self.detached = True
            served = self.served
            for version in served.values():
                version.retired = True
            logger.info(
                "model=%s %s; versions %s unload once their requests finish",
                self.name,
                reason,
                sorted(served),
            )
            return [weakref.ref(version) for version in served.values()] + self._releasing

    def unavailable_reason(self):
        """Why no version serves: the last load error, or that none was found."""
        errors = [
            f"version {version}: {message}"
            for version, (state, message) in sorted(self.states.items(), reverse=True)
            if message
        ]
        if errors:
            return errors[0]
        return f"no version its policy ({self.config.version_policy}) wants under {self.base_path}"

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
        if not keep and self.served and policy.candidates(folders):
            # As TensorFlow Serving's availability-preserving policy: what serves
            # goes only once a version the policy wants has loaded in its place.
            if not self._preserving:
                logger.warning(
                    "model=%s: keeping versions %s until a version its policy (%s) wants loads",
                    self.name,
                    sorted(self.served),
                    policy,
                )
            self._preserving = True
            keep = list(self.served)
        else:
            self._preserving = False
        # Labels switch once the versions they name have loaded, before the others unload.
        if self.labels != self.config.version_labels:
            self.labels = dict(self.config.version_labels)
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
            if self.warm_up:
                served.warm_up(num_request_iterations=int(self.warm_up))
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
        """Frees the unloaded versions no request holds any more (see `collect_released`)."""
        self._releasing = collect_released(self._releasing)


def collect_released(references):
    """Of `references` (weak references to unloaded `ServedVersion`s), those
    still alive, after a collection if any has died.

    A loaded SavedModel's functions and graphs are held in reference cycles:
    without a collection, their memory (the runtime's copies of the functions
    included) would wait for Python's next full collection, piling up a
    version per swap until then. Requests still running on an unloaded
    version hold it alive; it goes at a later poll.
    """
    if any(reference() is None for reference in references):
        gc.collect()
        return [reference for reference in references if reference() is not None]
    return references


class ModelRepository:
    """Every served model by name, and the pollers that keep them current.

    Args:
        configs: `ModelConfig`s, or {name: base path} for the defaults (the
            newest version, `serving_default` only).
        loader: path -> loaded SavedModel.
        poll_seconds: how often each model's base path is polled for new
            versions (0: never).
        retry_seconds: a version that fails to load is retried after this
            long, then twice as long after each failure, up to
            `max_retry_seconds`.
        max_retry_seconds: the longest wait between retries.
        config_file: TensorFlow Serving's model config file the `configs`
            were read from, polled every `config_poll_seconds` (when above
            0) for changes, which `apply_config` then serves.
        config_poll_seconds: how often `config_file` is read (0: never).
        adjust_configs: a function applied to every list of `ModelConfig`s
            read later (from `config_file` or `reload_config`), such as the
            command line's extra signatures; it may raise ModelConfigError.
        warm_up: how many times each version replays its warm-up requests as
            it loads, before it takes requests (`ServedVersion.warm_up`;
            TensorFlow Serving's `--num_request_iterations_for_warmup`);
            0 or False: none.
    """

    def __init__(
        self,
        configs,
        loader=None,
        poll_seconds=1.0,
        retry_seconds=1.0,
        max_retry_seconds=60.0,
        config_file=None,
        config_poll_seconds=0.0,
        adjust_configs=None,
        warm_up=True,
    ):
        if isinstance(configs, dict):
            configs = model_configs(configs)
        configs = list(configs)
        _check_unique_names(configs)
        self._loader = loader or load_saved_model
        self.retry_seconds = retry_seconds
        self.max_retry_seconds = max_retry_seconds
        self.warm_up = warm_up
        # name -> ServedModel, and the configs they serve. Both replaced whole,
        # never changed in place, so a request reads them without a lock.
        self.models = {config.name: self._new_model(config) for config in configs}
        self.configs = configs
        # name -> a ServedModel of a new base path or signatures, loading while the
        # model's old one serves; it takes over once it has a version.
        self._pending = {}
        self.poll_seconds = poll_seconds
        self.config_file = config_file
        self.config_poll_seconds = config_poll_seconds
        self.adjust_configs = adjust_configs
        # One change of the config at a time: the file's poller, reloads and takeovers.
        self._config_lock = threading.Lock()
        # The file's text whose config serves (None: another, such as a reload's).
        self._file_text = None
        self._file_problem = None  # the last (text, problem) logged, to log each once
        # Weak references to the versions of models taken out of service.
        self._releasing = []
        self._release_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = []

    def _new_model(self, config, reuse=None):
        """A `ServedModel` of `config`; versions `reuse` (a ServedModel) loaded from
        the same folders are not loaded again."""
        loader = self._loader
        if reuse is not None:
            loaded = {version.path: version.loaded for version in reuse.served.values()}

            def loader(path):
                return loaded[path] if path in loaded else self._loader(path)

        return ServedModel(
            config, loader, self.retry_seconds, self.max_retry_seconds, warm_up=self.warm_up
        )

    def refresh_all(self):
        """Polls every model's base path (and those of models waiting to take over)."""
        for model in list(self.models.values()):
            model.refresh()
        for name, replacement in list(self._pending.items()):
            replacement.refresh()
            if replacement.current is not None:
                self._take_over(name, replacement)
        with self._release_lock:
            self._releasing = collect_released(self._releasing)

    def ready(self):
        return all(model.current is not None for model in self.models.values())

    def apply_config(self, configs):
        """Serves the models of `configs` (`ModelConfig`s) in place of the current ones.

        A model added is loaded before its name answers; one removed stops
        taking requests and is freed once those it took have finished; one
        whose policy or labels change loads the versions now wanted before it
        unloads the others; one whose base path or signatures change is loaded
        again beside the old one, which serves until the new one has a version.
        Models that stay never fail a request on the way.

        Returns {name: why} for each model added or reloaded that has no
        version serving yet (it is retried on later polls, as a version that
        fails to load is). Raises ModelConfigError if two configs share a name.
        """
        configs = list(configs)
        _check_unique_names(configs)
        with self._config_lock:
            return self._apply(configs)

    def reload_config(self, configs):
        """`apply_config` of `configs` after `adjust_configs`: what gRPC's
        `HandleReloadConfigRequest` calls. As in TensorFlow Serving, a polled
        config file's next poll puts the file's config back."""
        if self.adjust_configs is not None:
            configs = self.adjust_configs(list(configs))
        configs = list(configs)
        _check_unique_names(configs)
        with self._config_lock:
            self._file_text = None
            return self._apply(configs)

    def poll_config_file(self):
        """Reads `config_file` and serves its models if its text changed (or
        another config serves since). A file that cannot be served leaves the
        current config serving and is logged once per text and problem."""
        try:
            with open(self.config_file, encoding="utf-8") as config_file:
                text = config_file.read()
        except (OSError, UnicodeDecodeError) as error:
            self._file_refused(
                None, f"{self.config_file}: cannot read the model config file: {error}"
            )
            return
        with self._config_lock:
            if text == self._file_text:
                return
            try:
                configs = parse_model_config(text, self.config_file)
                if self.adjust_configs is not None:
                    configs = self.adjust_configs(configs)
                configs = list(configs)
                _check_unique_names(configs)
            except ModelConfigError as error:
                self._file_refused(text, str(error))
                return
            self._file_text, self._file_problem = text, None
            unavailable = self._apply(configs)
        if unavailable:
            logger.error(
                "Model config file %s: %s", self.config_file, unavailable_message(unavailable)
            )

    def _file_refused(self, text, problem):
        if self._file_problem != (text, problem):
            self._file_problem = (text, problem)
            logger.error("Model config not reloaded, the current one still serves: %s", problem)

    def _apply(self, configs):
        """`apply_config`'s work, under the config lock."""
        old_models, pending = self.models, dict(self._pending)
        models, unavailable, out_of_service = {}, {}, []
        added, changed = [], []
        for config in configs:
            name = config.name
            model = old_models.get(name)
            replacement = pending.pop(name, None)
            if model is None:
                model = self._new_model(config)
                model.refresh()
                added.append(name)
                if model.current is None:
                    unavailable[name] = model.unavailable_reason()
            elif _needs_new_model(model.config, config):
                changed.append(name)
                if replacement is not None and replacement.config != config:
                    out_of_service.append((replacement, "replaced before it could serve"))
                    replacement = None
                if replacement is None:
                    replacement = self._new_model(config, reuse=model)
                    replacement.refresh()
                if replacement.current is not None:
                    out_of_service.append((model, "replaced by its new config"))
                    model = replacement
                else:
                    pending[name] = replacement
                    unavailable[name] = replacement.unavailable_reason()
            else:
                if replacement is not None:
                    out_of_service.append((replacement, "replaced before it could serve"))
                if model.config != config:
                    changed.append(name)
                    model.reconfigure(config)
            models[name] = model
        removed = [name for name in old_models if name not in models]
        out_of_service += [(old_models[name], "removed from the config") for name in removed]
        out_of_service += [
            (replacement, "removed from the config")
            for name, replacement in pending.items()
            if name not in models
        ]
        pending = {name: replacement for name, replacement in pending.items() if name in models}
        self.models, self._pending, self.configs = models, pending, configs
        self._take_out_of_service(out_of_service)
        if added or removed or changed:
            logger.info(
                "Model config applied: added %s, removed %s, changed %s",
                added,
                removed,
                changed,
            )
        return unavailable

    def _take_over(self, name, replacement):
        """Serves `replacement`, a model waiting to take over `name`, in place of its old one."""
        with self._config_lock:
            if self._pending.get(name) is not replacement:
                return  # a config applied since changed it
            old = self.models.get(name)
            self.models = {**self.models, name: replacement}
            self._pending = {key: model for key, model in self._pending.items() if key != name}
            if old is not None:
                self._take_out_of_service([(old, "replaced by its new config")])

    def _take_out_of_service(self, models):
        for model, reason in models:
            references = model.detach(reason)
            with self._release_lock:
                self._releasing = self._releasing + references

    def start_polling(self):
        """Starts polling the models' base paths and, if one is given, the config file."""
        if self._threads:
            return
        if self.poll_seconds and self.poll_seconds > 0:
            self._threads.append(
                _poller(self._stop, self.poll_seconds, self.refresh_all, "version-poller")
            )
        if self.config_file and self.config_poll_seconds and self.config_poll_seconds > 0:
            self._threads.append(
                _poller(
                    self._stop, self.config_poll_seconds, self.poll_config_file, "config-poller"
                )
            )

    def stop_polling(self):
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)


def _poller(stop, seconds, poll, name):
    """A started daemon thread calling `poll()` every `seconds` until `stop` is set."""

    def run():
        while not stop.wait(seconds):
            try:
                poll()
            except Exception:  # keep polling whatever one pass met
                logger.exception("%s: a poll failed", name)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def _needs_new_model(old, new):
    """Whether serving `new` in place of `old` (ModelConfigs of one model) means loading its
    versions again: another base path, or other public signatures."""
    return old.base_path != new.base_path or old.public_signatures() != new.public_signatures()


def _check_unique_names(configs):
    names = [config.name for config in configs]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ModelConfigError(f"models listed twice: {twice}")


def _refuse_constant(name):
    # NaN and Infinity are Python's JSON, not JSON: no client could read them back.
    raise ValueError(f"{name} is not JSON")


def unavailable_message(unavailable):
    """TensorFlow Serving's message for models of a new config that did not load."""
    return f"{len(unavailable)} model(s) did not become available: " + "; ".join(
        f"{name} ({why})" for name, why in sorted(unavailable.items())
    )


def read_assets_extra(version_dir, model_name="-", version="-"):
    """{file name: contents} of `version_dir`'s assets.extra folder: each *.json
    file parsed, each *.txt file as text (UTF-8). Files past the size caps, or
    that do not parse, are left out and logged; links and folders are skipped."""
    folder = os.path.join(version_dir, ASSETS_EXTRA)
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError:  # no assets.extra: nothing to serve
        return {}
    contents, total = {}, 0
    for entry in entries:
        if not entry.name.endswith(ASSETS_EXTRA_SUFFIXES) or not entry.is_file(
            follow_symlinks=False
        ):
            continue
        size = entry.stat(follow_symlinks=False).st_size
        problem = None
        if size > ASSETS_EXTRA_FILE_BYTES:
            problem = f"{size} bytes, over the limit of {ASSETS_EXTRA_FILE_BYTES}"
        elif total + size > ASSETS_EXTRA_TOTAL_BYTES:
            problem = f"the files before it fill the {ASSETS_EXTRA_TOTAL_BYTES} bytes served"
        else:
            try:
                with open(entry.path, encoding="utf-8") as extra:
                    text = extra.read()
                contents[entry.name] = (
                    json.loads(text, parse_constant=_refuse_constant)
                    if entry.name.endswith(".json")
                    else text
                )
                total += size
            except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
                problem = f"{type(error).__name__}: {error}"
        if problem:
            logger.warning(
                "model=%s version=%s: %s/%s is not served in the metadata: %s",
                model_name,
                version,
                ASSETS_EXTRA,
                entry.name,
                problem,
            )
    return contents


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
