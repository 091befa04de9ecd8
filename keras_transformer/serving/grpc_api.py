"""The gRPC side: TensorFlow Serving's gRPC API over the `PredictionService` the REST app uses.

Services, as TensorFlow Serving's (the generated stubs of the installed
`tensorflow-serving-api` package, so its client code works unchanged):

* `tensorflow.serving.PredictionService`: `Predict`, `GetModelMetadata`, and
  `Classify`, `Regress` and `MultiInference` on signatures that take
  tf.Examples (`keras_transformer.serving.classify`; a classifier export's
  `classify`);
* `tensorflow.serving.ModelService`: `GetModelStatus` and
  `HandleReloadConfigRequest` (a `model_config_list` served in place of the
  current models, `ModelRepository.reload_config`).

`GetModelMetadata` answers TensorFlow Serving's one metadata field,
`signature_def`, as it does, and ours, `assets_extra`, only to a client that
names it: the version's `assets.extra/*.json` and `*.txt` files as a
`google.protobuf.Struct` ({file name: parsed JSON or text}).

The server is a `grpc.aio` one on the event loop that runs the REST app, so
both APIs share one set of batching queues, limits and model threads. Every
refusal is the service's `RequestError`, its HTTP status mapped to TensorFlow
Serving's status code, its message the call's details.
"""

import asyncio
import logging
import math
import time

import grpc
import numpy as np
from google.protobuf import struct_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from keras_transformer.serving.classify import example_count
from keras_transformer.serving.model_config import ModelConfigError, server_config_models
from keras_transformer.serving.protocol import RequestError, _check_count
from keras_transformer.serving.repository import unavailable_message
from keras_transformer.serving.service import DEFAULT_SIGNATURE

logger = logging.getLogger("keras_transformer.serving")

# RequestError statuses as TensorFlow Serving's codes for the same refusals.
STATUS_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}

SIGNATURE_DEF_FIELD = "signature_def"
# Ours: asked for by name only, so a TensorFlow Serving client's answer is unchanged.
ASSETS_EXTRA_FIELD = "assets_extra"
METADATA_FIELDS = (SIGNATURE_DEF_FIELD, ASSETS_EXTRA_FIELD)
# How long in-flight RPCs may finish once the server stops.
SHUTDOWN_GRACE_SECONDS = 5.0
# How much of a client's string an error message quotes.
_QUOTE_LIMIT = 64
# The longest error message sent.
_DETAILS_LIMIT = 1000


def bind_grpc_server(service, host, port):
    """A `grpc.aio.Server` of `service`, listening on `host:port` (an `OSError` naming the address
    if it cannot); it answers once started (`await server.start()`, on the event loop the REST app
    runs on), and `await server.stop(SHUTDOWN_GRACE_SECONDS)` stops it."""
    server = grpc.aio.server(
        options=[
            # A message over the REST body limit is refused before it is parsed
            # (RESOURCE_EXHAUSTED).
            ("grpc.max_receive_message_length", service.settings.max_body_bytes),
            # An answer over the REST answer cap is refused too, by grpcio (RESOURCE_EXHAUSTED).
            ("grpc.max_send_message_length", service.settings.max_response_bytes),
            # grpcio binds with SO_REUSEPORT by default: a second server on a taken
            # port would start and silently share it instead of failing.
            ("grpc.so_reuseport", 0),
        ]
    )
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionServicer(service), server
    )
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelServicer(service), server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        server.add_insecure_port(address)
    except RuntimeError:
        raise OSError(
            f"The gRPC API cannot listen on {address}: is the port taken? (--port 0 turns it off)"
        ) from None
    return server


class GrpcStatusError(Exception):
    """Ends an RPC with a status code no HTTP status stands for (FAILED_PRECONDITION,
    UNKNOWN, ...).

    Args:
        code: the `grpc.StatusCode`.
        details: the message.
    """

    def __init__(self, code, details):
        super().__init__(details)
        self.code = code
        self.details = details


class _Call:
    """What one RPC's log line reports; the handler fills in what it resolved."""

    def __init__(self, method):
        self.method = method  # the RPC's name: "Predict", ...
        self.model = self.version = self.instances = "-"
        self.signature = None


