"""What every `fit` of the project does before it starts."""


def build_optimizer(model):
    """Creates the optimizer's variables before `fit`.

    On TensorFlow, variables first created inside the traced train step make
    tf.function trace the step twice (seconds to minutes of graph building for
    a deep model). Built here, they are created once, eagerly; Keras'
    `BackupAndRestore` then restores their values on `--resume` as before.
    `model` must be built and compiled, with metrics given as metric objects
    (a string or a bare function becomes a metric inside the trace, with the
    same double trace).
    """
    model.optimizer.build(model.trainable_variables)


def learning_rate_schedule(model):
    """The learning-rate schedule of `model`'s optimizer (e.g. the `WarmupCosine` that
    `FitScheduleToBudget` shortens)."""
    # Under mixed_float16, compile wrapped the AdamW in a LossScaleOptimizer.
    optimizer = getattr(model.optimizer, "inner_optimizer", model.optimizer)
    return optimizer._learning_rate
