"""The per-request decoding controls of an exported translator, read from beside its SavedModel.

`export_translator` writes them to `assets.extra/translator.json` under
`"request_controls"`: the signature that takes them (`translate`) and, for
each of its inputs but `text`, the dtype, the default (the defaults answer as
`serving_default`) and the range (`minimum`, `maximum`, `exclusive_minimum`;
a `maximum` that names another input is that input's value in the same
request). `keras-transformer translate` and the server read them here, to fill in what a
request leaves out and to refuse a value out of range with a message naming
it, before the model runs. Nothing here needs TensorFlow.
"""

import json
import os

CONFIG_FILE = "translator.json"
CONTROLLED_SIGNATURE = "translate"


def request_controls(beam_width, vocabulary_size):
    """The `"request_controls"` of a translator exported with `beam_width` over a target
    vocabulary of `vocabulary_size` tokens."""
    return {
        "signature": CONTROLLED_SIGNATURE,
        "inputs": {
            "beam_width": {
                "dtype": "int32",
                "default": beam_width,
                "minimum": 1,
                "maximum": beam_width,
            },
            "num_translations": {
                "dtype": "int32",
                "default": 1,
                "minimum": 1,
                "maximum": "beam_width",
            },
            "sampling": {"dtype": "bool", "default": False},
            "temperature": {"dtype": "float32", "default": 1.0, "exclusive_minimum": 0.0},
            "top_k": {"dtype": "int32", "default": 0, "minimum": 0, "maximum": vocabulary_size},
            "top_p": {"dtype": "float32", "default": 1.0, "exclusive_minimum": 0.0, "maximum": 1.0},
            "seed": {"dtype": "int64", "default": 0},
        },
    }


def read_request_controls(version_dir):
    """The `"request_controls"` of the export in `version_dir`, or None for an export without
    them (a classifier, a translator exported before they existed)."""
    try:
        with open(
            os.path.join(version_dir, "assets.extra", CONFIG_FILE), encoding="utf-8"
        ) as config_file:
            return json.load(config_file).get("request_controls")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None


class ControlError(ValueError):
    """A control out of its range: the input's `name`, the `value` given and the range it must
    be in (`allowed`, e.g. "between 1 and 4"); its message spells the name as the caller's
    interface does."""

    def __init__(self, name, value, allowed, spelled):
        super().__init__(f"{spelled} must be {allowed}, got {value!r}")
        self.name, self.value, self.allowed = name, value, allowed


def complete_controls(given, controls, spell=lambda name: f"`{name}`"):
    """`given` ({input name: value}, any of the controls) with the defaults of the others,
    every value checked against its range (a `ControlError` for the first out of it).

    Args:
        given: dict, the controls a request names; numbers may be Python or NumPy scalars.
        controls: dict, the `"request_controls"` of an export.
        spell: callable, an input's name as messages write it (`--beam-width` for a flag).

    Returns:
        {input name: value} for every control, in `controls`' order.
    """
    inputs = controls["inputs"]
    values = {name: given.get(name, spec["default"]) for name, spec in inputs.items()}
    for name, spec in inputs.items():
        allowed = _range_text(spec, values, spell)
        if allowed and not _in_range(values[name], spec, values):
            raise ControlError(name, _plain(values[name]), allowed, spell(name))
    return values


def _bound(spec, key, values):
    bound = spec.get(key)
    return values[bound] if isinstance(bound, str) else bound


def _in_range(value, spec, values):
    minimum, maximum = _bound(spec, "minimum", values), _bound(spec, "maximum", values)
    exclusive_minimum = spec.get("exclusive_minimum")
    return (
        (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
        and (exclusive_minimum is None or value > exclusive_minimum)
    )


def _range_text(spec, values, spell):
    """The range of `spec` in words ("between 1 and 4", "above 0.0 and at most 1.0"), or None
    for a control of any value."""

    def named(key):
        bound = spec.get(key)
        return f"{_plain(values[bound])} ({spell(bound)})" if isinstance(bound, str) else bound

    low = (
        f"above {spec['exclusive_minimum']}"
        if "exclusive_minimum" in spec
        else (f"at least {named('minimum')}" if "minimum" in spec else None)
    )
    if "maximum" not in spec:
        return low
    if "minimum" in spec:
        return f"between {named('minimum')} and {named('maximum')}"
    return f"{low} and at most {named('maximum')}" if low else f"at most {named('maximum')}"


def _plain(value):
    """A NumPy scalar as the Python number or bool it holds, for messages."""
    return value.item() if hasattr(value, "item") else value