async def _answer(method, context, handler, metrics):
    """Runs `handler(call)`; a `RequestError` ends the RPC with its mapped code, anything else with
    INTERNAL (logged). Writes the RPC's log line and reports it to `metrics` (a
    `ServingMetrics`)."""
    call = _Call(method)
    started = time.perf_counter()
    in_flight = metrics.in_flight_requests.labels("grpc")
    in_flight.inc()
    code, details = grpc.StatusCode.CANCELLED, None  # what a cancelled handler leaves
    try:
        response = await handler(call)
        code = grpc.StatusCode.OK
        return response
    except RequestError as error:
        code, details = STATUS_CODES.get(error.status, grpc.StatusCode.INTERNAL), error.message
    except GrpcStatusError as error:
        code, details = error.code, error.details
    except Exception:
        logger.exception("gRPC %s failed", call.method)
        code, details = grpc.StatusCode.INTERNAL, "Internal error."
    finally:
        seconds = time.perf_counter() - started
        in_flight.dec()
        metrics.observe_request(
            "grpc", call.model, call.version, call.signature, code.name, seconds
        )
        logger.info(
            "GRPC %s model=%s version=%s instances=%s status=%s latency_ms=%.1f",
            call.method,
            call.model,
            call.version,
            call.instances,
            code.name,
            seconds * 1000,
        )
    # Outside the try: abort() ends the RPC by raising. The details travel in a
    # header, which clients refuse past a few kilobytes: a message quoting a
    # long model name is cut.
    await context.abort(
        code, details if len(details) <= _DETAILS_LIMIT else details[:_DETAILS_LIMIT] + "..."
    )


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):
    """`tensorflow.serving.PredictionService` on a `PredictionService`."""

    def __init__(self, service):
        self.service = service

    async def Predict(self, request, context):
        return await _answer(
            "Predict",
            context,
            lambda call: self._predict(request, context, call),
            self.service.metrics,
        )

    async def GetModelMetadata(self, request, context):
        return await _answer(
            "GetModelMetadata",
            context,
            lambda call: self._metadata(request, call),
            self.service.metrics,
        )

    async def Classify(self, request, context):
        return await _answer(
            "Classify",
            context,
            lambda call: self._classify_or_regress(request, context, call, classify=True),
            self.service.metrics,
        )

    async def Regress(self, request, context):
        return await _answer(
            "Regress",
            context,
            lambda call: self._classify_or_regress(request, context, call, classify=False),
            self.service.metrics,
        )

    async def MultiInference(self, request, context):
        return await _answer(
            "MultiInference",
            context,
            lambda call: self._multi_inference(request, context, call),
            self.service.metrics,
        )

    async def _classify_or_regress(self, request, context, call, classify):
        if not request.HasField("model_spec"):
            raise RequestError(400, "Missing ModelSpec")
        served = _servable(self.service, request.model_spec, call)
        call.signature = request.model_spec.signature_name or DEFAULT_SIGNATURE
        call.instances = example_count(request.input)
        run, response = (
            (self.service.classify, classification_pb2.ClassificationResponse())
            if classify
            else (self.service.regress, regression_pb2.RegressionResponse())
        )
        result = await run(
            served, call.signature, request.input, timeout=_timeout(context, self.service)
        )
        _answered_spec(response.model_spec, served, call.signature)
        response.result.CopyFrom(result)
        return response

    async def _multi_inference(self, request, context, call):
        # The version every task runs on is the one the first task's spec asks for.
        spec = request.tasks[0].model_spec if request.tasks else model_pb2.ModelSpec()
        served = _servable(self.service, spec, call)
        call.signature = spec.signature_name or DEFAULT_SIGNATURE
        call.instances = example_count(request.input)
        results = await self.service.multi_inference(
            served, request.tasks, request.input, timeout=_timeout(context, self.service)
        )
        response = inference_pb2.MultiInferenceResponse()
        for signature_name, result in results:
            answer = response.results.add()
            _answered_spec(answer.model_spec, served, signature_name)
            if isinstance(result, classification_pb2.ClassificationResult):
                answer.classification_result.CopyFrom(result)
            else:
                answer.regression_result.CopyFrom(result)
        return response

    async def _predict(self, request, context, call):
        served = _servable(self.service, request.model_spec, call)
        signature_name = request.model_spec.signature_name or DEFAULT_SIGNATURE
        call.signature = signature_name
        input_specs = self.service.signature_inputs(served, signature_name)
        output_names = _output_names(request.output_filter, served.outputs[signature_name])
        settings = self.service.settings
        inputs, batch_size = tensor_inputs(
            request.inputs,
            input_specs,
            settings.instance_limit(signature_name),
            settings.max_body_bytes,
            self.service.optional_inputs(served, signature_name),
        )
        call.instances = batch_size
        outputs = await self.service.predict(
            served, signature_name, inputs, batch_size, timeout=_timeout(context, self.service)
        )
        response = predict_pb2.PredictResponse()
        _answered_spec(response.model_spec, served, signature_name)
        for name in output_names:
            write_tensor(response.outputs[name], outputs[name])
        return response

    async def _metadata(self, request, call):
        served = _servable(self.service, request.model_spec, call)
        fields = " and ".join(f"'{field}'" for field in METADATA_FIELDS)
        if not request.metadata_field:
            raise RequestError(
                400,
                f"GetModelMetadataRequest must name a metadata_field; this server has {fields}.",
            )
        for field in request.metadata_field:
            if field not in METADATA_FIELDS:
                raise RequestError(
                    400,
                    f"Metadata field {_quote(field)} is not supported; only {fields} are.",
                )
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        _answered_spec(response.model_spec, served, "")
        if SIGNATURE_DEF_FIELD in request.metadata_field:
            response.metadata[SIGNATURE_DEF_FIELD].Pack(signature_def_map(served))
        if ASSETS_EXTRA_FIELD in request.metadata_field:
            assets_extra = struct_pb2.Struct()
            assets_extra.update(served.assets_extra)
            response.metadata[ASSETS_EXTRA_FIELD].Pack(assets_extra)
        return response


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):
    """`tensorflow.serving.ModelService` on a `PredictionService`."""

    def __init__(self, service):
        self.service = service

    async def GetModelStatus(self, request, context):
        return await _answer(
            "GetModelStatus",
            context,
            lambda call: self._status(request, call),
            self.service.metrics,
        )

    async def HandleReloadConfigRequest(self, request, context):
        return await _answer(
            "HandleReloadConfigRequest",
            context,
            lambda call: self._reload(request),
            self.service.metrics,
        )

    async def _reload(self, request):
        """Serves the request's `model_config_list` in place of the current models; as
        TensorFlow Serving, a config that cannot be served fails the call with its code and
        leaves the current one serving, and models added that did not load fail it with
        UNKNOWN (they stay configured, retried as any failed version is)."""
        from tensorflow.core.protobuf import error_codes_pb2

        repository = self.service.repository

        def reload():
            return repository.reload_config(
                server_config_models(request.config, "ReloadConfigRequest")
            )

        try:
            # Loading new models takes seconds: not on the event loop, nor on the model threads.
            unavailable = await asyncio.to_thread(reload)
        except ModelConfigError as error:
            logger.error("ReloadConfig refused, the current config still serves: %s", error)
            raise GrpcStatusError(grpc.StatusCode[error.code], str(error)) from None
        if unavailable:
            message = unavailable_message(unavailable)
            logger.error("ReloadConfig: %s", message)
            raise GrpcStatusError(grpc.StatusCode.UNKNOWN, message)
        response = model_management_pb2.ReloadConfigResponse()
        response.status.error_code = error_codes_pb2.OK
        return response

    async def _status(self, request, call):
        from tensorflow.core.protobuf import error_codes_pb2

        spec = request.model_spec
        call.model = _model_name(spec)
        version = spec.version.value if spec.HasField("version") else None
        response = get_model_status_pb2.GetModelStatusResponse()
        for number, state, message in self.service.version_states(
            call.model, version, spec.version_label or None
        ):
            status = response.model_version_status.add()
            status.version = number
            status.state = get_model_status_pb2.ModelVersionStatus.State.Value(state)
            status.status.error_code = error_codes_pb2.UNKNOWN if message else error_codes_pb2.OK
            status.status.error_message = message
        return response


