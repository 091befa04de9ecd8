"""`fit_logistic_regression` against scikit-learn's LogisticRegression on the same TF-IDF
features."""

import keras
import numpy as np
import pytest
from scipy import sparse
from sklearn.linear_model import LogisticRegression

from keras_transformer.layers import BagOfNgrams
from keras_transformer.training.classifier.bag_of_ngrams import fit_logistic_regression

VOCABULARY = 40


def noisy_ids(classes, rows=240, seed=0):
    """Ids whose first token hints at the class (1 time in 4 a wrong hint), so that no
    weight grows without bound."""
    rng = np.random.default_rng(seed)
    labels = np.arange(rows) % classes
    token_ids = rng.integers(1 + classes, VOCABULARY, (rows, 10)).astype("int32")
    hints = np.where(rng.random(rows) < 0.75, labels, rng.integers(0, classes, rows))
    token_ids[:, 0] = 1 + hints
    token_ids[rng.random((rows, 10)) < 0.2] = 0
    return token_ids, labels


@pytest.mark.parametrize("classes", [2, 3])
def test_equals_scikit_learn_s_logistic_regression(classes):
    token_ids, labels = noisy_ids(classes)
    layer = BagOfNgrams(VOCABULARY, classes, num_buckets=1009, use_bias=True)
    layer.adapt(token_ids)
    fit = fit_logistic_regression(layer, token_ids, labels, l2=1 / (2 * 10 * len(labels)))
    assert fit.converged and fit.train_accuracy > 0.75

    rows, columns, values = layer.sparse_features(token_ids)
    features = sparse.csr_matrix((values, (rows, columns)), shape=(len(labels), layer.num_features))
    reference = LogisticRegression(C=10.0, tol=1e-8, max_iter=10000).fit(features, labels)
    probabilities = keras.ops.convert_to_numpy(keras.ops.softmax(layer(token_ids)))
    np.testing.assert_allclose(probabilities, reference.predict_proba(features), atol=2e-3)


def test_bad_requests_are_named():
    token_ids, labels = noisy_ids(2, rows=20)
    without_bias = BagOfNgrams(VOCABULARY, 2, num_buckets=0)
    without_bias.adapt(token_ids)
    with pytest.raises(ValueError, match="use_bias"):
        fit_logistic_regression(without_bias, token_ids, labels, l2=0.01)
    layer = BagOfNgrams(VOCABULARY, 2, num_buckets=0, use_bias=True)
    layer.adapt(token_ids)
    with pytest.raises(ValueError, match="one label per text"):
        fit_logistic_regression(layer, token_ids, labels[:5], l2=0.01)
    with pytest.raises(ValueError, match=r"Labels must lie in \[0, 2\)"):
        fit_logistic_regression(layer, token_ids, labels + 1, l2=0.01)
    with pytest.raises(ValueError, match="no bias"):
        without_bias.set_linear_weights(np.zeros((without_bias.num_features, 2)), np.zeros(2))
