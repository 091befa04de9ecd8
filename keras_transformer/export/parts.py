"""What each part of an exported classifier contributes, read from beside its SavedModel.

`export_classifier` writes `assets.extra/classifier.json`: the Transformer's
and the bag of n-grams' weights in the answer (the sum of their logits), how
many tokens each reads, and whether the export holds the encoder (`encoder`:
false where the Transformer's weight is 0, an export with no `attention`
signature). Readers (`keras-transformer predict`, the attention explorer) need no
TensorFlow for it.
"""

import json
import os

PARTS_FILE = "classifier.json"


def read_parts(version_dir):
    """The `classifier.json` of an export (a dict as `export_classifier` writes it), or None
    for an export without one."""
    try:
        with open(os.path.join(version_dir, "assets.extra", PARTS_FILE), encoding="utf-8") as file:
            return json.load(file)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def has_encoder(parts):
    """Whether the export of `parts` (None: an export without `classifier.json`) holds the
    Transformer's encoder and its `attention` signature."""
    # Exports written before the key existed all hold it.
    return not parts or bool(parts.get("encoder", True))


def attention_notice(parts):
    """What a reader of the export's attention maps should know, or None."""
    if not parts:
        return None
    if not has_encoder(parts):
        return (
            "This model has no attention to show: the Transformer's weight in it is 0, so "
            "its answers are the bag of n-grams' alone, and its export holds no encoder."
        )
    if parts["transformer_weight"] == 0.0:
        return (
            "The Transformer's weight in this model is 0: the answers are the bag of "
            "n-grams' alone, and these attention maps do not change them."
        )
    if parts["bag_weight"]:
        past = (
            f", past the attention's {parts['transformer_tokens']}"
            if parts["bag_tokens"] > parts["transformer_tokens"]
            else ""
        )
        return (
            f"The answers also come from a bag of n-grams (weight {parts['bag_weight']}, beside "
            f"the Transformer's {parts['transformer_weight']}) that reads up to "
            f"{parts['bag_tokens']} tokens{past}."
        )
    return None
