"""The classifier's bag of n-grams, fitted after the Transformer and weighed beside it.

`add_bag_of_ngrams` fits it once the Transformer trained and weighs the two
on validation. `fit_logistic_regression` fits a `BagOfNgrams` as a logistic
regression in one go, not by SGD: a linear model on sparse TF-IDF features is
convex, so a full-batch quasi-Newton solver reaches its optimum in seconds,
where stochastic steps at a Transformer's learning rate leave the rare
n-grams' rows short of it.
"""

import dataclasses
import sys
import time

import keras
import numpy as np

from keras_transformer.training.batching import ArrayBatches
from keras_transformer.training.classifier.evaluation import classification_report
from keras_transformer.training.classifier.settings import NGRAM_UNITS
from keras_transformer.training.runs import say

# The (Transformer, bag of n-grams) weights their logits are summed at, tried on validation:
# each part alone, and each at full weight with the other at a fraction.
MIX_WEIGHTS = (
    (0.0, 1.0),
    (0.25, 1.0),
    (0.5, 1.0),
    (0.75, 1.0),
    (1.0, 1.0),
    (1.0, 0.75),
    (1.0, 0.5),
    (1.0, 0.25),
    (1.0, 0.0),
)


def mix_name(weights):
    """How `metrics.json` names a pair of `MIX_WEIGHTS`."""
    transformer, bag = weights
    return f"transformer {transformer}, bag {bag}"


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
    from scipy import optimize

    labels = _checked_labels(layer, token_ids, labels)
    started = time.monotonic()
    features = _feature_matrix(layer, token_ids)
    # Only the features some training text has can move; the others stay 0.
    used = np.unique(features.indices)
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


def _feature_matrix(layer, token_ids):
    """The TF-IDF features of `token_ids` (`layer.sparse_features`) as a SciPy CSR matrix
    `[N, num_features]`."""
    from scipy import sparse

    rows, columns, values = layer.sparse_features(token_ids)
    return sparse.csr_matrix((values, (rows, columns)), shape=(len(token_ids), layer.num_features))


def _bag_logits(layer, token_ids):
    """The bag's logits on `token_ids` from its features (float64 NumPy): the layer's output,
    without calling the layer op by op (on JAX each op would compile for each batch shape)."""
    bias = (
        0.0
        if layer.bias is None
        else np.asarray(keras.ops.convert_to_numpy(layer.bias), np.float64)
    )
    return _feature_matrix(layer, token_ids) @ layer.effective_kernel + bias


