"""Metrics of the training pipelines: macro F1 over a split, accuracy over real tokens."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class MacroF1(keras.metrics.Metric):
    """Macro-averaged F1 of sparse labels against class scores, over a whole split.

    Keeps the confusion matrix across batches (so the score is the split's,
    not a mean of per-batch scores) and, like
    `sklearn.metrics.f1_score(average="macro")`, averages only over the
    classes that occur in the labels or the predictions.
    """

    def __init__(self, num_classes, name="macro_f1", **kwargs):
        super().__init__(name=name, **kwargs)
        self.num_classes = num_classes
        self.confusion = self.add_variable(
            shape=(num_classes, num_classes),
            initializer="zeros",
            name="confusion",
            aggregation="sum",
        )

    def update_state(self, y_true, y_pred, sample_weight=None):
        true_one_hot = ops.one_hot(ops.reshape(ops.cast(y_true, "int32"), (-1,)), self.num_classes)
        predicted = ops.argmax(ops.reshape(y_pred, (-1, self.num_classes)), axis=-1)
        predicted_one_hot = ops.one_hot(predicted, self.num_classes)
        self.confusion.assign_add(
            ops.cast(
                ops.matmul(ops.transpose(true_one_hot), predicted_one_hot), self.confusion.dtype
            )
        )

    def result(self):
        true_positives = ops.diagonal(self.confusion)
        # 2TP + FP + FN: row sum (labelled c) plus column sum (predicted c).
        denominator = ops.sum(self.confusion, axis=0) + ops.sum(self.confusion, axis=1)
        present = ops.cast(denominator > 0, self.confusion.dtype)
        f1 = ops.where(denominator > 0, 2 * true_positives / ops.maximum(denominator, 1), 0)
        return ops.sum(f1) / ops.maximum(ops.sum(present), 1)

    def reset_state(self):
        self.confusion.assign(ops.zeros_like(self.confusion))

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


@keras.saving.register_keras_serializable(package="keras_transformer")
def masked_accuracy(y_true, y_pred, padding_id=0):
    """Share of real (non-padding) target tokens whose argmax is right."""
    y_true = ops.cast(y_true, "int32")
    predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
    real = ops.not_equal(y_true, padding_id)
    correct = ops.logical_and(ops.equal(predicted, y_true), real)
    return ops.sum(ops.cast(correct, "float32")) / ops.maximum(
        ops.sum(ops.cast(real, "float32")), 1.0
    )
