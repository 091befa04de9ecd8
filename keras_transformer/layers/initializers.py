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


@keras.saving.register_keras_serializable(package="keras_transformer")
class ReceptiveFieldGlorotUniform(keras.initializers.Initializer):
    """Glorot uniform with Keras' classic fans for every kernel rank.

    For a kernel of rank above 2, every axis before the last two counts as a
    receptive field: `fan_in = shape[-2] * field`, `fan_out = shape[-1] *
    field`. An attention kernel `[d, heads, head_dim]` thus starts with the
    variance `2 / (d * (heads + head_dim))`, and an output kernel `[heads,
    head_dim, d]` with `2 / (heads * (head_dim + d))`: at width 256 and 4
    heads, standard deviations of 0.011 and 0.040, where `EinsumDense`,
    given Keras' Glorot, counts its fans per matrix (`d` in, `heads *
    head_dim` out) and starts both at 0.0625. Small query and key kernels
    start attention near uniform. `Seq2SeqTransformer` uses it by default:
    its defaults were tuned with it, and a small translator trains better
    with it (benchmarks/BENCHMARKS.md, "Translation quality"). On a 2-D
    kernel it is plain Glorot uniform.

    `EinsumDense` passes its axes only to `VarianceScaling` initializers, so
    this one, which wraps Keras' Glorot rather than subclassing it, keeps the
    classic fans inside the attention's `EinsumDense` projections.

    Args:
        seed: int or None, as Keras' initializers take it.

    Example:

    >>> import numpy as np
    >>> initializer = ReceptiveFieldGlorotUniform(seed=1)
    >>> kernel = np.asarray(initializer((256, 4, 64)))
    >>> bool(np.abs(kernel).max() <= np.sqrt(6 / (256 * (4 + 64))))
    True
    """

    def __init__(self, seed=None):
        self.seed = seed
        self._glorot = keras.initializers.GlorotUniform(seed=seed)

    def __call__(self, shape, dtype=None):
        return self._glorot(shape, dtype=dtype)

    def get_config(self):
        return {"seed": self.seed}
