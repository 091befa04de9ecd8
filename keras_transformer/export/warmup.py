"""TensorFlow Serving's warm-up requests: written beside every SavedModel export, replayed on load.

TensorFlow Serving runs the requests in a SavedModel's
`assets.extra/tf_serving_warmup_requests` when it loads a version, before the
version takes traffic, so the first real requests do not pay for what the
runtime sets up on a function's first calls. The file is a TFRecord file of
`tensorflow.serving.PredictionLog` records (at most 1,000); each record holds a
request (`predict_log`, `classify_log`, `regress_log` or
`multi_inference_log`; other kinds are skipped, a `session_run_log` fails the
load), run `num_request_iterations` times (default 1). A file that does not
read or parse fails the load.

`write_warmup_requests` writes the file for an export: a few requests per
signature of the SavedModel, read from its own `saved_model.pb`, with texts
from the export's vocabulary (one word, a few, and as many as the model
reads; alone and as a batch of four). The translator's `translate` signature
gets its controls' defaults from `translator.json`. `read_warmup_requests` and
`warmup_calls` read it back for `keras_transformer.serving`, which replays it
as TensorFlow Serving does.

Writing needs `tensorflow` and `tensorflow-serving-api` (its messages); both are
imported on first use.
"""

import os
import re

from keras_transformer.export.controls import read_request_controls
from keras_transformer.export.signature_defs import read_signature_defs

WARMUP_FILE = "tf_serving_warmup_requests"
# TensorFlow Serving refuses a file with more records (WarmupConsts::kMaxNumRecords).
MAX_WARMUP_RECORDS = 1000
# Words of the middle warm-up text, and the batch size of the batched request.
FEW_WORDS = 8
BATCH_SIZE = 4


class WarmupRequestsError(ValueError):
    """A warm-up file that cannot be replayed: unreadable, not PredictionLogs, too many records,
    or a request its model refuses. TensorFlow Serving then fails the version's load."""


def warmup_path(version_dir):
    """Where the warm-up requests of the SavedModel in `version_dir` are."""
    return os.path.join(version_dir, "assets.extra", WARMUP_FILE)


def warmup_texts(vocabulary, max_words):
    """Three texts from the words of `vocabulary`: one word, `FEW_WORDS` words and `max_words`
    words (what a model that reads `max_words` tokens reads at most).

    Args:
        vocabulary: list of tokens, as a tokenizer's `vocabulary`; its whole words (letters
            only: no special tokens, no `##` pieces) make the texts.
        max_words: int, the most words a text has.

    Returns:
        A list of three UTF-8 encoded texts.
    """
    words = [token for token in vocabulary if token.isalpha()] or ["a"]
    # Longer words first: the first whole words of a WordPiece vocabulary are single letters.
    words = [word for word in words if len(word) > 2] or words
    max_words = max(1, int(max_words))

    def text(count):
        return " ".join(words[index % len(words)] for index in range(count)).encode("utf-8")

    return [text(1), text(min(FEW_WORDS, max_words)), text(max_words)]


def write_warmup_requests(folder, tokenizer, max_words, text_feature=None):
    """Writes `folder/assets.extra/tf_serving_warmup_requests` for the SavedModel in `folder`.

    Every signature gets four requests: each of `warmup_texts` alone, then all three with the
    few-words text again as a batch of `BATCH_SIZE`. A `tensorflow/serving/classify` or
    `regress` signature gets them as `classify_log` or `regress_log` records (each text a
    tf.Example with the text in its bytes feature `text_feature`); the others as
    `predict_log` records, scalar inputs set to their defaults in the export's
    `translator.json`. The requests leave `model_spec.name` empty, as TensorFlow Serving
    allows: the file then fits the model under any name.

    Args:
        folder: the SavedModel's folder, `saved_model.pb` already written.
        tokenizer: the tokenizer the export reads its texts with (its `vocabulary`).
        max_words: int, the most tokens the model reads.
        text_feature: str, the tf.Example feature a classify or regress signature reads the
            text from; needed only where there is such a signature.

    Returns:
        The path of the file written.

    Raises:
        ValueError: a signature has an input that is neither a batch of strings nor a control
            with a default in `translator.json`, or a classify or regress signature but no
            `text_feature`.
    """
    import tensorflow as tf

    texts = warmup_texts(tokenizer.vocabulary, max_words)
    batches = [[text] for text in texts] + [(texts + texts[1:2])[:BATCH_SIZE]]
    controls = read_request_controls(folder)
    logs = []
    for name, signature in sorted(read_signature_defs(folder).items()):
        for batch in batches:
            logs.append(_warmup_log(name, signature, batch, controls, text_feature))
    path = warmup_path(folder)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for log in logs:
            writer.write(log.SerializeToString())
    return path