def _timeout(context, service):
    """Seconds the RPC has left: the client's deadline, when it set one and it is sooner than the
    server's request timeout (None: the server's)."""
    remaining = context.time_remaining()
    return None if remaining is None else min(remaining, service.settings.request_timeout)


def _model_name(model_spec):
    if not model_spec.name:
        raise RequestError(400, "model_spec.name is empty: name the model.")
    return model_spec.name


def _servable(service, model_spec, call):
    """The `ServedVersion` `model_spec` asks for (its version or label, else the latest), or the
    service's 400/404."""
    call.model = _model_name(model_spec)
    version = model_spec.version.value if model_spec.HasField("version") else None
    served = service.servable(call.model, version, model_spec.version_label or None)
    call.version = served.version
    return served


def _answered_spec(model_spec, served, signature_name):
    model_spec.name = served.model_name
    model_spec.version.value = served.version
    model_spec.signature_name = signature_name


def _output_names(output_filter, output_specs):
    """The outputs to answer with: all (in the signature's order), or those `output_filter`
    names."""
    if not output_filter:
        return list(output_specs)
    names = []
    for name in output_filter:
        if name not in output_specs:
            raise RequestError(
                400,
                f"output tensor alias not found in signature: {_quote(name)}; "
                f"the outputs are {sorted(output_specs)}.",
            )
        if name in names:
            raise RequestError(400, f"duplicate output tensor alias: {_quote(name)}.")
        names.append(name)
    return names


