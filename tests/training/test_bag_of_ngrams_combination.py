"""`add_bag_of_ngrams`: the regression fit apart, weighed beside the Transformer on
validation, fit again."""

import types

import keras
import numpy as np
import pytest

from keras_transformer.data.tokens import ClassificationTokens
from keras_transformer.models import TransformerClassifier
from keras_transformer.training.classifier.bag_of_ngrams import add_bag_of_ngrams, mix_name
from keras_transformer.training.classifier.settings import ClassifierSettings

VOCABULARY, LENGTH = 60, 8
VALIDATION_ONLY = 55  # a keyword only validation texts have
BAG_ALONE = mix_name((0.0, 1.0))


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


def start_from_zeros(model):
    """The bag of n-grams as training leaves it: all zeros (an earlier test fit it)."""
    for weight in (model.ngrams.kernel, model.ngrams.bias):
        weight.assign(np.zeros(weight.shape, weight.dtype))


def classifier_and_tokens(model):
    tokens = types.SimpleNamespace(
        train=keyword_split(60, 1),
        validation=keyword_split(30, 2, VALIDATION_ONLY),
        test=keyword_split(30, 4),
    )
    start_from_zeros(model)
    model.ngrams.adapt(tokens.train.token_ids)
    # A Transformer that learned nothing, loudly: any weight of it above 0 spoils the sum.
    rng = np.random.default_rng(3)
    model.head.kernel.assign(100.0 * rng.normal(size=model.head.kernel.shape).astype("float32"))
    model.head.bias.assign(np.zeros(model.head.bias.shape, "float32"))
    return model, tokens


@pytest.mark.parametrize("refit", [True, False])
def test_a_useless_transformer_gets_weight_zero_and_validation_is_fit_after(
    keyword_classifier, refit, capsys
):
    model, tokens = classifier_and_tokens(keyword_classifier)
    settings = ClassifierSettings(batch_size=8, ngram_l2=1 / (2 * 10 * 60), ngram_refit=refit)
    record = add_bag_of_ngrams(model, settings, tokens, verbose=0)

    assert record["transformer_weight"] == 0.0
    assert "validation gave the Transformer weight 0" in capsys.readouterr().err
    alone = record["validation"][BAG_ALONE]["accuracy"]
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
        assert record["validation"][BAG_ALONE]["loss"] == pytest.approx(loss, rel=1e-4)
    # Refit on training + validation: the validation-only keyword became a feature with a weight.
    idf = keras.ops.convert_to_numpy(model.ngrams.idf)
    assert (idf[VALIDATION_ONLY] > 0) == refit
    assert ("refit_on_train_and_validation" in record) == refit
    assert (np.abs(model.ngrams.effective_kernel[VALIDATION_ONLY]).max() > 1e-3) == refit


def test_each_part_is_scored_alone_on_validation_and_test(keyword_classifier, capsys):
    model, tokens = classifier_and_tokens(keyword_classifier)
    # Useless, but quiet enough that its probabilities do not underflow: the bag would
    # change its loss.
    model.head.kernel.assign(0.01 * keras.ops.convert_to_numpy(model.head.kernel))
    test_ids, test_labels = tokens.test.token_ids, tokens.test.labels

    def accuracy():
        predicted = np.argmax(model.predict(test_ids, verbose=0), axis=1)
        return float(np.mean(predicted == test_labels))

    transformer_alone = accuracy()  # the bag is zeros
    probabilities = model.predict(test_ids, verbose=0)
    # Probabilities that underflow to 0 count as 1e-30, as the scores clip them.
    chosen = probabilities[np.arange(len(test_labels)), test_labels]
    transformer_loss = -np.mean(np.log(np.maximum(chosen.astype("float64"), 1e-30)))
    settings = ClassifierSettings(batch_size=8, ngram_l2=1 / (2 * 10 * 60))
    record = add_bag_of_ngrams(model, settings, tokens, verbose=1)
    parts = record["parts"]
    assert parts["transformer"]["test"]["accuracy"] == pytest.approx(transformer_alone)
    assert parts["transformer"]["test"]["loss"] == pytest.approx(transformer_loss, rel=1e-4)
    assert parts["transformer"]["test"]["accuracy"] < 0.6  # the loud, useless Transformer
    # The model as it ships, scored on test, is the mix's record.
    assert (parts["mix"]["transformer_weight"], parts["mix"]["bag_weight"]) == (
        record["transformer_weight"],
        record["bag_weight"],
    )
    assert parts["mix"]["test"]["accuracy"] == pytest.approx(accuracy())
    assert parts["mix"]["validation"] == record["validation"][record["mix"]]
    assert parts["bag_of_ngrams"]["test"]["accuracy"] >= 0.85
    assert parts["bag_of_ngrams"]["validation"] == record["validation"][BAG_ALONE]
    assert parts["transformer"]["validation"]["accuracy"] < 0.6
    for part in parts.values():
        assert {"accuracy", "macro_f1", "loss"} <= set(part["test"])
    out = capsys.readouterr().out
    assert "the Transformer alone" in out and "the bag of n-grams alone" in out


