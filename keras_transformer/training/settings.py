"""Checks the training settings of every application share."""

from keras_transformer.training.distribute import check_mixed_precision

SHARED_INTEGERS = (
    "epochs",
    "batch_size",
    "sequence_length",
    "vocabulary_size",
    "num_layers",
    "d_model",
    "num_heads",
    "intermediate_dim",
    "max_length",
)


def check_settings(settings, extra_integers=()):
    """Raises ValueError naming the first bad value; returns `settings`.

    A field named in the settings' `FROM_DATA` may be None: it is chosen from
    the training data (each task's `data_rules`) before
    training, and checked again then.
    """
    from_data = getattr(settings, "FROM_DATA", ())

    def unset(name):
        return name in from_data and getattr(settings, name) is None

    for name in (*SHARED_INTEGERS, *extra_integers):
        value = getattr(settings, name)
        if unset(name):
            continue
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    if not unset("d_model") and settings.d_model % settings.num_heads:
        raise ValueError(
            f"`d_model` ({settings.d_model}) must be divisible by `num_heads` ({settings.num_heads})."
        )
    if not unset("dropout") and not 0.0 <= settings.dropout < 1.0:
        raise ValueError(f"`dropout` must be in [0, 1), got {settings.dropout}.")
    check_mixed_precision(settings.mixed_precision)
    if not isinstance(settings.jit_compile, bool):
        raise ValueError(f"`jit_compile` must be True or False, got {settings.jit_compile!r}.")
    return settings
