"""Shared by the tests that call `fit` themselves."""


def build_optimizer(model):
    """Creates the optimizer's variables before `fit`: on TensorFlow, variables
    first created inside the traced train step make tf.function trace it twice
    (seconds each in these tests). `model` must be built and compiled."""
    model.optimizer.build(model.trainable_variables)