def add_bag_of_ngrams(model, settings, tokens, verbose=1):
    """Fits `model.ngrams` (all zeros, frozen while the Transformer trained)
    as a logistic regression on the training split (its `l2` the penalty), then weighs the
    Transformer's logits beside it: the head and the bag are scaled by the
    pair of `MIX_WEIGHTS` whose sum does best on validation by
    `settings.monitor` (the validation loss breaks ties; the pairs include
    each part alone). Two models trained apart err apart, which a sum
    trained as one model does not get. Where `settings.ngram_units` offers
    more than one set of feature families (`NGRAM_UNITS`), each is fit and
    the best pair of families and weight is kept. With `settings.ngram_refit`
    the regression is then fit again on the training and validation texts
    (the penalty scaled to keep its `C`): validation has chosen all it
    chooses. `_train_classifier` calls it once the kept epoch's weights are
    back, unless the bag was given `trainable=True` (then `fit` trained it).

    Returns:
        What was done, as a dict for `metrics.json`.
    """
    ngrams, train, validation = model.ngrams, tokens.train, tokens.validation
    metric = settings.monitor.removeprefix("val_")
    candidates = NGRAM_UNITS[settings.ngram_units] if ngrams.num_word_buckets else [("pieces",)]
    # The Transformer alone: the bag is still all zeros in the model.
    transformer_validation, transformer_test = (
        _transformer_log_probabilities(model, split.token_ids, settings.batch_size)
        for split in (validation, tokens.test)
    )
    tried = _fit_each_family(model, candidates, tokens, transformer_validation)
    features, best = max(
        ((features, weights) for features in candidates for weights in MIX_WEIGHTS),
        key=lambda pair: _rank(tried[pair[0]][1][pair[1]], metric),
    )
    linear, scores = tried[features]
    transformer_weight, bag_weight = best
    model.head.kernel.assign(keras.ops.convert_to_numpy(model.head.kernel) * transformer_weight)
    model.head.bias.assign(keras.ops.convert_to_numpy(model.head.bias) * transformer_weight)
    record = {
        "features": list(features),
        "transformer_weight": transformer_weight,
        "bag_weight": bag_weight,
        "mix": mix_name(best),
        "validation": {mix_name(weights): scores[weights] for weights in MIX_WEIGHTS},
        "logistic_regression": dataclasses.asdict(linear),
    }
    if len(candidates) > 1:
        record["validation_by_features"] = {
            "+".join(option): {
                mix_name(weights): tried[option][1][weights] for weights in MIX_WEIGHTS
            }
            for option in candidates
        }
    say(verbose, _combination_line(tried, features, best, metric))
    if settings.ngram_refit:
        token_ids = _stacked_ids(train.token_ids, validation.token_ids)
        ngrams.adapt(token_ids, features=features)
        refit = fit_logistic_regression(
            ngrams,
            token_ids,
            np.concatenate([train.labels, validation.labels]),
            ngrams.l2 * len(train) / (len(train) + len(validation)),
        )
        record["refit_on_train_and_validation"] = dataclasses.asdict(refit)
        say(
            verbose,
            f"Fit again on the {len(train)} training and {len(validation)} validation texts in "
            f"{refit.seconds:.1f} s.",
        )
    elif features != candidates[-1]:
        # The last fit was another family's: fit the chosen one again (L-BFGS from zeros:
        # the same optimum).
        ngrams.adapt(train.token_ids, features=features)
        fit_logistic_regression(ngrams, train.token_ids, train.labels, ngrams.l2)
    # The bag alone as fit last, then its weight goes into its kernel and bias.
    bag_test = _bag_logits(ngrams, tokens.test.token_ids)
    for weight in (ngrams.kernel, ngrams.bias):
        weight.assign(keras.ops.convert_to_numpy(weight) * bag_weight)
    record["parts"] = _scores_of_each_part(
        tokens, scores, best, transformer_validation, (transformer_test, bag_test)
    )
    say(verbose, _parts_line(record["parts"], metric))
    if transformer_weight == 0.0:
        print(
            "Warning: validation gave the Transformer weight 0: the answers are the bag of "
            "n-grams' alone, and the Transformer's attention does not change them.",
            file=sys.stderr,
            flush=True,
        )
    return record


def _scores_of_each_part(tokens, scores, best, transformer_validation, test_logits):
    """Validation and test scores of the Transformer alone, the bag of n-grams alone
    (on test as fit last: refit on train + validation where it was) and the mix at the
    weights `best`. Validation's bag is the one fit on the training split, which chose
    the weights; `test_logits` are both parts' on the test split."""
    validation_labels, test_labels = tokens.validation.labels, tokens.test.labels
    transformer_weight, bag_weight = best
    transformer_test, bag_test = test_logits
    return {
        "transformer": {
            "validation": _validation_scores(transformer_validation, validation_labels),
            "test": _validation_scores(transformer_test, test_labels),
        },
        "bag_of_ngrams": {
            "validation": scores[(0.0, 1.0)],
            "test": _validation_scores(bag_test, test_labels),
        },
        "mix": {
            "transformer_weight": transformer_weight,
            "bag_weight": bag_weight,
            "validation": scores[best],
            "test": _validation_scores(
                bag_weight * bag_test + transformer_weight * transformer_test, test_labels
            ),
        },
    }


