"""TensorFlow Serving's Classify, Regress and MultiInference, over REST (`:classify`,
`:regress`) and gRPC (the stubs and messages of `tensorflow-serving-api`): the classifier
export's `classify` signature answers with its class names and `serving_default`'s
probabilities; a test-only SavedModel (a plain `tf.Module`) has the regress signature our
exports lack; every refusal is TensorFlow Serving's own message and status, taken from its
sources (servables/tensorflow/classifier.cc, regressor.cc, multi_inference.cc, util.cc and
util/json_tensor.cc)."""

import os
import types

import grpc
import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format
from starlette.testclient import TestClient
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    inference_pb2,
    input_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from keras_transformer.export.signature_defs import set_method_name
from keras_transformer.export.warmup import write_warmup_requests
from keras_transformer.serving import ModelRepository, ServerSettings, create_app
from keras_transformer.serving.classify import json_debug_string
from keras_transformer.serving.model_config import model_configs, with_signatures
from tests.serving.serving_helpers import (
    CLASS_NAMES,
    NON_UTF8_TEXT,
    call_direct,
    free_port,
    text_bytes,
    text_json,
)

TEXTS = ["the cat sat on the mat", "", "la casa es azul", NON_UTF8_TEXT, "zebra quantum xylophone"]
RPC_TIMEOUT = 120.0
SCORER_CLASSES = [b"short", b"long"]


