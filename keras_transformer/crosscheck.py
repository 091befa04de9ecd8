"""Cross-check our MultiHeadAttention against `keras.layers.MultiHeadAttention`.

For one configuration, two identical Functional models are built around the
two layers (integer ids through a `mask_zero=True` embedding, plus a float
input, so the attention layer sees real Keras masks), weights are copied from
one to the other, and outputs, attention scores and gradients (with respect
to the float inputs and to every attention weight) are compared.

Used by `tests/layers/test_crosscheck.py` and `keras-transformer crosscheck`.
"""

import dataclasses

import keras
import numpy as np

from keras_transformer.layers.attention import MultiHeadAttention

OUTPUT_TOLERANCE = 1e-5
GRADIENT_TOLERANCE = 1e-4
VOCABULARY_SIZE = 11


@dataclasses.dataclass(frozen=True)
class Configuration:
    num_heads: int
    key_dim: int
    value_dim: object = None
    use_bias: bool = True
    output_shape: object = None
    dropout: float = 0.0
    batch_size: int = 2
    query_length: int = 4
    value_length: int = 4
    query_width: int = 6
    value_width: int = 6
    key_width: object = None  # a separate key input of this width
    cross_attention: bool = False  # value is a different sequence from query
    use_causal_mask: bool = False
    attention_mask: bool = False
    query_keras_mask: bool = False
    value_keras_mask: bool = False
    seed: int = 0

    @property
    def keras_fused_path_works(self):
        """Whether Keras' fused (no scores, no dropout) path can run this configuration.

        On JAX, Keras 3.15 routes it through `jax.nn.dot_product_attention`,
        which requires `value_dim == key_dim` and fails otherwise.
        """
        value_dim_differs = self.value_dim is not None and self.value_dim != self.key_dim
        return not (keras.backend.backend() == "jax" and value_dim_differs and self.dropout == 0)

    def describe(self):
        parts = [f"h={self.num_heads} k={self.key_dim}"]
        if self.value_dim:
            parts.append(f"v={self.value_dim}")
        if self.output_shape:
            parts.append(f"out={self.output_shape}")
        if not self.use_bias:
            parts.append("nobias")
        if self.dropout:
            parts.append(f"drop={self.dropout}")
        parts.append(f"T={self.query_length} S={self.value_length}")
        flags = (
            ("cross", self.cross_attention),
            ("key", self.key_width is not None),
            ("causal", self.use_causal_mask),
            ("attn_mask", self.attention_mask),
            ("q_mask", self.query_keras_mask),
            ("v_mask", self.value_keras_mask),
        )
        parts += [name for name, on in flags if on]
        return " ".join(parts)


def random_configurations(count=60, seed=0):
    """`count` seeded configurations; the first ones cover each option alone.

    Head sizes and output dimensions are at least 2: with a bias of shape
    `[n, 1]` whose `n` equals the second input dimension, Keras 3.15's
    TensorFlow `ops.add` takes its `bias_add` shortcut with the wrong data
    format and adds the bias along the sequence axis, so
    `keras.layers.MultiHeadAttention` itself is wrong there (see
    `test_keras_bias_add_shortcut_is_avoided` for the case, checked against NumPy).
    """
    rng = np.random.default_rng(seed)
    basic = [
        Configuration(2, 3),
        Configuration(2, 3, cross_attention=True, value_length=6, value_width=5),
        Configuration(2, 3, value_dim=5),
        Configuration(2, 3, output_shape=(7,)),
        Configuration(2, 3, output_shape=(2, 3)),
        Configuration(2, 3, use_bias=False),
        Configuration(2, 3, use_causal_mask=True),
        Configuration(2, 3, attention_mask=True),
        Configuration(2, 3, query_keras_mask=True, value_keras_mask=True),
        Configuration(2, 3, cross_attention=True, value_length=5, value_keras_mask=True),
        Configuration(2, 3, key_width=4, cross_attention=True, value_length=5),
        Configuration(2, 3, dropout=0.3),
    ]
    configurations = basic[:count]
    while len(configurations) < count:
        cross = bool(rng.integers(2))
        query_length = int(rng.integers(1, 7))
        configurations.append(
            Configuration(
                num_heads=int(rng.integers(1, 5)),
                key_dim=int(rng.integers(2, 9)),
                value_dim=int(rng.integers(2, 9)) if rng.random() < 0.4 else None,
                use_bias=bool(rng.random() < 0.8),
                output_shape=[None, (int(rng.integers(2, 9)),), (2, int(rng.integers(2, 4)))][
                    int(rng.integers(3))
                ],
                dropout=0.2 if rng.random() < 0.15 else 0.0,
                batch_size=int(rng.integers(1, 4)),
                query_length=query_length,
                value_length=int(rng.integers(1, 8)) if cross else query_length,
                query_width=int(rng.integers(2, 10)),
                value_width=int(rng.integers(2, 10)),
                key_width=int(rng.integers(2, 10)) if cross and rng.random() < 0.4 else None,
                cross_attention=cross,
                use_causal_mask=bool(rng.random() < 0.35),
                attention_mask=bool(rng.random() < 0.35),
                query_keras_mask=bool(rng.random() < 0.4),
                value_keras_mask=bool(rng.random() < 0.4),
                seed=int(rng.integers(2**31)),
            )
        )
    return configurations