def _parts_line(parts, metric):
    """Each part's test score, for the run's story."""
    metric = "accuracy" if metric == "loss" else metric
    mix = parts["mix"]
    return (
        f"Test {metric}: the Transformer alone {parts['transformer']['test'][metric]:.4f}, the "
        f"bag of n-grams alone {parts['bag_of_ngrams']['test'][metric]:.4f}, the mix (Transformer {mix['transformer_weight']}, bag "
        f"{mix['bag_weight']}) {mix['test'][metric]:.4f}."
    )


def _fit_each_family(model, candidates, tokens, transformer_logits):
    """`{features: (LinearFit, {weight: validation scores})}`: `model.ngrams` fit on each
    set of feature families of `candidates`, its logits summed with the Transformer's
    (`transformer_logits`, its log-probabilities on validation) at each of
    each pair of `MIX_WEIGHTS`. The last set's fit stays in the layer."""
    ngrams, train, validation = model.ngrams, tokens.train, tokens.validation
    labels = np.asarray(validation.labels)
    tried = {}
    for features in candidates:
        ngrams.adapt(train.token_ids, features=features)
        linear = fit_logistic_regression(ngrams, train.token_ids, train.labels, ngrams.l2)
        ngram_logits = _bag_logits(ngrams, validation.token_ids)
        tried[features] = (
            linear,
            {
                weights: _validation_scores(
                    weights[1] * ngram_logits + weights[0] * transformer_logits, labels
                )
                for weights in MIX_WEIGHTS
            },
        )
    return tried


def _rank(scores, metric):
    """Higher is better: `metric` (the loss negated), then the lower loss."""
    return (-scores["loss"] if metric == "loss" else scores[metric], -scores["loss"])


def _combination_line(tried, features, best, metric):
    """What `add_bag_of_ngrams` chose, for the run's story."""
    linear, scores = tried[features]
    others = "".join(
        f"; {' and '.join(option)}: at best "
        f"{(min if metric == 'loss' else max)(s[metric] for s in option_scores.values()):.4f}"
        for option, (_, option_scores) in tried.items()
        if option != features
    )
    weights = ", ".join(
        f"{transformer}/{bag}: {scores[(transformer, bag)][metric]:.4f}"
        for transformer, bag in MIX_WEIGHTS
    )
    return (
        f"Bag of n-grams ({' and '.join(features)}): a logistic regression fit in "
        f"{linear.seconds:.1f} s ({linear.iterations} iterations, training accuracy "
        f"{linear.train_accuracy:.4f}); logits summed at Transformer {best[0]}, bag {best[1]} "
        f"(validation {metric} by Transformer/bag weights {weights}{others})."
    )


def _checked_labels(layer, token_ids, labels):
    """`labels` as int64, or ValueError: `layer` has no bias, or the labels do not fit."""
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
    return labels


def _stacked_ids(*arrays):
    """0-padded id arrays one below the other, padded to the widest."""
    width = max(array.shape[1] for array in arrays)
    return np.concatenate(
        [np.pad(array, ((0, 0), (0, width - array.shape[1]))) for array in arrays]
    )


def _transformer_log_probabilities(model, token_ids, batch_size):
    """The model's log-probabilities on `token_ids` (float64), batch by batch in their order."""
    return np.concatenate(
        [
            np.log(np.maximum(np.asarray(model.predict_on_batch(ids), np.float64), 1e-30))
            for (ids,) in ArrayBatches((token_ids,), batch_size)
        ]
    )


def _validation_scores(logits, labels):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    predicted = np.argmax(logits, axis=1)
    macro_f1 = classification_report(labels, predicted, list(range(logits.shape[1])))["macro_f1"]
    return {
        "accuracy": float(np.mean(predicted == labels)),
        "macro_f1": float(macro_f1),
        "loss": float(-np.mean(log_probabilities[np.arange(len(labels)), labels])),
    }
