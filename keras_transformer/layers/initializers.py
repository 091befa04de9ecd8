"""One initializer per weight: what every layer that hands initializers down uses."""

import zlib

import keras


def clone_initializer(initializer, role):
    """A fresh copy of `initializer` for the sub-layer or weight named `role`.

    Keras initializers draw the same values at every call: one object handed
    to two sub-layers would start them equal (flattened, e.g. the two kernels
    of a feed-forward network, or the query and key kernels of an attention).
    As KerasHub's `clone_initializer`, the copy is rebuilt from the config,
    which gives an unseeded initializer a new seed. A seeded one keeps its
    seed in its config, so the copy's seed is derived from it and `role`:
    runs repeat, and sub-layers with different roles differ.

    Args:
        initializer: a `keras.initializers.Initializer`; anything else (a
            name, a config) is returned unchanged, as `keras.initializers.get`
            already makes a new object from it.
        role: the sub-layer's or weight's name within its layer, e.g.
            `"query_kernel"`; unique among the copies one layer makes.
    """
    if not isinstance(initializer, keras.initializers.Initializer):
        return initializer
    config = initializer.get_config()
    seed = config.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        config["seed"] = zlib.crc32(f"{seed}/{role}".encode()) & 0x7FFFFFFF
    return initializer.__class__.from_config(config)