def _random_inputs(config):
    rng = np.random.default_rng(config.seed)
    batch = config.batch_size

    def token_ids(length, masked):
        ids = rng.integers(1, VOCABULARY_SIZE, size=(batch, length))
        if masked:  # right padding of random length; row 0 keeps one real token
            lengths = rng.integers(0, length + 1, size=batch)
            lengths[0] = max(lengths[0], 1)
            ids[np.arange(length)[None, :] >= lengths[:, None]] = 0
        return ids.astype("int32")

    value_width = config.value_width if config.cross_attention else config.query_width
    inputs = {
        "query": rng.normal(size=(batch, config.query_length, config.query_width)).astype(
            "float32"
        ),
        "query_ids": token_ids(config.query_length, config.query_keras_mask),
    }
    if config.cross_attention:
        inputs["value"] = rng.normal(size=(batch, config.value_length, value_width)).astype(
            "float32"
        )
        inputs["value_ids"] = token_ids(config.value_length, config.value_keras_mask)
    if config.key_width is not None:
        inputs["key"] = rng.normal(size=(batch, config.value_length, config.key_width)).astype(
            "float32"
        )
    if config.attention_mask:
        mask = rng.random((batch, config.query_length, config.value_length)) < 0.7
        inputs["attention_mask"] = mask
    return inputs


def _build_model(config, layer):
    """Ids -> mask_zero embedding (+ float input) -> attention, so Keras masks reach the layer."""
    inputs = {
        "query": keras.Input((config.query_length, config.query_width), name="query"),
        "query_ids": keras.Input((config.query_length,), dtype="int32", name="query_ids"),
    }

    def masked(name, ids_name, width, use_mask):
        embedding = keras.layers.Embedding(
            VOCABULARY_SIZE, width, mask_zero=use_mask, name=f"{name}_embedding"
        )
        return keras.layers.Add()([embedding(inputs[ids_name]), inputs[name]])

    query = masked("query", "query_ids", config.query_width, config.query_keras_mask)
    value = query
    if config.cross_attention:
        width = config.value_width
        inputs["value"] = keras.Input((config.value_length, width), name="value")
        inputs["value_ids"] = keras.Input((config.value_length,), dtype="int32", name="value_ids")
        value = masked("value", "value_ids", width, config.value_keras_mask)
    call_kwargs = {"use_causal_mask": config.use_causal_mask}
    if config.key_width is not None:
        inputs["key"] = keras.Input((config.value_length, config.key_width), name="key")
        call_kwargs["key"] = inputs["key"]
    if config.attention_mask:
        inputs["attention_mask"] = keras.Input(
            (config.query_length, config.value_length), dtype="bool", name="attention_mask"
        )
        call_kwargs["attention_mask"] = inputs["attention_mask"]
    # Scores call first: in Keras 3.15 a built keras.layers.MultiHeadAttention
    # called again with return_attention_scores=True returns a scores tensor
    # that the Functional graph cannot trace back to the inputs.
    output_with_scores, scores = layer(query, value, return_attention_scores=True, **call_kwargs)
    output = (
        layer(query, value, **call_kwargs) if config.keras_fused_path_works else output_with_scores
    )
    return keras.Model(inputs, [output, output_with_scores, scores])


def _make_layer(layer_class, config, random_biases):
    bias_initializer = (
        keras.initializers.RandomNormal(seed=config.seed) if random_biases else "zeros"
    )
    return layer_class(
        num_heads=config.num_heads,
        key_dim=config.key_dim,
        value_dim=config.value_dim,
        use_bias=config.use_bias,
        output_shape=config.output_shape,
        dropout=config.dropout,
        kernel_initializer=keras.initializers.GlorotUniform(seed=config.seed),
        bias_initializer=bias_initializer,
        name="attention",
    )


def _attended_rows(config, inputs):
    """`[B, T]` True where the query row may attend at least one key.

    On other rows (all keys masked) the two layers legitimately differ:
    Keras' fused path returns the mean of the values, its scores path and
    ours return zero attention. Outputs there are compared only on the
    scores path.
    """
    allowed = np.ones((config.batch_size, config.query_length, config.value_length), bool)
    if config.query_keras_mask:
        allowed &= (inputs["query_ids"] != 0)[:, :, None]
    if config.value_keras_mask and config.cross_attention:
        allowed &= (inputs["value_ids"] != 0)[:, None, :]
    if not config.cross_attention and config.query_keras_mask:
        allowed &= (inputs["query_ids"] != 0)[:, None, :]
    if config.use_causal_mask:
        allowed &= np.tril(np.ones((config.query_length, config.value_length), bool))[None]
    if config.attention_mask:
        allowed &= inputs["attention_mask"]
    return allowed.any(axis=-1)


