"""The `embed` signature of a pretrained classifier's export: raw strings in, the
encoder's sentence embeddings out, equal to `PretrainedClassifier.embed` on the
ids of Hugging Face's own tokenizer, and to sentence-transformers' pooling of
Hugging Face's `BertModel` on the same checkpoint."""

import keras
import numpy as np
import pytest

from keras_transformer.export.classifier import _ClassifierSignatures
from keras_transformer.models import TransformerClassifier
from tests.embedding_fixtures import (  # noqa: F401  embedding_export, embedding_saved_model: fixtures
    SEQUENCE_LENGTH,
    TEXTS,
    cosines,
    embedding_export,
    embedding_saved_model,
    hugging_face_embeddings,
    hugging_face_ids,
)
from tests.serving.serving_helpers import call_direct


@pytest.fixture
def exported(embedding_saved_model):  # noqa: F811  the fixture imported above
    return embedding_saved_model


def test_the_embed_signature_equals_the_method_on_hugging_face_tokenizers_ids(
    embedding_export,  # noqa: F811
    exported,
):
    embedding = exported.signatures["embed"].structured_outputs["embedding"]
    assert embedding.dtype.name == "float32" and embedding.shape.as_list() == [None, 24]
    answers = call_direct(exported, TEXTS, "embed")["embedding"]
    input_ids, attention_mask = hugging_face_ids(
        embedding_export.checkpoint, TEXTS, SEQUENCE_LENGTH
    )
    assert input_ids.shape[1] == SEQUENCE_LENGTH  # the last text is cut
    expected = keras.ops.convert_to_numpy(
        embedding_export.model.embed({"token_ids": input_ids, "padding_mask": attention_mask})
    )
    assert answers.dtype == np.float32 and answers.shape == (len(TEXTS), 24)
    np.testing.assert_allclose(answers, expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(answers, axis=-1), 1.0, atol=1e-6)
    # Texts differ, so do their embeddings: not one vector for every row.
    assert cosines(answers[:1], answers[2:3])[0] < 0.999


def test_the_embed_signature_is_sentence_transformers_pooling_of_hugging_face_bert(
    embedding_export,  # noqa: F811
    exported,
):
    answers = call_direct(exported, TEXTS, "embed")["embedding"]
    expected = hugging_face_embeddings(embedding_export.checkpoint, TEXTS, SEQUENCE_LENGTH)
    assert cosines(answers, expected).min() >= 0.99999
    # Each text alone (no padding at all) gets the same embedding as in a padded batch.
    alone = np.concatenate([call_direct(exported, [text], "embed")["embedding"] for text in TEXTS])
    np.testing.assert_allclose(alone, answers, atol=1e-5, rtol=0)


def test_only_a_classifier_with_a_pretrained_encoder_has_embeddings(embedding_export):  # noqa: F811
    classifier = TransformerClassifier(
        30, 2, sequence_length=8, num_layers=1, d_model=8, num_heads=2, intermediate_dim=16
    )
    assert not _ClassifierSignatures(classifier, None, ["a", "b"], False, False).can_embed
    assert _ClassifierSignatures(embedding_export.model, None, ["a", "b"], True, True).can_embed
