"""classification_report / format_classification_report against hand arithmetic and sklearn."""

import json

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score

from keras_transformer.training import classification_report, format_classification_report

NAMES = ["business", "sport", "tech"]
# Hand-worked example (3 classes, 8 labels).
TRUE = [0, 0, 0, 1, 1, 2, 2, 2]
PRED = [0, 0, 1, 1, 1, 2, 0, 0]
# Confusion matrix (rows = true, columns = predicted):
#   true 0 -> predicted 0, 0, 1  -> [2, 1, 0]
#   true 1 -> predicted 1, 1     -> [0, 2, 0]
#   true 2 -> predicted 2, 0, 0  -> [2, 0, 1]
# True positives 2, 2, 1 -> accuracy 5/8.
# Predicted per class (column sums) 4, 3, 1; support (row sums) 3, 2, 3.
#   business: P = 2/4 = 1/2, R = 2/3, F1 = 2 * (1/2)(2/3) / (1/2 + 2/3) = 4/7
#   sport:    P = 2/3,       R = 2/2 = 1, F1 = 2 * (2/3)(1) / (5/3)   = 4/5
#   tech:     P = 1/1 = 1,   R = 1/3, F1 = 2 * (1)(1/3) / (4/3)       = 1/2
# Macro F1 = (4/7 + 4/5 + 1/2) / 3 = (40 + 56 + 35) / 210 = 131/210.
EXPECTED = {
    "business": (1 / 2, 2 / 3, 4 / 7, 3),
    "sport": (2 / 3, 1.0, 4 / 5, 2),
    "tech": (1.0, 1 / 3, 1 / 2, 3),
}


def test_hand_computed_example():
    report = classification_report(TRUE, PRED, NAMES)
    assert report["num_examples"] == 8
    assert report["accuracy"] == pytest.approx(5 / 8)
    assert report["macro_f1"] == pytest.approx(131 / 210)
    assert report["confusion_matrix"] == [[2, 1, 0], [0, 2, 0], [2, 0, 1]]
    assert list(report["per_class"]) == NAMES
    for name, (precision, recall, f1, support) in EXPECTED.items():
        scores = report["per_class"][name]
        assert scores["precision"] == pytest.approx(precision)
        assert scores["recall"] == pytest.approx(recall)
        assert scores["f1"] == pytest.approx(f1)
        assert scores["support"] == support


def test_numpy_and_column_inputs_give_the_same_report():
    expected = classification_report(TRUE, PRED, NAMES)
    as_arrays = classification_report(
        np.array(TRUE, dtype=np.int32)[:, None], np.array(PRED, dtype=np.float32), NAMES
    )
    assert as_arrays == expected


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_agrees_with_sklearn_on_random_labels(seed):
    rng = np.random.default_rng(seed)
    num_classes = 5
    true = rng.integers(0, num_classes, size=200)
    # Mostly right, with noise, so scores are neither 0 nor 1.
    predicted = np.where(rng.random(200) < 0.6, true, rng.integers(0, num_classes, size=200))
    names = [f"class_{index}" for index in range(num_classes)]
    report = classification_report(true, predicted, names)

    assert report["accuracy"] == pytest.approx(accuracy_score(true, predicted))
    assert report["macro_f1"] == pytest.approx(f1_score(true, predicted, average="macro"))
    per_class_f1 = f1_score(true, predicted, average=None, labels=range(num_classes))
    per_class_p = precision_score(true, predicted, average=None, labels=range(num_classes))
    per_class_r = recall_score(true, predicted, average=None, labels=range(num_classes))
    for index, name in enumerate(names):
        assert report["per_class"][name]["f1"] == pytest.approx(per_class_f1[index])
        assert report["per_class"][name]["precision"] == pytest.approx(per_class_p[index])
        assert report["per_class"][name]["recall"] == pytest.approx(per_class_r[index])

    matrix = np.array(report["confusion_matrix"])
    assert matrix.shape == (num_classes, num_classes)
    assert matrix.sum() == 200
    supports = [report["per_class"][name]["support"] for name in names]
    assert matrix.sum(axis=1).tolist() == supports
    assert supports == np.bincount(true, minlength=num_classes).tolist()
    assert matrix.sum(axis=0).tolist() == np.bincount(predicted, minlength=num_classes).tolist()


