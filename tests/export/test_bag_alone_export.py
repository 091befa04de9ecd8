"""A classifier whose Transformer weight is 0 exports the bag of n-grams alone: the same
answers as the Keras model (TensorFlow Serving's `classify` signature's too), no encoder and
no `attention` signature, and `classifier.json` says so."""

import os

import keras
import numpy as np
import pytest

from keras_transformer.export import export_classifier
from keras_transformer.export.parts import attention_notice, has_encoder, read_parts
from tests.classifier_fixtures import CLASS_NAMES, load_export, load_keras_model

TEXTS = ["stocks market shares", "film music actor", "goal match team", "", "the a of city"]


def stored_weights(version_dir):
    """How many numbers the export's checkpoint holds (its tracked variables)."""
    import tensorflow as tf

    return sum(
        int(np.prod(shape))
        for name, shape in tf.train.list_variables(
            os.path.join(version_dir, "variables", "variables")
        )
        if name.startswith("variables/")
    )


def folder_bytes(folder):
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(folder)
        for name in names
    )


def test_the_export_answers_as_the_keras_model(bag_alone_classifier):
    import tensorflow as tf

    from keras_transformer.text import WordPieceTokenizer

    # The Keras model's own answers: its tokenizer's ids through `predict`, head and all.
    model = load_keras_model(os.path.join(bag_alone_classifier.run_dir, "model.keras"))
    assert not keras.ops.convert_to_numpy(model.head.kernel).any()
    tokenizer = WordPieceTokenizer(os.path.join(bag_alone_classifier.run_dir, "vocabulary.txt"))
    expected = model.predict(
        tokenizer.encode(tf.constant(TEXTS), model.input_length).numpy(), verbose=0
    )
    exported = load_export(bag_alone_classifier.version_dir)
    outputs = exported.signatures["serving_default"](text=tf.constant(TEXTS))
    assert outputs["probabilities"].dtype == tf.float32 and outputs["label"].dtype == tf.string
    np.testing.assert_allclose(outputs["probabilities"].numpy(), expected, atol=1e-6, rtol=0)
    labels = [label.decode() for label in outputs["label"].numpy()]
    assert labels == [CLASS_NAMES[index] for index in expected.argmax(axis=-1)]
    assert labels[:3] == CLASS_NAMES  # the bag alone tells the keywords apart
    # TensorFlow Serving's `classify` (tf.Examples in) computes the bag alone too.
    examples = [
        tf.train.Example(
            features=tf.train.Features(
                feature={
                    "text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[text.encode()]))
                }
            )
        ).SerializeToString()
        for text in TEXTS
    ]
    classified = exported.signatures["classify"](inputs=tf.constant(examples))
    np.testing.assert_array_equal(classified["scores"].numpy(), outputs["probabilities"].numpy())
    assert classified["classes"].numpy().tolist() == [
        [name.encode() for name in CLASS_NAMES]
    ] * len(TEXTS)


def test_no_encoder_and_no_attention_signature(bag_alone_classifier, trained_classifier):
    exported = load_export(bag_alone_classifier.version_dir)
    assert set(exported.signatures) == {"serving_default", "classify"}
    model = load_keras_model(os.path.join(bag_alone_classifier.run_dir, "model.keras"))
    # The bag's weights (kernel, bias, idf, piece kinds) and nothing of the encoder or head.
    assert stored_weights(bag_alone_classifier.version_dir) == sum(
        int(np.prod(weight.shape)) for weight in model.ngrams.weights
    )
    with_encoder = os.path.join(trained_classifier.version_dir, "variables")
    alone = os.path.join(bag_alone_classifier.version_dir, "variables")
    assert folder_bytes(alone) < folder_bytes(with_encoder)


def test_classifier_json_says_there_is_no_encoder(bag_alone_classifier, trained_classifier):
    parts = read_parts(bag_alone_classifier.version_dir)
    assert parts == {
        **read_parts(trained_classifier.version_dir),
        "transformer_weight": 0.0,
        "encoder": False,
    }
    assert not has_encoder(parts)
    assert "no attention to show" in attention_notice(parts)
    assert "bag of n-grams' alone" in attention_notice(parts)
    # An export from before the key: it holds the encoder.
    assert has_encoder({key: value for key, value in parts.items() if key != "encoder"})
    assert has_encoder(None)


def test_weight_zero_with_a_head_that_is_not_zeros_is_an_error(trained_classifier, tmp_path):
    from keras_transformer.text import WordPieceTokenizer

    model = load_keras_model(os.path.join(trained_classifier.run_dir, "model.keras"))
    tokenizer = WordPieceTokenizer(os.path.join(trained_classifier.run_dir, "vocabulary.txt"))
    with pytest.raises(ValueError, match=r"weight 0, but the model's head .* is not zeros"):
        export_classifier(model, tokenizer, CLASS_NAMES, str(tmp_path), mix=(0.0, 1.0))
    assert os.listdir(tmp_path) == []


def test_the_server_serves_it_and_says_it_has_no_attention(bag_alone_classifier):
    """What a REST client and the explorer page see of it, in process (the app of `apps.serve
    --explorer` over the export, loaded once for the session)."""
    import tensorflow as tf
    from starlette.testclient import TestClient

    from keras_transformer.serving import ModelRepository, ServerSettings, create_app
    from keras_transformer.serving.explorer import ATTENTION_SIGNATURE
    from keras_transformer.serving.model_config import model_configs

    # `apps.serve --explorer`'s settings: the `attention` signature public where an export has it.
    repository = ModelRepository(
        model_configs({"bag": bag_alone_classifier.export_dir}, [ATTENTION_SIGNATURE]),
        loader=load_export,
        poll_seconds=0,
    )
    app = create_app(repository, ServerSettings(explorer=True))
    with TestClient(app, raise_server_exceptions=False) as client:
        [summary] = client.get("/explorer/models").json()["models"]
        answer = client.post("/v1/models/bag:predict", json={"instances": TEXTS})
        attention = client.post(
            "/v1/models/bag:predict", json={"signature_name": "attention", "instances": TEXTS}
        )
    parts = read_parts(bag_alone_classifier.version_dir)
    assert summary["attention"] is False and summary["parts"] == parts
    assert summary["attention_notice"] == attention_notice(parts)
    assert answer.status_code == 200, answer.text
    direct = load_export(bag_alone_classifier.version_dir).signatures["serving_default"](
        text=tf.constant(TEXTS)
    )
    predictions = answer.json()["predictions"]
    np.testing.assert_allclose(
        [prediction["probabilities"] for prediction in predictions],
        direct["probabilities"].numpy(),
        atol=1e-6,
    )
    assert attention.status_code == 400
    assert '"attention" not found' in attention.json()["error"]