def tensor_inputs(tensors, input_specs, max_instances, max_elements, optional=()):
    """A PredictRequest's `inputs` ({name: TensorProto}) -> ({name: numpy array}, batch size),
    checked against the signature's `input_specs` ({name: TensorSpec}): every input present and no
    other, the dtypes and shapes the specs give, one batch size, at most `max_instances` examples
    (413) and at most `max_elements` values per tensor. The inputs named in `optional` may be
    left out (absent from the arrays then)."""
    import tensorflow as tf
    from tensorflow.core.framework import types_pb2

    input_specs = {
        name: spec for name, spec in input_specs.items() if name in tensors or name not in optional
    }
    missing, unknown = set(input_specs) - set(tensors), set(tensors) - set(input_specs)
    if missing or unknown:
        listed = ", ".join(_quote(name) for name in sorted(unknown)[:5])
        raise RequestError(
            400,
            f"The signature's inputs are {sorted(input_specs)}; "
            + (f"missing {sorted(missing)}" if missing else "")
            + ("; " if missing and unknown else "")
            + (f"unknown {listed}" if unknown else "")
            + ".",
        )
    arrays, batch_sizes = {}, {}
    for name, spec in input_specs.items():
        tensor = tensors[name]
        what = f"Input '{name}'"
        try:
            dtype = types_pb2.DataType.Name(tensor.dtype)
        except ValueError:  # a number no DataType has
            dtype = str(tensor.dtype)
        if dtype != spec.dtype:
            raise RequestError(
                400, f"{what} has dtype {dtype}; the signature expects {spec.dtype}."
            )
        shape = [dim.size for dim in tensor.tensor_shape.dim]
        expected = ["?" if size is None else size for size in spec.shape]
        if (
            len(shape) != len(spec.shape)
            or any(size < 0 for size in shape)
            or any(wanted is not None and size != wanted for size, wanted in zip(shape, spec.shape))
        ):
            raise RequestError(
                400, f"{what} has shape {shape}; the signature expects {expected} (? = any size)."
            )
        if shape:
            _check_count(shape[0], max_instances)
            batch_sizes[name] = shape[0]
        # A tensor may give one value for many elements (TensorFlow repeats the
        # last one): bound the elements, or a few bytes could ask for gigabytes.
        elements = math.prod(shape)
        if elements > max_elements:
            raise RequestError(
                400, f"{what} has {elements} elements; this server takes at most {max_elements}."
            )
        try:
            arrays[name] = tf.make_ndarray(tensor)
        except (ValueError, TypeError):
            raise RequestError(
                400, f"{what}: its values do not fill its shape {shape} as dtype {dtype}."
            ) from None
    if len(set(batch_sizes.values())) > 1:
        raise RequestError(400, f"The inputs disagree on the number of examples: {batch_sizes}.")
    return arrays, next(iter(batch_sizes.values()), 1)


def write_tensor(proto, array):
    """Writes `array` into the TensorProto `proto` as `tf.make_tensor_proto` would. Strings and the
    common numeric dtypes are written here: its checks cost several times what the rest of a small
    answer does."""
    from tensorflow.core.framework import types_pb2

    if array.ndim and array.dtype == object:
        proto.dtype = types_pb2.DT_STRING
        proto.string_val.extend(array.ravel().tolist())
    elif array.size > 1 and array.dtype in _RAW_DTYPES:  # one value goes in a typed field
        proto.dtype = types_pb2.DataType.Value(_RAW_DTYPES[array.dtype])
        proto.tensor_content = array.tobytes()
    else:
        import tensorflow as tf

        proto.CopyFrom(tf.make_tensor_proto(array))
        return
    for size in array.shape:
        proto.tensor_shape.dim.add().size = size


# The dtypes tf.make_tensor_proto writes as raw bytes (tensor_content), by their DataType names.
_RAW_DTYPES = {
    np.dtype(np.float32): "DT_FLOAT",
    np.dtype(np.float64): "DT_DOUBLE",
    np.dtype(np.int32): "DT_INT32",
    np.dtype(np.int64): "DT_INT64",
}


def signature_def_map(served):
    """The served version's signatures as TensorFlow Serving's `SignatureDefMap`, from the same
    specs the REST metadata shows."""
    from tensorflow_serving.apis.get_model_metadata_pb2 import SignatureDefMap

    signature_defs = SignatureDefMap()
    for signature in sorted(served.signatures):
        signature_def = signature_defs.signature_def[signature]
        signature_def.method_name = served.method_name(signature)
        for specs, infos in (
            (served.inputs[signature], signature_def.inputs),
            (served.outputs[signature], signature_def.outputs),
        ):
            for spec in specs.values():
                _tensor_info(infos[spec.name], spec)
    return signature_defs


def _tensor_info(info, spec):
    from tensorflow.core.framework import types_pb2

    info.dtype = types_pb2.DataType.Value(spec.dtype)
    for size in spec.shape:
        info.tensor_shape.dim.add().size = -1 if size is None else size


def _quote(text):
    """A client's string in a message: quoted, cut to a short prefix."""
    return repr(text[:_QUOTE_LIMIT]) + ("..." if len(text) > _QUOTE_LIMIT else "")
