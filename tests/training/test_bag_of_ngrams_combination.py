"""`add_bag_of_ngrams`: the regression fit apart, weighed beside the Transformer on validation, fit again."""

import types

import keras
import numpy as np
import pytest

from keras_transformer.data.tokens import ClassificationTokens
from keras_transformer.models import TransformerClassifier
from keras_transformer.training.classifier import ClassifierSettings
from keras_transformer.training.classifier import add_bag_of_ngrams

VOCABULARY, LENGTH = 60, 8
VALIDATION_ONLY = 55  # a keyword only validation texts have


def keyword_split(rows, seed, keyword=None):
    """Texts whose first id (10, 11 or 12) names the class, filler after it."""
    rng = np.random.default_rng(seed)
    labels = (np.arange(rows) % 3).astype("int32")
    token_ids = rng.integers(20, 50, (rows, LENGTH)).astype("int32")
    token_ids[:, 0] = 10 + labels
    if keyword is not None:
        token_ids[:, 1] = keyword
    return ClassificationTokens(token_ids, labels)


def classifier_and_tokens():
    keras.utils.set_random_seed(0)
    model = TransformerClassifier(vocabulary_size=VOCABULARY, num_classes=3, sequence_length=LENGTH, num_layers=1,
                                  d_model=16, num_heads=2, intermediate_dim=16, dropout=0.0,
                                  bag_of_ngrams={"use_bias": True, "trainable": False, "num_buckets": 101})
    model.build((None, LENGTH))
    tokens = types.SimpleNamespace(train=keyword_split(60, 1), validation=keyword_split(30, 2, VALIDATION_ONLY))
    model.ngrams.adapt(tokens.train.token_ids)
    # A Transformer that learned nothing, loudly: any weight of it above 0 spoils the sum.
    rng = np.random.default_rng(3)
    model.head.kernel.assign(100.0 * rng.normal(size=model.head.kernel.shape).astype("float32"))
    return model, tokens


@pytest.mark.parametrize("refit", [True, False])
def test_a_useless_transformer_gets_weight_zero_and_validation_is_fit_after(refit):
    model, tokens = classifier_and_tokens()
    settings = ClassifierSettings(batch_size=8, ngram_l2=1 / (2 * 10 * 60), ngram_refit=refit)
    record = add_bag_of_ngrams(model, settings, tokens, verbose=0)

    assert record["transformer_weight"] == 0.0
    alone = record["validation"]["0.0"]["accuracy"]
    assert alone >= 0.85  # the keywords, by the regression alone
    assert min(score["accuracy"] for score in record["validation"].values()) < alone - 0.2
    assert np.all(keras.ops.convert_to_numpy(model.head.kernel) == 0.0)
    probabilities = model.predict(tokens.validation.token_ids, verbose=0)
    accuracy = np.mean(np.argmax(probabilities, axis=1) == tokens.validation.labels)
    # The model is the regression alone: as scored, or (fit on validation too) better.
    assert accuracy == pytest.approx(alone) if not refit else accuracy > alone
    # Refit on training + validation: the validation-only keyword became a feature with a weight.
    idf = keras.ops.convert_to_numpy(model.ngrams.idf)
    assert (idf[VALIDATION_ONLY] > 0) == refit
    assert ("refit_on_train_and_validation" in record) == refit
    assert (np.abs(model.ngrams.effective_kernel[VALIDATION_ONLY]).max() > 1e-3) == refit