def _outputs_and_gradients(model, inputs, cotangent):
    """The model's outputs, and the gradients of sum(first output * cotangent)
    with respect to the float inputs and the attention layer's weights."""
    float_names = [name for name in ("query", "value", "key") if name in inputs]
    weights = model.get_layer("attention").trainable_variables
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        tensors = {name: tf.convert_to_tensor(value) for name, value in inputs.items()}
        with tf.GradientTape() as tape:
            tape.watch([tensors[name] for name in float_names])
            outputs = model(tensors)
            loss = tf.reduce_sum(outputs[0] * cotangent)
        gradients = tape.gradient(loss, [tensors[name] for name in float_names] + list(weights))
    elif backend == "jax":
        import jax

        non_trainable = [v.value for v in model.non_trainable_variables]
        weight_ids = {id(v) for v in weights}
        positions = [i for i, v in enumerate(model.trainable_variables) if id(v) in weight_ids]

        def loss_fn(float_inputs, trainable_values):
            outputs, _ = model.stateless_call(
                trainable_values, non_trainable, {**inputs, **float_inputs}
            )
            return (outputs[0] * cotangent).sum(), outputs

        # One compiled function per model: op-by-op JAX compiles every
        # primitive for every new shape and is far slower here.
        grad_fn = jax.jit(jax.grad(loss_fn, argnums=(0, 1), has_aux=True))
        (input_grads, weight_grads), outputs = grad_fn(
            {name: inputs[name] for name in float_names},
            [v.value for v in model.trainable_variables],
        )
        gradients = [input_grads[name] for name in float_names] + [
            weight_grads[i] for i in positions
        ]
    elif backend == "torch":
        import torch

        tensors = {name: torch.as_tensor(value) for name, value in inputs.items()}
        for name in float_names:
            tensors[name].requires_grad_(True)
        outputs = model(tensors)
        loss = (outputs[0] * torch.as_tensor(cotangent)).sum()
        gradients = torch.autograd.grad(
            loss, [tensors[name] for name in float_names] + [v.value for v in weights]
        )
        outputs = [output.detach() for output in outputs]
    else:
        raise NotImplementedError(
            f"The cross-check runs on tensorflow, jax and torch, not {backend}."
        )
    return [keras.ops.convert_to_numpy(x) for x in outputs], [
        keras.ops.convert_to_numpy(g) for g in gradients
    ]


@dataclasses.dataclass
class Result:
    configuration: Configuration
    direction: str  # "keras->ours" or "ours->keras"
    output: float
    output_with_scores: float
    scores: float
    gradients: float

    @property
    def passed(self):
        return (
            max(self.output, self.output_with_scores, self.scores) <= OUTPUT_TOLERANCE
            and self.gradients <= GRADIENT_TOLERANCE
        )


def check_configuration(config, direction="keras->ours", ours_class=MultiHeadAttention):
    """Copies weights one way, compares both layers; returns the max abs differences."""
    keras.utils.set_random_seed(config.seed)
    source_is_keras = direction == "keras->ours"
    theirs = _make_layer(keras.layers.MultiHeadAttention, config, random_biases=source_is_keras)
    ours = _make_layer(ours_class, config, random_biases=not source_is_keras)
    keras_model = _build_model(config, theirs)
    our_model = _build_model(config, ours)
    source, target = (keras_model, our_model) if source_is_keras else (our_model, keras_model)
    target.set_weights(source.get_weights())

    inputs = _random_inputs(config)
    rows = _attended_rows(config, inputs)
    output_shape = (config.batch_size, config.query_length) + (
        config.output_shape or (config.query_width,)
    )
    row_weights = rows.reshape(rows.shape + (1,) * (len(output_shape) - 2)).astype("float32")
    cotangent = np.random.default_rng(config.seed + 1).normal(size=output_shape).astype("float32")
    cotangent *= row_weights
    keras_outputs, keras_gradients = _outputs_and_gradients(keras_model, inputs, cotangent)
    our_outputs, our_gradients = _outputs_and_gradients(our_model, inputs, cotangent)

    def max_difference(a, b):
        return float(np.max(np.abs(a - b))) if a.size else 0.0

    gradient_differences = [max_difference(a, b) for a, b in zip(keras_gradients, our_gradients)]
    return Result(
        configuration=config,
        direction=direction,
        output=max_difference(keras_outputs[0] * row_weights, our_outputs[0] * row_weights),
        output_with_scores=max_difference(keras_outputs[1], our_outputs[1]),
        scores=max_difference(keras_outputs[2], our_outputs[2]),
        gradients=max(gradient_differences),
    )
