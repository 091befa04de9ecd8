"""`add_bag_of_ngrams`: the regression fit apart, weighed beside the Transformer on
validation, fit again."""

import types

import keras
import numpy as np
import pytest

from keras_transformer.data.tokens import ClassificationTokens
from keras_transformer.models import TransformerClassifier
from keras_transformer.training.classifier.bag_of_ngrams import add_bag_of_ngrams
from keras_transformer.training.classifier.settings import ClassifierSettings

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


# Each test's add_bag_of_ngrams refits the whole bag (`adapt` sets every family's idf, the
# fit every weight) and the test sets the head, so one model per module serves every test:
# tracing its predict function is most of a test's time.


@pytest.fixture(scope="module")
def keyword_classifier():
    keras.utils.set_random_seed(0)
    model = TransformerClassifier(
        vocabulary_size=VOCABULARY,
        num_classes=3,
        sequence_length=LENGTH,
        num_layers=1,
        d_model=16,
        num_heads=2,
        intermediate_dim=16,
        dropout=0.0,
        bag_of_ngrams={"use_bias": True, "trainable": False, "num_buckets": 101},
    )
    model.build((None, LENGTH))
    return model


def classifier_and_tokens(model):
    tokens = types.SimpleNamespace(
        train=keyword_split(60, 1), validation=keyword_split(30, 2, VALIDATION_ONLY)
    )
    model.ngrams.adapt(tokens.train.token_ids)
    # A Transformer that learned nothing, loudly: any weight of it above 0 spoils the sum.
    rng = np.random.default_rng(3)
    model.head.kernel.assign(100.0 * rng.normal(size=model.head.kernel.shape).astype("float32"))
    model.head.bias.assign(np.zeros(model.head.bias.shape, "float32"))
    return model, tokens


@pytest.mark.parametrize("refit", [True, False])
def test_a_useless_transformer_gets_weight_zero_and_validation_is_fit_after(
    keyword_classifier, refit
):
    model, tokens = classifier_and_tokens(keyword_classifier)
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
    if not refit:  # its loss too: the scores are the model's own outputs
        labels = np.asarray(tokens.validation.labels)
        loss = -np.mean(np.log(probabilities[np.arange(len(labels)), labels]))
        assert record["validation"]["0.0"]["loss"] == pytest.approx(loss, rel=1e-4)
    # Refit on training + validation: the validation-only keyword became a feature with a weight.
    idf = keras.ops.convert_to_numpy(model.ngrams.idf)
    assert (idf[VALIDATION_ONLY] > 0) == refit
    assert ("refit_on_train_and_validation" in record) == refit
    assert (np.abs(model.ngrams.effective_kernel[VALIDATION_ONLY]).max() > 1e-3) == refit


# Words of two pieces name the class in one corpus, punctuation in the other.
WORD_VOCABULARY = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[START]",
    "[END]",
    "[MASK]",
    "ab",
    "cd",
    "##x",
    "##yz",
    "ef",
    "gh",
    "ij",
    "kl",
    "mn",
    "!",
    "?",
    ".",
    ",",
    ";",
    ":",
]
KEYWORDS = [(7, 9), (7, 10), (8, 9)]  # "abx", "abyz", "cdx": each piece in two classes
PUNCTUATION_MARKS = [16, 17, 18]  # "!", "?", ".": one a class
FILLER_WORDS, FILLER_MARKS = [11, 12, 13, 14, 15], [19, 20, 21]


def units_split(rows, seed, named_by):
    """Texts of filler words and marks with the class's keyword (`named_by="words"`) or mark
    inside."""
    rng = np.random.default_rng(seed)
    labels = (np.arange(rows) % 3).astype("int32")
    token_ids = np.zeros((rows, 12), "int32")
    for row, label in enumerate(labels):
        pieces = [int(rng.choice(FILLER_WORDS + FILLER_MARKS)) for _ in range(8)]
        at = int(rng.integers(0, 8))
        pieces[at:at] = list(KEYWORDS[label]) if named_by == "words" else [PUNCTUATION_MARKS[label]]
        token_ids[row, : len(pieces)] = pieces
    return ClassificationTokens(token_ids, labels)


