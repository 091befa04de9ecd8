"""What the server does for a request, whichever API it came by (REST or gRPC).

`PredictionService` owns the model threads and the batching queues, and
answers in the API-neutral terms both front ends translate: servables
resolved by name and version, signatures checked, inputs run. Every refusal
is a `RequestError` with an HTTP status; the gRPC side maps it to TensorFlow
Serving's status codes.
"""

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from keras_transformer.export.controls import ControlError, complete_controls
from keras_transformer.export.warmup import serialized_examples
from keras_transformer.serving.batching import Batcher, DeadlineExceeded, QueueFull
from keras_transformer.serving.classify import (
    CLASSIFY_METHOD_NAME,
    EXAMPLES_INPUT,
    REGRESS_METHOD_NAME,
    classification_problem,
    classification_result,
    example_count,
    regression_problem,
    regression_result,
    signature_def_text,
)
from keras_transformer.serving.metrics import ServingMetrics
from keras_transformer.serving.protocol import RequestError, _check_count

logger = logging.getLogger("keras_transformer.serving")

DEFAULT_SIGNATURE = "serving_default"


class ServerSettings:
    """Limits, batching and deadlines of a server.

    Args:
        max_body_bytes: largest request body accepted (413 above it).
        max_instances: most examples in one request (413 above it).
        batching: merge concurrent requests into one model call.
        max_batch_size: most examples in one merged call.
        batch_timeout_ms: how long a batch waits for company once a model
            thread is free, only while other requests to its signature run.
        num_threads: model calls that may run at once.
        max_queued_examples: most examples waiting for a model call per
            version and signature (503 above it); the default is a queue that
            even a slow model (the translator on two cores) works off well
            inside the default request timeout.
        request_timeout: seconds a request may take before it gets 504
            (TensorFlow Serving's `--rest_api_timeout_in_ms` defaults to 30 s).
        max_response_bytes: largest JSON answer sent (413 above it).
        grpc_port: the port of TensorFlow Serving's gRPC API (0: none).
        grpc_host: the address the gRPC API listens on.
        signature_max_instances: {signature name: most examples in one
            request to it}, below `max_instances` for signatures whose answers
            are large (the explorer's `attention`).
        explorer: serve the attention explorer page at `/`.
        json_threads: threads that parse large REST bodies and encode large
            answers, apart from the model threads so that neither waits for
            the other; two keep a burst of large ones from taking every core.
    """

    def __init__(
        self,
        max_body_bytes=1 << 20,
        max_instances=256,
        batching=True,
        max_batch_size=64,
        batch_timeout_ms=5.0,
        num_threads=2,
        max_queued_examples=256,
        request_timeout=30.0,
        max_response_bytes=8 << 20,
        grpc_port=0,
        grpc_host="127.0.0.1",
        signature_max_instances=None,
        explorer=False,
        json_threads=2,
    ):
        self.max_body_bytes = max_body_bytes
        self.max_instances = max_instances
        self.batching = batching
        self.max_batch_size = max_batch_size
        self.batch_timeout_ms = batch_timeout_ms
        self.num_threads = num_threads
        self.max_queued_examples = max_queued_examples
        self.request_timeout = request_timeout
        self.max_response_bytes = max_response_bytes
        self.grpc_port = grpc_port
        self.grpc_host = grpc_host
        self.signature_max_instances = dict(signature_max_instances or {})
        self.explorer = explorer
        self.json_threads = json_threads

    def instance_limit(self, signature_name):
        """The most examples one request to `signature_name` may carry."""
        return min(
            self.max_instances, self.signature_max_instances.get(signature_name, self.max_instances)
        )


