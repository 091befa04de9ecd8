"""Shared pytest setup: quiet logs, a default backend, seeds and a float32 policy.

Environment defaults are set before anything imports Keras, so
`KERAS_BACKEND=jax pytest` and a plain `pytest` (TensorFlow) both work.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# The tests run tiny shapes, where XLA's compile time (every new shape on JAX,
# jit_compile=True on TensorFlow), not the run time, is what costs: LLVM's
# expensive optimization passes roughly halve the JAX pass's compile time for
# no gain. They change code generation only, and the gradients stay those of
# the default flags. Not `--xla_backend_optimization_level=0`: under it XLA's
# CPU code computes the classifier's gradients below its output layer wrong
# (the same loss, gradients off by up to their own size), which a test that
# compares two programs cannot see. Flags the caller set win.
_XLA_TEST_FLAGS = {
    "--xla_llvm_disable_expensive_passes": "true",
}
_xla_flags = os.environ.get("XLA_FLAGS", "")
os.environ["XLA_FLAGS"] = " ".join(
    [_xla_flags]
    + [f"{flag}={value}" for flag, value in _XLA_TEST_FLAGS.items() if flag not in _xla_flags]
).strip()

import keras
import numpy as np
import pytest

SEED = 1234


def pytest_report_header(config):
    return f"keras {keras.__version__}, backend {keras.backend.backend()}"


@pytest.fixture(autouse=True)
def _seed_and_float32_policy():
    """Every test starts seeded and under the float32 policy, and leaves it so."""
    keras.utils.set_random_seed(SEED)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


class NumpyTransformer:
    """Independent float64 numpy forward passes of the paper's blocks.

    They read a layer's weights through its documented attributes and redo
    the math from the paper, so a test compares against arithmetic, not
    against the layer's own code.
    """

    @staticmethod
    def numpy(tensor):
        return np.asarray(keras.ops.convert_to_numpy(tensor), dtype=np.float64)

    @classmethod
    def layer_norm(cls, x, layer):
        gamma, beta = cls.numpy(layer.gamma), cls.numpy(layer.beta)
        mean = x.mean(-1, keepdims=True)
        variance = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(variance + layer.epsilon) * gamma + beta

    @classmethod
    def attention(cls, layer, query, value, mask=None):
        """Multi-head attention; mask bool [B, T, S] (True = may attend).

        A query row with no allowed key gets zero weights. Returns
        (output [B, T, d], weights [B, heads, T, S]).
        """
        n = cls.numpy

        def project(x, kernel, bias):
            heads = np.einsum("btd,dnh->bnth", x, n(kernel))
            return heads + n(bias)[None, :, None, :] if bias is not None else heads

        q = project(query, layer.query_dense.kernel, layer.query_dense.bias)
        k = project(value, layer.key_dense.kernel, layer.key_dense.bias)
        v = project(value, layer.value_dense.kernel, layer.value_dense.bias)
        logits = np.einsum("bnth,bnsh->bnts", q, k) / np.sqrt(q.shape[-1])
        if mask is None:
            mask = np.ones(logits.shape[:1] + logits.shape[2:], dtype=bool)
        mask = np.broadcast_to(mask[:, None], logits.shape)
        logits = np.where(mask, logits, -np.inf)
        row_max = np.max(logits, axis=-1, keepdims=True)
        row_max = np.where(np.isfinite(row_max), row_max, 0.0)
        exp = np.where(mask, np.exp(logits - row_max), 0.0)
        total = exp.sum(-1, keepdims=True)
        weights = np.divide(exp, total, out=np.zeros_like(exp), where=total > 0)
        attended = np.einsum("bnts,bnsh->bnth", weights, v)
        output = np.einsum("bnth,nhd->btd", attended, n(layer.output_dense.kernel))
        if layer.output_dense.bias is not None:
            output = output + n(layer.output_dense.bias)
        return output, weights

    @classmethod
    def feed_forward(cls, layer, x, activation=lambda h: np.maximum(h, 0.0)):
        n = cls.numpy
        hidden = activation(
            x @ n(layer.intermediate_dense.kernel) + n(layer.intermediate_dense.bias)
        )
        return hidden @ n(layer.output_dense.kernel) + n(layer.output_dense.bias)

    @classmethod
    def residual(cls, sublayer, x, norm, normalize_first):
        if normalize_first:
            return x + sublayer(cls.layer_norm(x, norm))
        return cls.layer_norm(x + sublayer(x), norm)

    @classmethod
    def encoder_block(cls, block, x, padding_mask=None, attention_mask=None):
        """Returns (outputs, self-attention weights)."""
        batch, length = x.shape[:2]
        mask = np.ones((batch, length, length), dtype=bool)
        if padding_mask is not None:
            mask &= padding_mask[:, :, None] & padding_mask[:, None, :]
        if attention_mask is not None:
            mask &= np.broadcast_to(attention_mask, mask.shape)
        scores = {}

        def self_attention(h):
            output, scores["self"] = cls.attention(block.self_attention, h, h, mask)
            return output

        x = cls.residual(self_attention, x, block.self_attention_norm, block.normalize_first)
        x = cls.residual(
            lambda h: cls.feed_forward(block.feed_forward, h),
            x,
            block.feed_forward_norm,
            block.normalize_first,
        )
        return x, scores["self"]

    @classmethod
    def decoder_block(cls, block, x, source=None, decoder_mask=None, source_mask=None):
        """Causal self-attention (+ cross-attention when `source` is given) + feed-forward."""
        batch, length = x.shape[:2]
        self_mask = np.broadcast_to(
            np.tril(np.ones((length, length), dtype=bool)), (batch, length, length)
        )
        if decoder_mask is not None:
            self_mask = self_mask & decoder_mask[:, :, None] & decoder_mask[:, None, :]
        x = cls.residual(
            lambda h: cls.attention(block.self_attention, h, h, self_mask)[0],
            x,
            block.self_attention_norm,
            block.normalize_first,
        )
        if source is not None:
            cross_mask = np.ones((batch, length, source.shape[1]), dtype=bool)
            if source_mask is not None:
                cross_mask = cross_mask & source_mask[:, None, :]
            x = cls.residual(
                lambda h: cls.attention(block.cross_attention, h, source, cross_mask)[0],
                x,
                block.cross_attention_norm,
                block.normalize_first,
            )
        return cls.residual(
            lambda h: cls.feed_forward(block.feed_forward, h),
            x,
            block.feed_forward_norm,
            block.normalize_first,
        )


@pytest.fixture(scope="session")
def np_reference():
    """`NumpyTransformer`: numpy forward passes to compare layers against."""
    return NumpyTransformer


def randomize_weights(layer, seed=0, scale=0.3):
    """Gives every weight of a built layer random values (biases and norms included),
    so that zero biases or unit gains cannot hide a mistake. Norm gains stay near 1."""
    rng = np.random.default_rng(seed)
    values = []
    for variable in layer.weights:
        value = rng.normal(scale=scale, size=variable.shape)
        if variable.path.endswith("gamma"):
            value += 1.0
        values.append(value.astype("float32"))
    layer.set_weights(values)


@pytest.fixture(scope="session")
def randomize():
    """`randomize(layer, seed=0, scale=0.3)`: random values for every weight of a built layer."""
    return randomize_weights


def pytest_configure(config):
    # `make test` runs pytest-xdist; tests/scheduling.py groups the tests.
    if config.pluginmanager.hasplugin("xdist"):
        from tests.scheduling import GroupSchedulingPlugin

        config.pluginmanager.register(GroupSchedulingPlugin(), "keras_transformer_group_scheduling")