@pytest.fixture(scope="module")
def words_classifier():
    keras.utils.set_random_seed(0)
    model = TransformerClassifier(
        vocabulary_size=len(WORD_VOCABULARY),
        num_classes=3,
        sequence_length=12,
        num_layers=1,
        d_model=16,
        num_heads=2,
        intermediate_dim=16,
        dropout=0.0,
        bag_of_ngrams={
            "use_bias": True,
            "trainable": False,
            "num_buckets": 1009,
            "num_word_buckets": 1009,
            "l2": 1 / (2 * 10 * 90),
        },
    )
    model.build((None, 12))
    model.ngrams.set_vocabulary(WORD_VOCABULARY)
    return model


def words_classifier_and_tokens(model, named_by):
    tokens = types.SimpleNamespace(
        train=units_split(90, 1, named_by), validation=units_split(60, 2, named_by)
    )
    model.ngrams.adapt(tokens.train.token_ids)
    # a Transformer that knows nothing
    model.head.kernel.assign(np.zeros(model.head.kernel.shape, "float32"))
    model.head.bias.assign(np.zeros(model.head.bias.shape, "float32"))
    return model, tokens


@pytest.mark.parametrize(
    "named_by, kept", [("words", ["words"]), ("punctuation", ["pieces", "words"])]
)
def test_choose_keeps_the_units_that_name_the_class_on_validation(words_classifier, named_by, kept):
    model, tokens = words_classifier_and_tokens(words_classifier, named_by)
    settings = ClassifierSettings(
        batch_size=16, ngram_l2=1 / (2 * 10 * 90), ngram_units="choose", ngram_refit=False
    )
    record = add_bag_of_ngrams(model, settings, tokens, verbose=0)

    assert record["features"] == kept
    by_features = record["validation_by_features"]
    assert set(by_features) == {"pieces+words", "words"}
    best = {
        option: max(scores["accuracy"] for scores in by_weight.values())
        for option, by_weight in by_features.items()
    }
    if named_by == "punctuation":  # the words alone cannot see the marks
        assert best["pieces+words"] >= 0.9 and best["words"] < 0.6
    else:
        # Both reach the keywords; the words alone, undiluted by the fillers' pieces, are
        # surer of them.
        assert best["words"] >= 0.9
        assert by_features["words"]["0.0"]["loss"] < by_features["pieces+words"]["0.0"]["loss"]
    idf = keras.ops.convert_to_numpy(model.ngrams.idf)
    assert (idf[model.ngrams.family_rows("pieces")].max() > 0) == ("pieces" in kept)
    assert idf[model.ngrams.family_rows("words")].max() > 0
    # The model holds the kept units' fit, not the last one tried.
    probabilities = model.predict(tokens.validation.token_ids, verbose=0)
    accuracy = np.mean(np.argmax(probabilities, axis=1) == tokens.validation.labels)
    assert accuracy == pytest.approx(
        record["validation"][str(record["transformer_weight"])]["accuracy"]
    )


@pytest.mark.parametrize(
    "units, kept", [("pieces", ["pieces"]), ("words", ["words"]), ("both", ["pieces", "words"])]
)
def test_fixed_units_are_the_ones_fit(words_classifier, units, kept):
    model, tokens = words_classifier_and_tokens(words_classifier, "words")
    settings = ClassifierSettings(batch_size=16, ngram_l2=1 / (2 * 10 * 90), ngram_units=units)
    record = add_bag_of_ngrams(model, settings, tokens, verbose=0)
    assert record["features"] == kept and "validation_by_features" not in record
    idf = keras.ops.convert_to_numpy(model.ngrams.idf)
    for family in ("pieces", "words"):
        assert (idf[model.ngrams.family_rows(family)].max() > 0) == (family in kept)
