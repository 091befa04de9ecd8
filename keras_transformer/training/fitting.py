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
