"""Declaring the training settings, and the checks both tasks' settings share.

Each setting of `ClassifierSettings` and `TranslatorSettings` is written
once, as a dataclass field made by `setting(...)`: its type (the field's
annotation), its default, its help text and how the command line sets it.
The apps derive their flags from these fields (`apps/training_flags.py`), a
run's `settings.json` holds `dataclasses.asdict` of them, and `FROM_DATA`
lists those whose None is chosen from the training data (each task's
`data_rules`).
"""

import dataclasses

from keras_transformer.training.distribute import MIXED_PRECISION_POLICIES

# What the help text's "{default}" becomes for a setting chosen from the data.
FROM_DATA_HELP = "default: from the data"


def setting(
    default,
    help=None,
    *,
    group,
    from_data=False,
    flag=True,
    metavar=None,
    choices=None,
    minimum=None,
    fine_tuning=None,
):
    """A settings field: `default`, and what the command line and the checks need.

    Args:
        default: the value when none is given; None with `from_data` is
            chosen from the training data.
        help: the flag's help text; "{default}" in it becomes "default X" or
            "default: from the data" (a bool's "default: on" / "off"). None:
            no help text.
        group: the flags' group in `--help` ("data", "model", "training",
            "hardware").
        from_data: whether None means "chosen from the training data".
        flag: True for `--NAME` (underscores as dashes), a string for another
            flag name, None for no flag (a setting only code sets).
        metavar: the flag's value in `--help` (default: the flag's name).
        choices: the values allowed; the checks and the flag enforce them.
        minimum: for an integer setting, the least value allowed: 1 or 0.
        fine_tuning: the default when the run fine-tunes a pretrained
            checkpoint, where that differs (`fine_tuning_defaults`): a value,
            or `{"full": value, "lora": value}` when low-rank adapters want
            another one.
    """
    metadata = {
        "help": help,
        "group": group,
        "from_data": from_data,
        "flag": flag,
        "metavar": metavar,
        "choices": None if choices is None else tuple(choices),
        "minimum": minimum,
        "fine_tuning": fine_tuning,
    }
    return dataclasses.field(default=default, metadata=metadata)


# The settings both tasks have, declared alike.


def seed_setting(default=1337):
    return setting(
        default,
        "seeds the data split and the --max-examples subset and, in training, the initial "
        "weights and the shuffling ({default})",
        group="training",
    )


def patience_setting(default, from_data=False):
    return setting(
        default,
        "early stopping: epochs without a better --monitor; 0 = off ({default})",
        group="training",
        from_data=from_data,
        minimum=0,
    )


def monitor_setting(choices):
    """The validation metric that picks the kept epoch; the first of `choices` by default."""
    return setting(
        choices[0],
        "validation metric that chooses the epoch kept (best.keras, the exported weights) and "
        "early stopping; the validation loss breaks ties ({default})",
        group="training",
        choices=choices,
    )


def mixed_precision_setting():
    return setting(
        "off",
        "compute in float16 (loss-scaled) or bfloat16 with float32 weights ({default}); saved "
        "with the run, which --resume keeps",
        group="hardware",
        choices=MIXED_PRECISION_POLICIES,
    )


def jit_compile_setting():
    return setting(
        False,
        "compile the training step with XLA on TensorFlow (always on JAX); saved with the run",
        group="hardware",
    )


def max_length_setting(default):
    return setting(
        default,
        "the longest --sequence-length chosen from the data ({default})",
        group="model",
        minimum=1,
    )


def settings_class(cls):
    """`dataclasses.dataclass(cls)`, with `FROM_DATA` the names of its `from_data` settings."""
    cls = dataclasses.dataclass(cls)
    cls.FROM_DATA = tuple(
        field.name for field in dataclasses.fields(cls) if field.metadata.get("from_data")
    )
    return cls


def flag_of(field):
    """The command-line flag of a settings field (e.g. `--vocab-size`), or None."""
    flag = field.metadata.get("flag", True)
    if flag is True:
        return "--" + field.name.replace("_", "-")
    return flag or None


def default_help(field):
    """What "{default}" in a setting's help becomes."""
    if field.default is None and field.metadata.get("from_data"):
        return FROM_DATA_HELP
    if isinstance(field.default, bool):
        text = f"default: {'on' if field.default else 'off'}"
    else:
        text = f"default {field.default}"
    fine_tuning = field.metadata.get("fine_tuning")
    if fine_tuning is None:
        return text
    if not isinstance(fine_tuning, dict):
        fine_tuning = {"full": fine_tuning}
    with_flag = {"full": "--pretrained", "lora": "--lora-rank"}
    return text + "".join(
        f"; {_shown(value)} with {with_flag[mode]}" for mode, value in fine_tuning.items()
    )


def _shown(value):
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def fine_tuning_defaults(settings, given):
    """`settings` with every field that has a `fine_tuning` default and is not
    in `given` (the names the user set) at that default, when
    `settings.pretrained` names a checkpoint; else `settings` unchanged."""
    if getattr(settings, "pretrained", None) is None:
        return settings
    mode = "lora" if settings.lora_rank is not None else "full"
    changes = {}
    for field in dataclasses.fields(settings):
        fine_tuning = field.metadata.get("fine_tuning")
        if fine_tuning is None or field.name in given:
            continue
        changes[field.name] = fine_tuning[mode] if isinstance(fine_tuning, dict) else fine_tuning
    return dataclasses.replace(settings, **changes)


def help_text(field):
    """The help of a setting's flag: its help text, "{default}" filled in; None without one."""
    text = field.metadata.get("help")
    return None if text is None else text.replace("{default}", default_help(field))


def check_settings(settings):
    """Raises ValueError naming the first bad value; returns `settings`.

    Checks what the fields declare (choices, integers' minimum) and what
    both tasks share. A `FROM_DATA` field may be None: it is chosen from the
    training data before training, and checked again then.
    """
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        if value is None and (field.metadata.get("from_data") or field.default is None):
            continue
        choices, minimum = field.metadata.get("choices"), field.metadata.get("minimum")
        if choices is not None and value not in choices:
            raise ValueError(
                f"`{field.name}` must be one of {', '.join(map(str, choices))}, got {value!r}."
            )
        if minimum is not None and not (
            isinstance(value, int) and not isinstance(value, bool) and value >= minimum
        ):
            kind = "a positive integer" if minimum == 1 else "a non-negative integer"
            raise ValueError(f"`{field.name}` must be {kind}, got {value!r}.")
        if field.type is bool and not isinstance(value, bool):
            raise ValueError(f"`{field.name}` must be True or False, got {value!r}.")
    if not unset(settings, "d_model") and settings.d_model % settings.num_heads:
        raise ValueError(
            f"`d_model` ({settings.d_model}) must be divisible by `num_heads` "
            f"({settings.num_heads})."
        )
    for name in ("dropout", "source_word_dropout"):
        if hasattr(settings, name) and not unset(settings, name):
            rate = getattr(settings, name)
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1:
                raise ValueError(f"`{name}` must be a number in [0, 1), got {rate!r}.")
    return settings


def unset(settings, name):
    """Whether `name` is still None, to be chosen from the data."""
    return name in settings.FROM_DATA and getattr(settings, name) is None
