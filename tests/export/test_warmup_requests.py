"""The warm-up requests every SavedModel export carries (`assets.extra/tf_serving_warmup_requests`),
read as TensorFlow Serving reads them: TensorFlow's TFRecord reader, tensorflow-serving-api's
`PredictionLog`, and each request run in the TF1 session loader TensorFlow Serving uses,
fed and fetched by the signature's tensor names. The exports are the server tests' tiny ones
(tests/serving/serving_helpers.py), built with the library's own export functions."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from keras_transformer.export.warmup import MAX_WARMUP_RECORDS, write_warmup_requests
from tests.serving.serving_helpers import build_exports

MODELS = ("classifier", "translator")


@pytest.fixture(scope="module")
def exports(tmp_path_factory, randomize):
    return build_exports(tmp_path_factory, randomize)


def warmup_logs(version_dir):
    """The file's records, each parsed by TensorFlow Serving's own message."""
    path = os.path.join(version_dir, "assets.extra", "tf_serving_warmup_requests")
    return [
        prediction_log_pb2.PredictionLog.FromString(record)
        for record in tf.compat.v1.io.tf_record_iterator(path)
    ]


def request_of(log):
    return getattr(log, log.WhichOneof("log_type")).request


def batch_size(log):
    request = request_of(log)
    if log.HasField("predict_log"):
        return tf.make_ndarray(request.inputs["text"]).shape[0]
    return len(request.input.example_list.examples)


@pytest.fixture(scope="module")
def session_answers(exports):
    """Per model: `(signature names, [(record, {output name: value}, expected)])`: the
    SavedModel's signatures as the TF1 session loader TensorFlow Serving uses reads them, and
    every record run as TensorFlow Serving runs it there, the request's tensors fed by the
    signature's input names, every output fetched; `expected` is `serving_default`'s
    probabilities for a classify record's texts (its scores' reference), else None."""
    import tensorflow_text  # noqa: F401  registers the tokenizer ops

    answers = {}
    for model in MODELS:
        path = exports.version_dir(model)
        runs = []
        with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
            meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
            names = {name for name in meta_graph.signature_def if not name.startswith("__")}
            answers[model] = (names, runs)
            for log in warmup_logs(path):
                request = request_of(log)
                signature = meta_graph.signature_def[request.model_spec.signature_name]
                if log.HasField("predict_log"):
                    assert signature.method_name == "tensorflow/serving/predict"
                    # TensorFlow Serving's Predict wants every input, and no other.
                    assert set(request.inputs) == set(signature.inputs)
                    feed = {
                        signature.inputs[name].name: tf.make_ndarray(proto)
                        for name, proto in request.inputs.items()
                    }
                    expected = None
                else:
                    assert log.HasField("classify_log")
                    assert signature.method_name == "tensorflow/serving/classify"
                    examples = request.input.example_list.examples
                    feed = {
                        signature.inputs["inputs"].name: [
                            example.SerializeToString() for example in examples
                        ]
                    }
                    texts = [
                        example.features.feature["text"].bytes_list.value[0] for example in examples
                    ]
                    default = meta_graph.signature_def["serving_default"]
                    expected = session.run(
                        default.outputs["probabilities"].name, {default.inputs["text"].name: texts}
                    )
                outputs = sorted(signature.outputs)
                values = session.run([signature.outputs[name].name for name in outputs], feed)
                runs.append((log, dict(zip(outputs, values)), expected))
    return answers


@pytest.mark.parametrize("model", MODELS)
def test_the_file_holds_tf_serving_prediction_logs_for_every_signature(
    exports, session_answers, model
):
    logs = warmup_logs(exports.version_dir(model))
    assert 0 < len(logs) <= MAX_WARMUP_RECORDS
    by_signature = {}
    for log in logs:
        assert log.WhichOneof("log_type") in ("predict_log", "classify_log")
        request = request_of(log)
        # No model name: the file fits the model whatever name it is served under.
        assert request.model_spec.name == ""
        by_signature.setdefault(request.model_spec.signature_name, []).append(batch_size(log))
    assert set(by_signature) == session_answers[model][0]
    for name, sizes in by_signature.items():
        assert sizes == [1, 1, 1, 4], name


@pytest.mark.parametrize("model", MODELS)
def test_every_request_runs_in_tf_servings_session_loader(session_answers, model):
    for log, outputs, _ in session_answers[model][1]:
        size = batch_size(log)
        for name, value in outputs.items():
            assert value.shape[:1] == (size,), (request_of(log).model_spec.signature_name, name)
            if value.dtype.kind == "f":
                assert np.all(np.isfinite(value)), name


def test_the_classify_requests_carry_their_texts(session_answers):
    classify = [
        (outputs, expected)
        for log, outputs, expected in session_answers["classifier"][1]
        if log.HasField("classify_log")
    ]
    assert len(classify) == 4
    for outputs, expected in classify:
        np.testing.assert_allclose(outputs["scores"], expected, rtol=0, atol=1e-6)


def test_the_texts_run_from_one_word_to_all_the_model_reads(session_answers):
    """The attention records' token counts: one, a few, and the model's whole
    `sequence_length` (the tiny classifier's 16), none of them unknown words."""
    widths = []
    for log, outputs, _ in session_answers["classifier"][1]:
        if request_of(log).model_spec.signature_name == "attention" and batch_size(log) == 1:
            tokens = outputs["tokens"][0]
            assert b"[UNK]" not in tokens.tolist()
            widths.append(int(np.count_nonzero(tokens)))
    assert widths == [1, 8, 16]


def test_the_translate_requests_hold_the_controls_defaults(exports):
    version_dir = exports.version_dir("translator")
    with open(os.path.join(version_dir, "assets.extra", "translator.json")) as config_file:
        controls = json.load(config_file)["request_controls"]
    assert controls["signature"] == "translate"
    records = [
        request_of(log)
        for log in warmup_logs(version_dir)
        if request_of(log).model_spec.signature_name == "translate"
    ]
    assert len(records) == 4
    for request in records:
        assert set(request.inputs) == {"text", *controls["inputs"]}
        for name, spec in controls["inputs"].items():
            value = tf.make_ndarray(request.inputs[name])
            assert value.shape == () and value.dtype == np.dtype(spec["dtype"]), name
            assert value.item() == spec["default"], name


def test_an_input_with_no_warm_up_value_is_refused(tmp_path):
    module = tf.Module()
    module.answer = tf.function(
        lambda text, limit: {"kept": tf.strings.substr(text, 0, limit)},
        input_signature=[
            tf.TensorSpec([None], tf.string, name="text"),
            tf.TensorSpec([], tf.int32, name="limit"),
        ],
    )
    tf.saved_model.save(module, str(tmp_path), signatures={"cut": module.answer})

    class Tokenizer:
        vocabulary = ["[PAD]", "[UNK]", "word"]

    with pytest.raises(ValueError, match=r"No warm-up value for input 'limit' \(int32 \[\]\) "):
        write_warmup_requests(str(tmp_path), Tokenizer(), 4)
    assert not os.path.exists(os.path.join(tmp_path, "assets.extra"))