class PredictionService:
    """The served models of `repository`, run on `settings.num_threads` model threads."""

    def __init__(self, repository, settings=None):
        self.repository = repository
        self.settings = settings or ServerSettings()
        self.executor = ThreadPoolExecutor(
            max_workers=self.settings.num_threads, thread_name_prefix="model"
        )
        self.metrics = ServingMetrics(self)
        self.batcher = Batcher(
            self.executor,
            self.settings.max_batch_size,
            self.settings.batch_timeout_ms / 1000.0,
            max_concurrent_batches=self.settings.num_threads,
            max_queued_examples=self.settings.max_queued_examples,
            on_batch=self.metrics.observe_batch,
        )

    async def start(self):
        """Loads every model's newest version, then starts watching for new ones."""
        await asyncio.get_running_loop().run_in_executor(self.executor, self.repository.refresh_all)
        self.repository.start_polling()

    def stop(self):
        self.repository.stop_polling()
        self.executor.shutdown(wait=False, cancel_futures=True)

    def model(self, name):
        """The `ServedModel` called `name`, or a 404."""
        model = self.repository.models.get(name)
        if model is None:
            raise RequestError(404, f"Servable not found for request: {servable_name(name, None)}")
        return model

    def servable(self, name, version=None, label=None):
        """The `ServedVersion` a request for `name` runs on: `version`, the
        version `label` names, or (neither given) the newest serving. An
        unknown label is a 400, a version not serving a 404, as in TensorFlow
        Serving."""
        model = self.model(name)
        if label is not None:
            version = self.label_version(model, label)
        served = model.resolve(version)
        if served is None:
            raise RequestError(
                404, f"Servable not found for request: {servable_name(name, version)}"
            )
        return served

    @staticmethod
    def label_version(model, label):
        """The version `label` names on `model`, or TensorFlow Serving's 400."""
        version = model.labels.get(label)
        if version is None:
            raise RequestError(400, f"Unrecognized servable version label: {label[:100]}")
        return version

    def signature_inputs(self, served, signature_name):
        """The input specs of `signature_name` on `served`, or TensorFlow Serving's 400 for an
        unknown one."""
        if not isinstance(signature_name, str):
            raise RequestError(400, "'signature_name' must be a string.")
        if signature_name not in served.signatures:
            raise RequestError(
                400,
                f'Serving signature name: "{signature_name}" not found in signature def; '
                f"this model has {sorted(served.signatures)}.",
            )
        return served.inputs[signature_name]

    @staticmethod
    def optional_inputs(served, signature_name):
        """The inputs of `signature_name` a request may leave out: the per-request controls the
        export recorded (`keras_transformer.export.controls`), which have defaults."""
        controls = served.controls.get(signature_name)
        return frozenset(controls["inputs"]) if controls else frozenset()

    @staticmethod
    def with_controls(served, signature_name, inputs):
        """`inputs` with the defaults of the controls it leaves out, every control checked
        against the range the export recorded (a 400 naming the input), so no value out of
        range reaches the model."""
        controls = served.controls.get(signature_name)
        if not controls:
            return inputs
        given = {name: value for name, value in inputs.items() if name in controls["inputs"]}
        try:
            values = complete_controls(given, controls, spell=lambda name: f"Input '{name}'")
        except ControlError as error:
            raise RequestError(400, f"{error}.") from None
        return {**inputs, **values}

    async def predict(self, served, signature_name, inputs, batch_size, timeout=None):
        """Runs `inputs` ({name: array `[batch_size, ...]`}) on a signature checked by
        `signature_inputs`.

        `timeout`: seconds left for this request (None: `settings.request_timeout`);
        past it a 504. A full queue is a 503 at once. Cancelling this call (a
        client that went away) drops the request unless its batch has started.
        """
        limit = self.settings.request_timeout if timeout is None else timeout
        inputs = self.with_controls(served, signature_name, inputs)
        try:
            return await self.batcher.submit(
                served,
                signature_name,
                inputs,
                batch_size,
                timeout=limit,
                merge=self.settings.batching and served.batchable(signature_name),
            )
        except QueueFull as full:
            raise RequestError(
                503,
                f"Too many requests waiting for model {served.model_name} version {served.version} "
                f"signature {signature_name}: {full.queued} examples are queued and the limit is "
                f"{full.limit} (--max-queued-examples); try again later.",
            ) from None
        except DeadlineExceeded:
            raise RequestError(
                504,
                f"Deadline exceeded: no answer in the {max(limit, 0):.3g} s the request had left "
                f"(the server's --request-timeout is {self.settings.request_timeout:g} s).",
            ) from None
        except Exception as error:
            raise model_error(error) from error

    async def classify(self, served, signature_name, request_input, timeout=None):
        """TensorFlow Serving's Classify: the examples of `request_input` (a
        `tensorflow.serving.Input`) through `signature_name` (empty: `serving_default`), batched
        as `predict` batches, -> a `tensorflow.serving.ClassificationResult`.

        Refusals are TensorFlow Serving's: a signature not served or not fit to classify, no
        examples (all 400); ours past the limits (413, and `predict`'s).
        """
        name = self._example_signature(served, signature_name, CLASSIFY_METHOD_NAME)
        outputs, count = await self._run_examples(served, [name], request_input, timeout)
        return classification_result(outputs[0], served.outputs[name], count)

    async def regress(self, served, signature_name, request_input, timeout=None):
        """TensorFlow Serving's Regress, as `classify` -> a `tensorflow.serving.RegressionResult`."""
        name = self._example_signature(served, signature_name, REGRESS_METHOD_NAME)
        outputs, count = await self._run_examples(served, [name], request_input, timeout)
        return regression_result(outputs[0], served.outputs[name], count)

    async def multi_inference(self, served, tasks, request_input, timeout=None):
        """TensorFlow Serving's MultiInference: every task (a `tensorflow.serving.InferenceTask`:
        a signature of `served`'s model and its method, classify or regress) on the same
        examples -> [(signature name, ClassificationResult or RegressionResult)], in the tasks'
        order.

        Refusals are TensorFlow Serving's: tasks naming another model, none or the same
        signature twice, a signature not served (all 400), a method that is neither (501).
        """
        model_name, names = "", []
        for task in tasks:
            if not task.model_spec.name:
                raise RequestError(400, "Found ModelSpec with an empty model name.")
            model_name = model_name or task.model_spec.name
            if task.model_spec.name != model_name:
                raise RequestError(
                    400,
                    "All ModelSpecs in a MultiInferenceRequest must access the same model name.",
                )
            name = task.model_spec.signature_name or DEFAULT_SIGNATURE
            if name in names:
                raise RequestError(400, f"Duplicate evaluation of signature: {name}")
            names.append(name)
            if name not in served.signatures:
                raise RequestError(400, f"Requested signature not found in model graph: {name}")
            if task.method_name not in (CLASSIFY_METHOD_NAME, REGRESS_METHOD_NAME):
                raise RequestError(501, f"Unsupported signature method_name: {task.method_name}")
            self._example_signature(served, name, task.method_name)
        outputs, count = await self._run_examples(served, names, request_input, timeout)
        return [
            (
                name,
                (
                    classification_result
                    if task.method_name == CLASSIFY_METHOD_NAME
                    else regression_result
                )(answer, served.outputs[name], count),
            )
            for task, name, answer in zip(tasks, names, outputs)
        ]

    def _example_signature(self, served, signature_name, method_name):
        """The name of the signature `signature_name` asks for, if it is served and fit for
        `method_name` (classify or regress); else TensorFlow Serving's 400."""
        name = signature_name or DEFAULT_SIGNATURE
        if name not in served.signatures:
            raise RequestError(400, f"No signature was found with the name: {name}")
        problem = (
            classification_problem if method_name == CLASSIFY_METHOD_NAME else regression_problem
        )(served.inputs[name], served.outputs[name])
        if problem is not None:
            message, quotes_signature = problem
            if quotes_signature:
                message += signature_def_text(served, name)
            raise RequestError(400, message)
        return name

    async def _run_examples(self, served, signature_names, request_input, timeout):
        """Runs the serialized examples of `request_input` through each signature (concurrently,
        on `predict`'s path) -> ([outputs per signature], number of examples)."""
        count = example_count(request_input)
        if not count:
            raise RequestError(400, "Input is empty.")
        _check_count(count, min(map(self.settings.instance_limit, signature_names)))
        inputs = {EXAMPLES_INPUT: serialized_examples(request_input)}
        outputs = await asyncio.gather(
            *(
                self.predict(served, name, inputs, count, timeout=timeout)
                for name in signature_names
            )
        )
        return outputs, count

    def version_states(self, name, version=None, label=None):
        """[(version, state, error message)], newest first: every version seen,
        or just `version` (or the one `label` names); a 404 if none was seen."""
        model = self.model(name)
        if label is not None:
            version = self.label_version(model, label)
        states = model.states
        if not states:
            raise RequestError(404, f"Could not find any versions of model {name}.")
        if version is not None:
            if version not in states:
                raise RequestError(404, f"Could not find version {version} of model {name}.")
            states = {version: states[version]}
        return [
            (number, state, message)
            for number, (state, message) in sorted(states.items(), reverse=True)
        ]


def servable_name(name, version):
    """How TensorFlow Serving names a requested servable in its errors."""
    return f"Latest({name})" if version is None else f"Specific({name}, {version})"


def model_error(error):
    """A model call that failed: the input's fault (400) or ours (500, logged)."""
    if isinstance(error, RequestError):
        return error
    import tensorflow as tf

    if isinstance(error, (tf.errors.InvalidArgumentError, tf.errors.OutOfRangeError)):
        return RequestError(400, op_message(str(error.message))[:500])
    logger.exception("Model call failed", exc_info=error)
    return RequestError(500, f"Internal error running the model: {type(error).__name__}.")


# What eager execution puts around an op's own message: a heading, where the failing node
# was defined (stack frames, indented), and the function's name after the node's.
_OP_MESSAGE_HEADINGS = ("Graph execution error:", "Detected at node ", "<stack traces unavailable>")


def op_message(message):
    """The first line of the failing op's own message in a TensorFlow error's `message`: the
    line a TensorFlow Serving session's error starts with."""
    lines = message.splitlines()
    for line in lines:
        if line.strip() and not line[0].isspace() and not line.startswith(_OP_MESSAGE_HEADINGS):
            return line.split(" [Op:")[0]
    return lines[0] if lines else message