def test_a_bag_that_only_hurts_gets_weight_zero(keyword_classifier, monkeypatch):
    """A Transformer that knows every label (its log-probabilities stood in for) beside a
    bag fit on labels unrelated to the texts: validation keeps the Transformer alone, and
    the bag's weights become zeros."""
    from keras_transformer.training.classifier import bag_of_ngrams

    model, tokens = classifier_and_tokens(keyword_classifier)
    rng = np.random.default_rng(7)
    tokens.train = ClassificationTokens(
        tokens.train.token_ids, rng.integers(0, 3, len(tokens.train)).astype("int32")
    )

    def knows_every_label(model, token_ids, batch_size):
        labels = 0 if token_ids is tokens.validation.token_ids else 1
        labels = (tokens.validation, tokens.test)[labels].labels
        return np.log(np.full((len(labels), 3), 0.05) + 0.85 * np.eye(3)[labels])

    monkeypatch.setattr(bag_of_ngrams, "_transformer_log_probabilities", knows_every_label)
    settings = ClassifierSettings(batch_size=8, ngram_l2=1 / (2 * 10 * 60))
    record = add_bag_of_ngrams(model, settings, tokens, verbose=0)
    assert (record["transformer_weight"], record["bag_weight"]) == (1.0, 0.0)
    assert not keras.ops.convert_to_numpy(model.ngrams.kernel).any()
    assert not keras.ops.convert_to_numpy(model.ngrams.bias).any()
    parts = record["parts"]
    assert parts["mix"]["test"] == parts["transformer"]["test"]
    assert parts["transformer"]["test"]["accuracy"] == 1.0
    assert parts["bag_of_ngrams"]["test"]["accuracy"] < 0.6  # fit on unrelated labels
    assert parts["bag_of_ngrams"]["validation"] == record["validation"][BAG_ALONE]
    assert parts["bag_of_ngrams"]["validation"]["accuracy"] < 0.6
    assert parts["mix"]["validation"]["accuracy"] == 1.0


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
        train=units_split(90, 1, named_by),
        validation=units_split(60, 2, named_by),
        test=units_split(60, 3, named_by),
    )
    start_from_zeros(model)
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
        assert (
            by_features["words"][BAG_ALONE]["loss"] < by_features["pieces+words"][BAG_ALONE]["loss"]
        )
    idf = keras.ops.convert_to_numpy(model.ngrams.idf)
    assert (idf[model.ngrams.family_rows("pieces")].max() > 0) == ("pieces" in kept)
    assert idf[model.ngrams.family_rows("words")].max() > 0
    # The model holds the kept units' fit, not the last one tried.
    probabilities = model.predict(tokens.validation.token_ids, verbose=0)
    accuracy = np.mean(np.argmax(probabilities, axis=1) == tokens.validation.labels)
    assert accuracy == pytest.approx(record["validation"][record["mix"]]["accuracy"])


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
