"""Compiling a model for `fit`, as both training pipelines do."""

from keras_transformer.training.distribute import compile_with_xla


def compile_for_fit(model, optimizer, loss, metrics, jit_compile):
    """`model.compile(...)` with XLA where `jit_compile` (always on JAX), then `build_optimizer`.

    Call it in the strategy's scope and under the dtype policy the model was
    built with. `metrics` must be metric objects: Keras builds a metric named
    by a string, or a bare function, inside the first traced train step,
    which then traces twice. Under mixed_float16, `compile` wraps the
    optimizer in a `keras.optimizers.LossScaleOptimizer`.
    """
    model.compile(
        optimizer=optimizer,
        loss=loss,
        metrics=metrics,
        jit_compile=compile_with_xla(jit_compile),
    )
    build_optimizer(model)
    return model


def build_optimizer(model):
    """Creates the optimizer's variables before `fit`.

    On TensorFlow, variables first created inside the traced train step make
    tf.function trace the step twice (seconds to minutes of graph building for
    a deep model). Built here, they are created once, eagerly; Keras'
    `BackupAndRestore` then restores their values on `--resume`.
    `model` must be built and compiled, with metrics given as metric objects
    (a string or a bare function becomes a metric inside the trace, with the
    same double trace).
    """
    model.optimizer.build(model.trainable_variables)


def learning_rate_schedule(model):
    """The learning-rate schedule of `model`'s optimizer (e.g. the `WarmupCosine` that
    `FitScheduleToBudget` shortens)."""
    # Under mixed_float16, compile wrapped the optimizer in a LossScaleOptimizer.
    optimizer = getattr(model.optimizer, "inner_optimizer", model.optimizer)
    return optimizer._learning_rate