class Scorer(tf.Module):
    """A test model on tf.Examples with a bytes feature `text`: `regress` answers its length in
    bytes, `classify` ("short", "long") with scores 1 / (1 + length) and length / (1 + length);
    `predict` answers the length to a string input, as a Predict signature does."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def regress(self, inputs):
        return {"outputs": self._lengths(inputs)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def classify(self, inputs):
        lengths = self._lengths(inputs)
        scores = tf.stack([1.0 / (1.0 + lengths), lengths / (1.0 + lengths)], axis=1)
        classes = tf.tile(tf.constant([SCORER_CLASSES]), [tf.shape(inputs)[0], 1])
        return {"classes": classes, "scores": scores}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def predict(self, text):
        return {"length": tf.cast(tf.strings.length(text), tf.float32)}

    def _lengths(self, inputs):
        features = {"text": tf.io.FixedLenFeature([], tf.string)}
        text = tf.io.parse_example(inputs, features)["text"]
        return tf.cast(tf.strings.length(text), tf.float32)


@pytest.fixture(scope="module")
def scorer_base(tmp_path_factory):
    """The base path of the `Scorer` SavedModel (version 1), its method names TensorFlow
    Serving's and its warm-up requests written, as an export's are."""
    base = tmp_path_factory.mktemp("scorer")
    folder = str(base / "1")
    module = Scorer()
    tf.saved_model.save(
        module,
        folder,
        signatures={
            "regress": module.regress,
            "classify": module.classify,
            "predict": module.predict,
        },
    )
    set_method_name(folder, "regress", tf.saved_model.REGRESS_METHOD_NAME)
    set_method_name(folder, "classify", tf.saved_model.CLASSIFY_METHOD_NAME)
    write_warmup_requests(folder, types.SimpleNamespace(vocabulary=["word"]), 4, "text")
    return str(base)


@pytest.fixture(scope="module")
def served(exports, direct_models_loader, scorer_base):
    """`(client, stub)`: the classifier export (its `classify` public) and the scorer (all three
    signatures public) over REST (a TestClient) and gRPC (a PredictionService stub); at most 8
    examples a request."""
    configs = with_signatures(
        model_configs({"classifier": exports.classifier, "scorer": scorer_base}),
        ["classifier:classify", "scorer:regress", "scorer:classify", "scorer:predict"],
    )
    repository = ModelRepository(configs, loader=direct_models_loader, poll_seconds=0)
    port = free_port()
    app = create_app(repository, ServerSettings(grpc_port=port, max_instances=8))
    with (
        TestClient(app, raise_server_exceptions=False) as client,
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        yield client, prediction_service_pb2_grpc.PredictionServiceStub(channel)


def text_example(text):
    return {"text": text_json(text)}


def example_input(texts, context=None):
    """A `tensorflow.serving.Input` of Examples with the bytes feature `text` (None: no feature),
    with `context` (a text) as its context Example if given."""
    request_input = input_pb2.Input()
    listed = request_input.example_list
    if context is not None:
        listed = request_input.example_list_with_context
        listed.context.features.feature["text"].bytes_list.value.append(text_bytes(context))
    for text in texts:
        example = listed.examples.add()
        if text is not None:
            example.features.feature["text"].bytes_list.value.append(text_bytes(text))
    return request_input


def classify_request(model, signature, request_input, version=None):
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = version
    request.input.CopyFrom(request_input)
    return request


def regress_request(model, signature, request_input):
    request = regression_pb2.RegressionRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    request.input.CopyFrom(request_input)
    return request


def multi_request(tasks, request_input):
    """`tasks`: [(model, signature, method name)]."""
    request = inference_pb2.MultiInferenceRequest()
    for model, signature, method_name in tasks:
        task = request.tasks.add()
        task.model_spec.name = model
        task.model_spec.signature_name = signature
        task.method_name = method_name
    request.input.CopyFrom(request_input)
    return request


def rest_classify(client, body, path="classifier", verb="classify"):
    return client.post(f"/v1/models/{path}:{verb}", json=body)


def assert_rest_error(response, status, message):
    assert (response.status_code, response.json()) == (status, {"error": message})


def assert_grpc_error(call, code, message):
    with pytest.raises(grpc.RpcError) as raised:
        call()
    assert (raised.value.code(), raised.value.details()) == (code, message)


def signature_def_text(version_dir, name):
    """What TensorFlow Serving prints of a SignatureDef in its errors (its DebugString: the
    text format), read from the export's saved_model.pb with TensorFlow's own protos."""
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(version_dir, "saved_model.pb"), "rb") as model_file:
        saved_model.ParseFromString(model_file.read())
    return text_format.MessageToString(saved_model.meta_graphs[0].signature_def[name])


# The export's signature


def test_the_export_has_tensorflow_servings_classification_signature(exports):
    version_dir = exports.version_dir("classifier")
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(version_dir, "saved_model.pb"), "rb") as model_file:
        saved_model.ParseFromString(model_file.read())
    (meta_graph,) = saved_model.meta_graphs
    signatures = meta_graph.signature_def
    classify = signatures["classify"]
    assert classify.method_name == tf.saved_model.CLASSIFY_METHOD_NAME
    # TensorFlow's own check of a classification signature: `inputs` strings, `classes`
    # strings and `scores` floats.
    assert tf.compat.v1.saved_model.is_valid_signature(classify)
    assert list(classify.inputs) == ["inputs"]
    assert sorted(classify.outputs) == ["classes", "scores"]
    sizes = {
        name: [dim.size for dim in info.tensor_shape.dim] for name, info in classify.outputs.items()
    }
    assert sizes == {"classes": [-1, len(CLASS_NAMES)], "scores": [-1, len(CLASS_NAMES)]}
    # The other signatures stay Predict ones, serving_default as it was.
    assert signatures["serving_default"].method_name == tf.saved_model.PREDICT_METHOD_NAME
    assert list(signatures["serving_default"].inputs) == ["text"]
    # The fingerprint's checksum is the rewritten saved_model.pb's, as TensorFlow computes it.
    from tensorflow.core.protobuf import fingerprint_pb2
    from tensorflow.python.saved_model.pywrap_saved_model import fingerprinting

    fresh = fingerprint_pb2.FingerprintDef.FromString(
        fingerprinting.CreateFingerprintDef(version_dir)
    )
    stored = tf.saved_model.experimental.read_fingerprint(version_dir)
    assert stored.saved_model_checksum == fresh.saved_model_checksum


def test_the_export_classifies_as_serving_default_answers(exports, direct_models):
    loaded = direct_models[("classifier", 1)]
    serialized = [
        example_input([text]).example_list.examples[0].SerializeToString() for text in TEXTS
    ]
    outputs = loaded.signatures["classify"](inputs=tf.constant(serialized))
    expected = call_direct(loaded, TEXTS)["probabilities"]
    np.testing.assert_array_equal(outputs["scores"].numpy(), expected)
    assert outputs["classes"].numpy().tolist() == [[name.encode() for name in CLASS_NAMES]] * len(
        TEXTS
    )


# Answers


def test_classify_answers_the_class_names_and_serving_defaults_probabilities(served, direct_models):
    client, stub = served
    expected = call_direct(direct_models[("classifier", 1)], TEXTS)["probabilities"]

    response = rest_classify(
        client,
        {"signature_name": "classify", "examples": [text_example(text) for text in TEXTS]},
    )
    assert response.status_code == 200, response.text
    (key,) = response.json()
    assert key == "results"
    results = response.json()["results"]
    assert [[label for label, _ in row] for row in results] == [CLASS_NAMES] * len(TEXTS)
    # The scores are written as TensorFlow Serving writes floats: digits enough for the float32.
    scores = np.array([[score for _, score in row] for row in results], dtype=np.float32)
    np.testing.assert_allclose(scores, expected, atol=1e-6, rtol=0)

    answer = stub.Classify(
        classify_request("classifier", "classify", example_input(TEXTS), version=1),
        timeout=RPC_TIMEOUT,
    )
    assert (answer.model_spec.name, answer.model_spec.signature_name) == ("classifier", "classify")
    assert answer.model_spec.version.value == 1
    rows = answer.result.classifications
    assert [[answer.label for answer in row.classes] for row in rows] == [CLASS_NAMES] * len(TEXTS)
    grpc_scores = np.array([[answer.score for answer in row.classes] for row in rows], np.float32)
    np.testing.assert_allclose(grpc_scores, expected, atol=1e-6, rtol=0)
    np.testing.assert_array_equal(scores, grpc_scores)


def test_a_context_example_gives_every_example_its_features(served, direct_models):
    client, stub = served
    # The first example takes the context's text, the second has its own.
    expected = call_direct(direct_models[("classifier", 1)], ["la casa es azul", "dios luz"])
    body = {
        "signature_name": "classify",
        "context": {"text": "la casa es azul"},
        "examples": [{}, {"text": ["dios luz"]}],
    }
    response = rest_classify(client, body)
    assert response.status_code == 200, response.text
    scores = [[score for _, score in row] for row in response.json()["results"]]
    np.testing.assert_allclose(scores, expected["probabilities"], atol=1e-6, rtol=0)

    answer = stub.Classify(
        classify_request(
            "classifier", "classify", example_input([None, "dios luz"], context="la casa es azul")
        ),
        timeout=RPC_TIMEOUT,
    )
    grpc_scores = [[c.score for c in row.classes] for row in answer.result.classifications]
    np.testing.assert_allclose(grpc_scores, expected["probabilities"], atol=1e-6, rtol=0)


def test_regress_and_multi_inference_on_a_model_with_a_regress_signature(served):
    client, stub = served
    texts = ["a", "abc", "", "ñ"]  # lengths in bytes: 1, 3, 0, 2
    lengths = [1.0, 3.0, 0.0, 2.0]
    response = client.post(
        "/v1/models/scorer/versions/1:regress",
        json={"signature_name": "regress", "examples": [text_example(text) for text in texts]},
    )
    assert (response.status_code, response.json()) == (200, {"results": lengths})

    answer = stub.Regress(regress_request("scorer", "regress", example_input(texts)), timeout=30)
    assert [regression.value for regression in answer.result.regressions] == lengths
    assert (answer.model_spec.signature_name, answer.model_spec.version.value) == ("regress", 1)

    tasks = [
        ("scorer", "classify", tf.saved_model.CLASSIFY_METHOD_NAME),
        ("scorer", "regress", tf.saved_model.REGRESS_METHOD_NAME),
    ]
    answer = stub.MultiInference(multi_request(tasks, example_input(texts)), timeout=30)
    classify, regress = answer.results
    assert (classify.model_spec.signature_name, regress.model_spec.signature_name) == (
        "classify",
        "regress",
    )
    assert classify.model_spec.version.value == regress.model_spec.version.value == 1
    assert [regression.value for regression in regress.regression_result.regressions] == lengths
    rows = classify.classification_result.classifications
    assert [[c.label for c in row.classes] for row in rows] == [["short", "long"]] * len(texts)
    expected = [[1 / (1 + length), length / (1 + length)] for length in lengths]
    np.testing.assert_allclose([[c.score for c in row.classes] for row in rows], expected, 1e-6)

    # The classifier export's classify, alone, as MultiInference's one task.
    answer = stub.MultiInference(
        multi_request(
            [("classifier", "classify", tf.saved_model.CLASSIFY_METHOD_NAME)], example_input(texts)
        ),
        timeout=RPC_TIMEOUT,
    )
    (only,) = answer.results
    assert only.model_spec.name == "classifier"
    assert len(only.classification_result.classifications) == len(texts)


# Refusals: TensorFlow Serving's messages and statuses


def test_signatures_that_are_missing_or_do_not_fit(served, exports, scorer_base):
    client, stub = served
    classifier_dir, scorer_dir = exports.version_dir("classifier"), os.path.join(scorer_base, "1")
    # serving_default (the default) takes texts, not Examples.
    no_inputs = "No classification inputs found in SignatureDef: " + signature_def_text(
        classifier_dir, "serving_default"
    )
    assert_rest_error(rest_classify(client, {"examples": [{"text": "a"}]}), 400, no_inputs)
    assert_grpc_error(
        lambda: stub.Classify(classify_request("classifier", "", example_input(["a"])), timeout=30),
        grpc.StatusCode.INVALID_ARGUMENT,
        no_inputs,
    )
    # A regress signature has neither classes nor scores.
    no_outputs = (
        'Expected classification signature outputs to contain at least one of "classes" or '
        '"scores". Signature was: ' + signature_def_text(scorer_dir, "regress")
    )
    body = {"signature_name": "regress", "examples": [{"text": "a"}]}
    assert_rest_error(rest_classify(client, body, path="scorer"), 400, no_outputs)
    # Regress on a classification signature, or on serving_default: two outputs.
    body = {"signature_name": "classify", "examples": [{"text": "a"}]}
    assert_rest_error(
        rest_classify(client, body, verb="regress"), 400, "Expected one output Tensor."
    )
    assert_grpc_error(
        lambda: stub.Regress(regress_request("classifier", "", example_input(["a"])), timeout=30),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Expected one output Tensor.",
    )
    # A signature the export lacks, or one not public here, is not found.
    for name in ("nope", "attention"):
        body = {"signature_name": name, "examples": [{"text": "a"}]}
        message = f"No signature was found with the name: {name}"
        assert_rest_error(rest_classify(client, body), 400, message)
        assert_grpc_error(
            lambda name=name: stub.Classify(
                classify_request("classifier", name, example_input(["a"])), timeout=30
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            message,
        )
    assert_grpc_error(
        lambda: stub.Classify(classification_pb2.ClassificationRequest(), timeout=30),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Missing ModelSpec",
    )


def test_multi_inference_refusals(served, scorer_base):
    _, stub = served
    classify = tf.saved_model.CLASSIFY_METHOD_NAME

    def refused(tasks, code, message):
        assert_grpc_error(
            lambda: stub.MultiInference(multi_request(tasks, example_input(["a"])), timeout=30),
            code,
            message,
        )

    invalid = grpc.StatusCode.INVALID_ARGUMENT
    refused(
        [("scorer", "nope", classify)],
        invalid,
        "Requested signature not found in model graph: nope",
    )
    refused(
        [("scorer", "classify", classify), ("scorer", "classify", classify)],
        invalid,
        "Duplicate evaluation of signature: classify",
    )
    refused(
        [("scorer", "classify", classify), ("classifier", "classify", classify)],
        invalid,
        "All ModelSpecs in a MultiInferenceRequest must access the same model name.",
    )
    refused(
        [("scorer", "predict", tf.saved_model.PREDICT_METHOD_NAME)],
        grpc.StatusCode.UNIMPLEMENTED,
        "Unsupported signature method_name: tensorflow/serving/predict",
    )
    # A Predict signature asked to classify, after a task that fits.
    refused(
        [
            ("scorer", "regress", tf.saved_model.REGRESS_METHOD_NAME),
            ("scorer", "predict", classify),
        ],
        invalid,
        "No classification inputs found in SignatureDef: "
        + signature_def_text(os.path.join(scorer_base, "1"), "predict"),
    )


def test_examples_missing_or_of_the_wrong_type(served):
    client, stub = served
    assert_grpc_error(
        lambda: stub.Classify(
            classify_request("classifier", "classify", input_pb2.Input()), timeout=30
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Input is empty.",
    )
    assert_grpc_error(
        lambda: stub.MultiInference(
            multi_request(
                [("scorer", "regress", tf.saved_model.REGRESS_METHOD_NAME)], input_pb2.Input()
            ),
            timeout=30,
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Input is empty.",
    )
    # REST quotes the body as TensorFlow Serving's JSON writer (rapidjson's) prints it.
    body = {"signature_name": "classify", "examples": []}
    assert_rest_error(
        rest_classify(client, body),
        400,
        'JSON Value: {\n    "signature_name": "classify",\n    "examples": []\n} '
        "'examples' value is an empty array",
    )
    assert_rest_error(
        rest_classify(client, {"instances": ["a", 1.5]}),
        400,
        'JSON Value: {\n    "instances": ["a", 1.5]\n} '
        "When method is classify, key 'examples' is expected and was not found",
    )
    assert_rest_error(
        rest_classify(client, {"examples": {"text": "a"}}, verb="regress"),
        400,
        'JSON Value: {\n    "examples": {\n        "text": "a"\n    }\n} '
        "Expecting 'examples' value to be an list/array",
    )
    assert_rest_error(
        rest_classify(client, {"signature_name": 1, "examples": [{}]}),
        400,
        'JSON Value: {\n    "signature_name": 1,\n    "examples": [{}]\n} '
        "not formatted correctly. 'signature_name' key must be a string value.",
    )
    # Features the JSON cannot make, as TensorFlow Serving's converter words it.
    for example, message in [
        ("a", "Example must be JSON object but got JSON String"),
        ({"text": ["a", 1]}, "Unexpected element type in feature: text expecting type: bytes"),
        ({"text": None}, "Feature: text has element with unexpected JSON type: Null"),
        ({"text": [["a"]]}, "Feature: text has element with unexpected JSON type: Array"),
        ({"text": {"b64": "%%"}}, "Unable to base64 decode"),
        ({"n": 1 << 63}, "Feature: n has uint64_t element. Only int64_t is supported."),
    ]:
        body = {"signature_name": "classify", "examples": [example]}
        assert_rest_error(rest_classify(client, body), 400, message)
    # The parser's own message (TensorFlow's, the first line of TensorFlow Serving's) for a
    # feature of another type than the signature reads, or none.
    wrong_type = "Name: <unknown>, Key: text, Index: 1.  Data types don't match. Data type: float but expected type: string"
    body = {"signature_name": "classify", "examples": [{"text": "a"}, {"text": 1.5}]}
    assert_rest_error(rest_classify(client, body), 400, wrong_type)
    request_input = example_input(["a", None])
    request_input.example_list.examples[1].features.feature["text"].float_list.value.append(1.5)
    assert_grpc_error(
        lambda: stub.Classify(
            classify_request("classifier", "classify", request_input), timeout=30
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        wrong_type,
    )
    missing = (
        "Name: <unknown>, Feature: text (data type: string) is required but could not be found."
    )
    body = {"signature_name": "regress", "examples": [{"other": 2}]}
    assert_rest_error(rest_classify(client, body, path="scorer", verb="regress"), 400, missing)
    # Ours: more examples than the server takes in one request.
    body = {"signature_name": "classify", "examples": [{"text": "a"}] * 9}
    assert_rest_error(
        rest_classify(client, body), 413, "9 examples in one request; the limit is 8."
    )
    assert_grpc_error(
        lambda: stub.Classify(
            classify_request("classifier", "classify", example_input(["a"] * 9)), timeout=30
        ),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "9 examples in one request; the limit is 8.",
    )


def test_json_debug_string_is_rapidjsons_pretty_writer():
    # rapidjson's PrettyWriter with kFormatSingleLineArray: four-space indents, objects one
    # member a line, arrays on one line (objects in them indented by depth); its number forms.
    assert json_debug_string({"a": [1, {"b": None}], "c": {}, "d": []}) == (
        '{\n    "a": [1, {\n            "b": null\n        }],\n    "c": {},\n    "d": []\n}'
    )
    numbers = [0.0, -0.0, 1.5, 100.0, 1e20, 1e21, 1.5e22, 0.001, 1e-7, 1.25e-7, 123456789012, True]
    assert json_debug_string(numbers) == (
        "[0.0, -0.0, 1.5, 100.0, 100000000000000000000.0, 1e21, 1.5e22, 0.001, 1e-7, 1.25e-7, "
        "123456789012, true]"
    )
    assert json_debug_string('"\\\n\x01é') == '"\\"\\\\\\n\\u0001é"'
    # Cut at the first value that starts at 256 bytes or more.
    cut = json_debug_string({"examples": ["x" * 100] * 5})
    assert cut == '{\n    "examples": [' + ", ".join(['"' + "x" * 100 + '"'] * 3)


# TensorFlow Serving's own cases (util/json_tensor_test.cc: ClassifyRegressRequestTest and
# ClassifyRegressnResultTest), its bodies and expected protos as they are there, less NaN and
# infinity, which JSON has not and our parser refuses.

TF_SERVING_BODY = {
    "signature_name": "custom_signture",
    "context": {"query": "pizza", "location": ["sfo"]},
    "examples": [
        {"names": ["foo", "bar"], "ratings": [8.0, 9.0], "age": 20},
        {"names": ["baz", {"b64": "aGVsbG8="}], "ratings": 6.0, "intboolmix": [1, True, False]},
        {"names": "bar", "ratings": -1.5},
    ],
}
TF_SERVING_INPUT = """
example_list_with_context {
  context { features {
    feature { key: "query" value { bytes_list { value: "pizza" } } }
    feature { key: "location" value { bytes_list { value: "sfo" } } }
  } }
  examples { features {
    feature { key: "names" value { bytes_list { value: "foo" value: "bar" } } }
    feature { key: "ratings" value { float_list { value: 8.0 value: 9.0 } } }
    feature { key: "age" value { int64_list { value: 20 } } }
  } }
  examples { features {
    feature { key: "names" value { bytes_list { value: "baz" value: "hello" } } }
    feature { key: "ratings" value { float_list { value: 6.0 } } }
    feature { key: "intboolmix" value { int64_list { value: 1 value: 1 value: 0 } } }
  } }
  examples { features {
    feature { key: "names" value { bytes_list { value: "bar" } } }
    feature { key: "ratings" value { float_list { value: -1.5 } } }
  } }
}
"""


def test_json_reads_and_writes_as_tensorflow_servings_own_tests_expect():
    from keras_transformer.serving.classify import (
        classification_json,
        example_request_from_json,
        regression_json,
    )
    from keras_transformer.serving.protocol import RequestError

    signature_name, request_input = example_request_from_json(TF_SERVING_BODY, 8)
    assert signature_name == "custom_signture"
    assert request_input == text_format.Parse(TF_SERVING_INPUT, input_pb2.Input())
    without_context = {key: TF_SERVING_BODY[key] for key in ("examples",)}
    signature_name, request_input = example_request_from_json(without_context, 8)
    assert signature_name is None and request_input.WhichOneof("kind") == "example_list"

    for body, fragment in [
        (
            {"signature_name": ["hello"], "examples": [{"names": ["foo", "bar"]}]},
            "'signature_name' key must be a string",
        ),
        ({"context": [{"names": ["foo", "bar"]}]}, "Example must be JSON object"),
        ({"examples": {"names": ["foo", "bar"]}}, "list/array"),
        ({"examples": [[{"names": ["foo", "bar"]}]]}, "Example must be JSON object"),
        (
            {"examples": [{"names": [10, None]}]},
            "names has element with unexpected JSON type: Null",
        ),
        ({"examples": [{"names": [10, 10.0]}]}, "feature: names expecting type: int64"),
        (
            {"examples": [{"names": [10, {"test": 10}]}]},
            "names has element with unexpected JSON type: Object",
        ),
        (
            {"examples": [{"names": [[10], 20]}]},
            "names has element with unexpected JSON type: Array",
        ),
        ({"examples": [{"names": [20, 18446744073709551603]}]}, "Only int64_t is supported"),
    ]:
        with pytest.raises(RequestError) as raised:
            example_request_from_json(body, 8)
        assert raised.value.status == 400 and fragment in raised.value.message

    result = text_format.Parse(
        """
        classifications {
          classes { label: "car" score: 0.2 } classes { label: "bike" score: 0.7 }
          classes { label: "bus" score: 0.1 }
        }
        classifications {
          classes { label: "car" score: 0.7 } classes { label: "bike" score: 0.1 }
          classes { label: "bus" score: 0.2 }
        }""",
        classification_pb2.ClassificationResult(),
    )
    # TensorFlow Serving writes a float32 with the digits that read back as it: 0.2, not
    # 0.20000000298023224.
    assert classification_json(result) == (
        b'{"results":[[["car",0.2],["bike",0.7],["bus",0.1]],[["car",0.7],["bike",0.1],["bus",0.2]]]}'
    )
    regressions = text_format.Parse(
        "regressions { value: 0.2 } regressions { value: 0.9 } regressions { value: 1.0 }",
        regression_pb2.RegressionResult(),
    )
    assert regression_json(regressions) == b'{"results":[0.2,0.9,1.0]}'