def _warmup_log(name, signature, texts, controls, text_feature):
    """The `PredictionLog` that runs signature `name` on `texts` (bytes)."""
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import (
        classification_pb2,
        prediction_log_pb2,
        regression_pb2,
    )

    classify = signature.method_name == tf.saved_model.CLASSIFY_METHOD_NAME
    if classify or signature.method_name == tf.saved_model.REGRESS_METHOD_NAME:
        if text_feature is None:
            raise ValueError(
                f"Signature {name!r} takes tf.Examples ({signature.method_name}): writing its "
                "warm-up requests needs the feature that holds the text (`text_feature`)."
            )
        request = (
            classification_pb2.ClassificationRequest()
            if classify
            else regression_pb2.RegressionRequest()
        )
        request.model_spec.signature_name = name
        for text in texts:
            example = request.input.example_list.examples.add()
            example.features.feature[text_feature].bytes_list.value.append(text)
        if classify:
            return prediction_log_pb2.PredictionLog(
                classify_log=prediction_log_pb2.ClassifyLog(request=request)
            )
        return prediction_log_pb2.PredictionLog(
            regress_log=prediction_log_pb2.RegressLog(request=request)
        )
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.signature_name = name
    defaults = {}
    if controls and controls.get("signature") == name:
        defaults = {key: spec["default"] for key, spec in controls["inputs"].items()}
    for input_name, tensor_info in sorted(signature.inputs.items()):
        dtype = tf.as_dtype(tensor_info.dtype)
        shape = [dim.size for dim in tensor_info.tensor_shape.dim]
        if dtype == tf.string and shape == [-1]:
            value = np.array(texts, dtype=object)
        elif input_name in defaults and not shape and not tensor_info.tensor_shape.unknown_rank:
            value = np.array(defaults[input_name], dtype=dtype.as_numpy_dtype)
        else:
            raise ValueError(
                f"No warm-up value for input {input_name!r} ({dtype.name} {shape}) of signature "
                f"{name!r}: only batches of strings and controls with a default in "
                "translator.json have one."
            )
        request.inputs[input_name].CopyFrom(tf.make_tensor_proto(value, dtype=dtype))
    return prediction_log_pb2.PredictionLog(
        predict_log=prediction_log_pb2.PredictLog(request=request)
    )


def read_warmup_requests(version_dir):
    """The `PredictionLog`s of the warm-up file of the SavedModel in `version_dir`, in order,
    or None where it has no such file.

    Raises:
        WarmupRequestsError: the file is not a TFRecord file (or is cut short), a record is not
            a `PredictionLog`, or it holds more than `MAX_WARMUP_RECORDS` records.
    """
    path = warmup_path(version_dir)
    if not os.path.isfile(path):
        return None
    import tensorflow as tf
    from google.protobuf.message import DecodeError
    from tensorflow_serving.apis import prediction_log_pb2

    logs = []
    try:
        for record in tf.data.TFRecordDataset(path):
            if len(logs) == MAX_WARMUP_RECORDS:
                raise WarmupRequestsError(
                    f"{path} holds more than {MAX_WARMUP_RECORDS} warm-up records, "
                    "TensorFlow Serving's maximum."
                )
            log = prediction_log_pb2.PredictionLog()
            try:
                log.ParseFromString(record.numpy())
            except DecodeError:
                raise WarmupRequestsError(
                    f"Warm-up record {len(logs)} of {path} is not a tensorflow.serving."
                    "PredictionLog."
                ) from None
            logs.append(log)
    except tf.errors.OpError as error:
        # The reader's own words, without the op and function names tf.data wraps them in.
        reason = re.sub(r"\{\{function_node [^}]*\}\}|\[Op:.*", "", error.message)
        reason = " ".join(reason.split())
        raise WarmupRequestsError(
            f"{path} is not a TFRecord file of warm-up requests: {reason}"
        ) from None
    return logs


def warmup_calls(log):
    """The signature calls that replay one warm-up record: `[(signature name, {input name:
    numpy array})]`, empty for the kinds of record TensorFlow Serving skips.

    A `classify_log` or `regress_log` gives its examples, serialized, as the signature's
    `inputs` (as TensorFlow Serving's Classify and Regress feed them); a
    `multi_inference_log` one such call per task. A request naming no signature names
    `serving_default`, as TensorFlow Serving reads it.

    Raises:
        WarmupRequestsError: a `session_run_log`, which TensorFlow Serving does not replay
            (its load fails), or a request whose inputs are neither examples nor tensors.
    """
    import tensorflow as tf

    kind = log.WhichOneof("log_type")
    if kind == "predict_log":
        request = log.predict_log.request
        try:
            inputs = {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}
        except (TypeError, ValueError) as error:
            raise WarmupRequestsError(
                f"A predict_log request's inputs do not read: {error}"
            ) from None
        return [(_signature_name(request.model_spec), inputs)]
    if kind in ("classify_log", "regress_log"):
        request = getattr(log, kind).request
        return [
            (
                _signature_name(request.model_spec),
                {tf.saved_model.CLASSIFY_INPUTS: serialized_examples(request.input)},
            )
        ]
    if kind == "multi_inference_log":
        request = log.multi_inference_log.request
        examples = serialized_examples(request.input)
        return [
            (_signature_name(task.model_spec), {tf.saved_model.CLASSIFY_INPUTS: examples})
            for task in request.tasks
        ]
    if kind == "session_run_log":
        raise WarmupRequestsError(
            "a session_run_log, which TensorFlow Serving does not replay (it replays "
            "predict, classify, regress and multi_inference logs)."
        )
    return []


def serialized_examples(request_input):
    """A `tensorflow.serving.Input`'s examples as a numpy array of serialized tf.Examples.

    With `example_list_with_context`, each example is the context merged with it (its own
    features win), by concatenating the serialized messages, which protobuf parses as a merge.

    Raises:
        WarmupRequestsError: the input holds no examples (TensorFlow Serving's words).
    """
    import numpy as np

    kind = request_input.WhichOneof("kind")
    if kind == "example_list":
        serialized = [
            example.SerializeToString() for example in request_input.example_list.examples
        ]
    elif kind == "example_list_with_context":
        listed = request_input.example_list_with_context
        context = listed.context.SerializeToString()
        serialized = [context + example.SerializeToString() for example in listed.examples]
    else:
        serialized = []
    if not serialized:
        raise WarmupRequestsError("Input is empty.")
    return np.array(serialized, dtype=object)


def _signature_name(model_spec):
    import tensorflow as tf

    return model_spec.signature_name or tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY
