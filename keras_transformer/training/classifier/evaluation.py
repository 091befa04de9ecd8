"""Classification evaluation: per-class precision / recall / F1 and a confusion matrix.

Plain numpy, and the report holds only plain Python types, so it can be
written with `json.dump` next to a trained model.
"""

import numpy as np


def classification_report(true_labels, predicted_labels, class_names):
    """Scores integer class ids `0 .. len(class_names) - 1`.

    Returns a JSON-serializable dict::

        {"accuracy": float, "macro_f1": float, "num_examples": int,
         "per_class": {name: {"precision", "recall", "f1", "support"}},
         "confusion_matrix": [[int]]}   # rows = true class, columns = predicted

    A zero denominator gives 0 (precision of a class never predicted, recall of
    a class with no examples) without a warning. `macro_f1` is the unweighted
    mean F1 over the classes that occur in the true or the predicted labels (as
    `sklearn.metrics.f1_score(average="macro")` without `labels`): a class
    absent from this evaluation set reports F1 0 but does not pull the mean down.
    """
    names = _class_names(class_names)
    true, predicted = _checked_labels(true_labels, predicted_labels, len(names))
    num_classes = len(names)
    matrix = np.bincount(true * num_classes + predicted, minlength=num_classes**2)
    matrix = matrix.reshape(num_classes, num_classes)
    true_positives = np.diag(matrix)
    support = matrix.sum(axis=1)
    predicted_count = matrix.sum(axis=0)

    precision = _safe_divide(true_positives, predicted_count)
    recall = _safe_divide(true_positives, support)
    # 2PR / (P + R) == 2TP / (2TP + FP + FN), and the latter has no 0/0 for a
    # class with true positives.
    f1 = _safe_divide(2 * true_positives, support + predicted_count)
    present = (support + predicted_count) > 0

    per_class = {}
    for index, name in enumerate(names):
        per_class[name] = {
            "precision": float(precision[index]),
            "recall": float(recall[index]),
            "f1": float(f1[index]),
            "support": int(support[index]),
        }
    return {
        "accuracy": float(true_positives.sum() / true.size),
        "macro_f1": float(f1[present].mean()),
        "num_examples": int(true.size),
        "per_class": per_class,
        "confusion_matrix": matrix.astype(int).tolist(),
    }


def format_classification_report(report, digits=3):
    """A fixed-width table of a `classification_report` dict, for the console."""
    per_class = report["per_class"]
    total = int(report.get("num_examples", sum(row["support"] for row in per_class.values())))
    name_width = max([len("macro F1")] + [len(str(name)) for name in per_class])
    number_width = max(len("precision"), digits + 2)
    support_width = max(len("support"), len(str(total)))

    def row(name, precision="", recall="", f1="", support=""):
        return (
            f"{name:<{name_width}}  {precision:>{number_width}}  {recall:>{number_width}}  "
            f"{f1:>{number_width}}  {support:>{support_width}}"
        ).rstrip()

    def number(value):
        return f"{value:.{digits}f}"

    lines = [row("class", "precision", "recall", "f1", "support")]
    lines.append("-" * len(row("x" * name_width, "", "", "", "x" * support_width)))
    for name, scores in per_class.items():
        lines.append(
            row(
                str(name),
                number(scores["precision"]),
                number(scores["recall"]),
                number(scores["f1"]),
                str(int(scores["support"])),
            )
        )
    lines.append(lines[1])
    lines.append(row("accuracy", "", "", number(report["accuracy"]), str(total)))
    lines.append(row("macro F1", "", "", number(report["macro_f1"]), str(total)))
    return "\n".join(lines)


def _checked_labels(true_labels, predicted_labels, num_classes):
    """Both label sequences as int64 arrays of class ids below `num_classes`, or ValueError."""
    true = _label_array(true_labels, "true_labels")
    predicted = _label_array(predicted_labels, "predicted_labels")
    if true.shape != predicted.shape:
        raise ValueError(
            f"true_labels has {true.size} labels but predicted_labels has {predicted.size}."
        )
    if true.size == 0:
        raise ValueError("No labels to evaluate.")
    for labels, what in ((true, "true_labels"), (predicted, "predicted_labels")):
        bad = (labels < 0) | (labels >= num_classes)
        if bad.any():
            raise ValueError(
                f"{what} contains {int(labels[bad][0])}, outside 0..{num_classes - 1} "
                f"({num_classes} class names)."
            )
    return true, predicted


def _class_names(class_names):
    names = []
    for name in class_names:
        if isinstance(name, bytes):
            name = name.decode("utf-8", errors="replace")
        names.append(str(name))
    if not names:
        raise ValueError("class_names is empty.")
    if len(set(names)) != len(names):
        duplicates = sorted({name for name in names if names.count(name) > 1})
        raise ValueError(f"class_names has duplicates: {duplicates}.")
    return names


def _label_array(labels, what):
    if hasattr(labels, "numpy"):
        labels = labels.numpy()
    array = np.asarray(labels)
    if array.ndim > 1 and array.size == max(array.shape):
        array = array.reshape(-1)  # [N, 1] column of labels
    if array.ndim != 1:
        raise ValueError(f"{what} must be a 1-D sequence of class ids; got shape {array.shape}.")
    if array.size == 0:
        return array.astype(np.int64)
    if array.dtype == bool or not np.issubdtype(array.dtype, np.number):
        raise ValueError(f"{what} must hold integer class ids; got dtype {array.dtype}.")
    if not np.issubdtype(array.dtype, np.integer):
        if not np.all(np.isfinite(array)) or np.any(array != np.round(array)):
            raise ValueError(f"{what} must hold integer class ids; got non-integer values.")
    return array.astype(np.int64)


def _safe_divide(numerator, denominator):
    numerator = numerator.astype(np.float64)
    denominator = denominator.astype(np.float64)
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator > 0)
