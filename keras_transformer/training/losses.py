"""Losses for sequence outputs where id 0 is padding."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedSparseCategoricalCrossentropy(keras.losses.Loss):
    """Token cross-entropy from logits, averaged over real (non-zero) targets.

    Args:
        label_smoothing: mass spread evenly over the vocabulary (Szegedy et
            al., 2016; the paper uses 0.1).
        padding_id: target id that does not count.
    """

    def __init__(self, label_smoothing=0.0, padding_id=0, name="masked_crossentropy", **kwargs):
        super().__init__(name=name, reduction="sum_over_batch_size", **kwargs)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"`label_smoothing` must be in [0, 1), got {label_smoothing}.")
        self.label_smoothing = label_smoothing
        self.padding_id = padding_id

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        log_probs = ops.log_softmax(ops.cast(y_pred, "float32"), axis=-1)
        # The smoothed target is (1 - e) * one_hot + e / V, so its cross-entropy
        # splits into the true token's term and the mean over the vocabulary,
        # without materializing a [B, T, V] one-hot tensor.
        per_token = -ops.squeeze(
            ops.take_along_axis(log_probs, y_true[..., None], axis=-1), axis=-1
        )
        if self.label_smoothing:
            per_token = (1.0 - self.label_smoothing) * per_token - self.label_smoothing * ops.mean(
                log_probs, axis=-1
            )
        real = ops.cast(ops.not_equal(y_true, self.padding_id), "float32")
        # Keras' "sum_over_batch_size" divides the sum of these by their
        # number, so weighting each real token by (tokens / real tokens) gives
        # the mean over real tokens. Keras then also divides by the number of
        # replicas under tf.distribute, as the replicas' gradients are summed;
        # a scalar returned here would skip that and count every replica's
        # gradient in full.
        size = ops.cast(ops.size(real), "float32")
        return per_token * real * (size / ops.maximum(ops.sum(real), 1.0))

    def get_config(self):
        config = super().get_config()
        config.pop("reduction", None)
        config.update({"label_smoothing": self.label_smoothing, "padding_id": self.padding_id})
        return config