def test_absent_class_scores_zero_without_warnings_and_is_left_out_of_macro_f1(recwarn):
    names = NAMES + ["politics"]
    report = classification_report(TRUE, PRED, names)
    assert report["per_class"]["politics"] == {
        "precision": 0.0,
        "recall": 0.0,
        "f1": 0.0,
        "support": 0,
    }
    # Same as sklearn's default macro average (over labels seen in true or predicted).
    assert report["macro_f1"] == pytest.approx(131 / 210)
    assert report["macro_f1"] == pytest.approx(f1_score(TRUE, PRED, average="macro"))
    assert np.array(report["confusion_matrix"])[3].tolist() == [0, 0, 0, 0]
    assert len(recwarn) == 0


def test_never_predicted_class_has_zero_precision_without_warnings(recwarn):
    # Class 2 is never predicted: precision 0/0 -> 0, recall 0/2 = 0, F1 0.
    report = classification_report([0, 1, 2, 2], [0, 1, 0, 1], ["a", "b", "c"])
    assert report["per_class"]["c"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 2}
    # a: P = 1/2, R = 1 -> F1 2/3; b likewise; macro (2/3 + 2/3 + 0) / 3 = 4/9.
    assert report["macro_f1"] == pytest.approx(4 / 9)
    assert len(recwarn) == 0


def test_report_is_plain_json():
    report = classification_report(np.array(TRUE), np.array(PRED), np.array(NAMES))
    assert json.loads(json.dumps(report)) == report
    assert type(report["num_examples"]) is int
    assert all(type(value) is int for row in report["confusion_matrix"] for value in row)
    assert all(type(name) is str for name in report["per_class"])


@pytest.mark.parametrize(
    "true, predicted, message",
    [
        ([0, 1, 2], [0, 1], "3 labels"),
        ([0, 1, 3], [0, 1, 2], "true_labels contains 3"),
        ([0, 1, 2], [0, -1, 2], "predicted_labels contains -1"),
        ([0, 1.5, 2], [0, 1, 2], "integer"),
        ([], [], "No labels"),
    ],
)
def test_bad_labels_raise(true, predicted, message):
    with pytest.raises(ValueError, match=message):
        classification_report(true, predicted, NAMES)


def test_duplicate_class_names_raise():
    with pytest.raises(ValueError, match="duplicates"):
        classification_report([0, 1], [0, 1], ["a", "a"])


def test_format_lists_every_class_and_the_totals():
    report = classification_report(TRUE, PRED, NAMES + ["politics"])
    text = format_classification_report(report)
    lines = text.splitlines()
    for name in NAMES + ["politics"]:
        assert sum(line.startswith(name + " ") for line in lines) == 1
    business = next(line for line in lines if line.startswith("business"))
    assert business.split()[1:] == ["0.500", "0.667", "0.571", "3"]
    accuracy = next(line for line in lines if line.startswith("accuracy"))
    assert accuracy.split()[1:] == ["0.625", "8"]
    macro = next(line for line in lines if line.lower().startswith("macro"))
    assert f"{131 / 210:.3f}" in macro
    # Fixed width: every number ends under the end of its column header.
    header = lines[0]
    precision_end = header.index("precision") + len("precision")
    support_end = header.index("support") + len("support")
    for line in lines:
        if line.startswith(tuple(NAMES + ["politics"])):
            assert line[precision_end - 5 : precision_end] in {"0.500", "0.667", "1.000", "0.000"}
            assert len(line) == support_end
