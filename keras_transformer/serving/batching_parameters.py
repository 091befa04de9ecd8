"""TensorFlow Serving's batching parameters file (`--batching_parameters_file`), read into
the server's batching settings.

The file is a `tensorflow.serving.BatchingParameters` message in protobuf text format, e.g.

    max_batch_size { value: 128 }
    batch_timeout_micros { value: 0 }
    max_enqueued_batches { value: 1000000 }
    num_batch_threads { value: 8 }

The message comes from TensorFlow Serving's `session_bundle_config.proto`, which the
`tensorflow-serving-api` package does not ship: its descriptor is built here with the same
package, names, numbers and types, so protobuf's own text format parser reads the file as
TensorFlow Serving's does (wrapper fields as `{ value: N }`, the same errors for an unknown
field or a bad value).
"""

import re

from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    wrappers_pb2,
)

from keras_transformer.serving.model_config import parse_text_message

# BatchingParameters' fields, as session_bundle_config.proto declares them:
# (name, number, wrapper message or None for a plain scalar, plain type, repeated).
_FIELDS = (
    ("max_batch_size", 1, "Int64Value", None, False),
    ("batch_timeout_micros", 2, "Int64Value", None, False),
    ("max_enqueued_batches", 3, "Int64Value", None, False),
    ("num_batch_threads", 4, "Int64Value", None, False),
    ("thread_pool_name", 5, "StringValue", None, False),
    ("allowed_batch_sizes", 6, None, descriptor_pb2.FieldDescriptorProto.TYPE_INT64, True),
    ("pad_variable_length_inputs", 7, None, descriptor_pb2.FieldDescriptorProto.TYPE_BOOL, False),
    ("enable_large_batch_splitting", 8, "BoolValue", None, False),
    ("max_execution_batch_size", 9, "Int64Value", None, False),
)

# The least value of each number field TensorFlow Serving's batch scheduler accepts.
_MINIMUMS = (
    ("max_batch_size", 1),
    ("batch_timeout_micros", 0),
    ("max_enqueued_batches", 1),
    ("num_batch_threads", 1),
)

_BATCHING_PARAMETERS_CLASS = []  # built once


class BatchingParametersError(ValueError):
    """A batching parameters file that cannot be read or asks for what the server cannot do;
    the message names the file and, where one is to blame, its line."""


def batching_parameters_class():
    """The `tensorflow.serving.BatchingParameters` message class."""
    if not _BATCHING_PARAMETERS_CLASS:
        _BATCHING_PARAMETERS_CLASS.append(_build_batching_parameters_class())
    return _BATCHING_PARAMETERS_CLASS[0]


def _build_batching_parameters_class():
    try:  # a tensorflow-serving-api that ships the message itself
        from tensorflow_serving.servables.tensorflow import session_bundle_config_pb2

        return session_bundle_config_pb2.BatchingParameters
    except ImportError:
        pass
    field_type = descriptor_pb2.FieldDescriptorProto
    proto_file = descriptor_pb2.FileDescriptorProto(
        name="tensorflow_serving/servables/tensorflow/session_bundle_config.proto",
        package="tensorflow.serving",
        syntax="proto3",
        dependency=[wrappers_pb2.DESCRIPTOR.name],
    )
    message = proto_file.message_type.add(name="BatchingParameters")
    for name, number, wrapper, plain_type, repeated in _FIELDS:
        field = message.field.add(
            name=name,
            number=number,
            label=field_type.LABEL_REPEATED if repeated else field_type.LABEL_OPTIONAL,
        )
        if wrapper:
            field.type = field_type.TYPE_MESSAGE
            field.type_name = f".google.protobuf.{wrapper}"
        else:
            field.type = plain_type
    # A pool of its own: the default pool may hold another definition under the same name.
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto_file)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters")
    )


def parse_batching_parameters(text, path):
    """The `BatchingParameters` message in `text` (protobuf text format), read from the file
    `path`. Raises BatchingParametersError naming the file, line and column of a mistake."""
    message = batching_parameters_class()()
    parse_text_message(text, message, path, BatchingParametersError)
    return message


def read_batching_parameters(path):
    """`(message, text)`: the `BatchingParameters` in the file at `path`, and the file's text.
    Raises BatchingParametersError naming the file (and line) of a mistake."""
    try:
        with open(path, encoding="utf-8") as parameters_file:
            text = parameters_file.read()
    except (OSError, UnicodeDecodeError) as error:
        raise BatchingParametersError(
            f"{path}: cannot read the batching parameters file: {error}"
        ) from None
    return parse_batching_parameters(text, path), text


def batching_settings(message, text, path, max_batch_size):
    """The `ServerSettings` arguments that the `BatchingParameters` `message` (read from `path`,
    whose text is `text`) sets: a dict holding some of `max_batch_size`, `batch_timeout_ms`,
    `num_threads` and `max_queued_examples`; fields left out of the file set nothing.

    Args:
        message: a `BatchingParameters` message.
        text: the file's text, to name the line of a field refused.
        path: the file's path, for messages.
        max_batch_size: the batch size when the file does not set one, for
            `max_enqueued_batches`, which counts batches where the server counts examples.

    Raises:
        BatchingParametersError: a value out of range, or a field the server cannot honour;
            the message names the file, the line and the field.
    """

    def refuse(field, reason):
        return BatchingParametersError(f"{path}:{_field_line(text, field)}: {field} {reason}")

    unsupported = (
        ("allowed_batch_sizes", len(message.allowed_batch_sizes) > 0, "padding batches to sizes"),
        ("pad_variable_length_inputs", message.pad_variable_length_inputs, "padding inputs"),
        (
            "enable_large_batch_splitting",
            message.enable_large_batch_splitting.value,
            "splitting a request across batches",
        ),
    )
    for field, asked, what in unsupported:
        if asked:
            raise refuse(field, f"({what}) is not implemented by keras-transformer serve")
    for field, minimum in _MINIMUMS:
        if message.HasField(field) and getattr(message, field).value < minimum:
            raise refuse(field, f"must be at least {minimum}, got {getattr(message, field).value}")
    settings = {}
    if message.HasField("max_batch_size"):
        settings["max_batch_size"] = max_batch_size = message.max_batch_size.value
    if message.HasField("batch_timeout_micros"):
        settings["batch_timeout_ms"] = message.batch_timeout_micros.value / 1000.0
    if message.HasField("num_batch_threads"):
        settings["num_threads"] = message.num_batch_threads.value
    if message.HasField("max_enqueued_batches"):
        # TensorFlow Serving counts whole batches waiting; the server counts examples.
        settings["max_queued_examples"] = message.max_enqueued_batches.value * max_batch_size
    return settings


def _field_line(text, field):
    """The line of `text` where `field` is first given (1 if it cannot be found)."""
    for number, line in enumerate(text.splitlines(), start=1):
        if re.search(rf"(?:^|[\s{{<,;]){field}\s*[:{{<\[]", line.split("#", 1)[0]):
            return number
    return 1
