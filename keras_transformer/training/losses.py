"""Losses, metrics and schedules for sequence outputs where id 0 is padding."""

import math

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


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The paper's rate: `scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)`.

    Linear warmup for `warmup_steps`, then inverse square-root decay
    (Vaswani et al., 2017, section 5.3). `scale` multiplies the whole curve.
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        super().__init__()
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step = ops.maximum(ops.cast(step, "float32") + 1.0, 1.0)
        warmup = ops.cast(self.warmup_steps, "float32")
        rate = ops.minimum(ops.rsqrt(step), step * warmup**-1.5)
        return self.scale * (self.d_model**-0.5) * rate

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


@keras.saving.register_keras_serializable(package="keras_transformer")
class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    """A linear warmup to `peak`, then a cosine to 0 at `total_steps`.

    The warmup lasts `warmup_steps` steps, or when that is None
    `warmup_fraction` of `total_steps`. The number of steps is a variable, so
    `FitScheduleToBudget` can shorten the cosine to the steps a time budget
    leaves; sized by the epochs alone, a run cut short would stop with its
    learning rate still high.
    """

    def __init__(self, peak, total_steps, warmup_fraction=0.0, warmup_steps=None):
        self.peak = peak
        self.warmup_fraction = warmup_fraction
        self.warmup_steps = warmup_steps
        self.total_steps = keras.Variable(
            float(max(1, total_steps)), trainable=False, name="total_steps"
        )

    def __call__(self, step):
        step = ops.cast(step, "float32")
        total = ops.convert_to_tensor(self.total_steps)
        if self.warmup_steps is None:
            warmup = ops.maximum(1.0, ops.floor(self.warmup_fraction * total))
        else:
            warmup = ops.cast(max(1, self.warmup_steps), "float32")
        progress = ops.clip((step - warmup) / ops.maximum(1.0, total - warmup), 0.0, 1.0)
        cosine = 0.5 * self.peak * (1.0 + ops.cos(math.pi * progress))
        return ops.where(step < warmup, self.peak * step / warmup, cosine)

    def get_config(self):
        return {
            "peak": self.peak,
            "total_steps": float(self.total_steps.numpy()),
            "warmup_fraction": self.warmup_fraction,
            "warmup_steps": self.warmup_steps,
        }
