"""Learning-rate schedules: the paper's warmup then inverse square root, and a warmup then
cosine."""

import math

import keras
from keras import ops


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
