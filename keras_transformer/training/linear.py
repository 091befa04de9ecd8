"""A `BagOfNgrams` fitted as a logistic regression in one go, not by SGD.

A linear model on sparse TF-IDF features is convex: a full-batch quasi-Newton
solver reaches its optimum in seconds, where stochastic steps at a
Transformer's learning rate leave the rare n-grams' rows short of it.
"""

import dataclasses
import time

import numpy as np


@dataclasses.dataclass
class LinearFit:
    """What `fit_logistic_regression` did."""

    iterations: int
    converged: bool
    train_accuracy: float
    seconds: float


def fit_logistic_regression(layer, token_ids, labels, l2, max_iterations=1000):
    """Sets the kernel (as used) and bias of `layer` (a `BagOfNgrams` with
    `use_bias`, adapted) to the multinomial logistic regression that minimizes
    the mean cross-entropy on `(token_ids, labels)` plus `l2` times the
    squared kernel (the bias unpenalized): scikit-learn's
    `LogisticRegression(C=1 / (2 * l2 * len(labels)))` on the same features.
    For two classes that is its binary model: one weight vector `w` whose
    halves `-w / 2, w / 2` are the two columns, penalized as `l2 * |w|^2`
    (twice the softmax's penalty on those columns).

    Returns:
        A `LinearFit`.
    """
    from scipy import optimize, sparse

    labels = np.asarray(labels, np.int64)
    if layer.bias is None:
        raise ValueError(
            "fit_logistic_regression needs a BagOfNgrams with `use_bias=True` (the intercept)."
        )
    if len(labels) != len(token_ids) or len(labels) == 0:
        raise ValueError(
            f"fit_logistic_regression needs one label per text, got {len(labels)} labels "
            f"for {len(token_ids)} texts."
        )
    if labels.min() < 0 or labels.max() >= layer.units:
        raise ValueError(
            f"Labels must lie in [0, {layer.units}), got {labels.min()}..{labels.max()}."
        )
    started = time.monotonic()
    rows, columns, values = layer.sparse_features(token_ids)
    features = sparse.csr_matrix((values, (rows, columns)), shape=(len(labels), layer.num_features))
    # Only the features some training text has can move; the others stay 0.
    used = np.unique(columns)
    features = features[:, used]
    count, units = len(labels), layer.units
    one_hot = np.eye(units)[labels]
    penalty = 2.0 * l2 if units == 2 else l2

    def loss_and_gradient(flat):
        kernel, bias = flat[:-units].reshape(len(used), units), flat[-units:]
        logits = features @ kernel + bias
        logits -= logits.max(axis=1, keepdims=True)
        log_probabilities = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        error = (np.exp(log_probabilities) - one_hot) / count
        loss = -np.sum(one_hot * log_probabilities) / count + penalty * np.sum(kernel * kernel)
        gradient = np.concatenate(
            [(features.T @ error + 2.0 * penalty * kernel).ravel(), error.sum(axis=0)]
        )
        return loss, gradient

    result = optimize.minimize(
        loss_and_gradient,
        np.zeros(len(used) * units + units),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": max_iterations},
    )
    kernel = np.zeros((layer.num_features, units))
    kernel[used] = result.x[:-units].reshape(len(used), units)
    bias = result.x[-units:]
    layer.set_linear_weights(kernel, bias)
    train_accuracy = float(np.mean(np.argmax(features @ kernel[used] + bias, axis=1) == labels))
    return LinearFit(
        int(result.nit), bool(result.success), train_accuracy, time.monotonic() - started
    )
