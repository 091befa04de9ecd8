"""Our MultiHeadAttention against keras.layers.MultiHeadAttention, weights copied both ways."""

import dataclasses

import keras
import numpy as np
import pytest

from keras_transformer.crosscheck import (
    GRADIENT_TOLERANCE,
    OUTPUT_TOLERANCE,
    check_configuration,
    random_configurations,
)
from keras_transformer.layers import MultiHeadAttention

CONFIGURATIONS = random_configurations(count=60, seed=0)

# Every option the configurations mix, by name; `test_configurations_cover_every_option`
# asks for a few of each among the 60.
OPTIONS = {
    "cross-attention with T != S": lambda c: c.cross_attention and c.query_length != c.value_length,
    "value_dim != key_dim": lambda c: bool(c.value_dim) and c.value_dim != c.key_dim,
    "output_shape": lambda c: c.output_shape is not None,
    "two-dimensional output_shape": lambda c: (
        c.output_shape is not None and len(c.output_shape) == 2
    ),
    "one-dimensional output_shape": lambda c: (
        c.output_shape is not None and len(c.output_shape) == 1
    ),
    "causal mask": lambda c: c.use_causal_mask,
    "explicit attention mask": lambda c: c.attention_mask,
    "Keras mask on the query": lambda c: c.query_keras_mask,
    "Keras mask on the value (cross)": lambda c: c.value_keras_mask and c.cross_attention,
    "separate key input": lambda c: c.key_width is not None,
    "no bias": lambda c: not c.use_bias,
    "attention dropout": lambda c: c.dropout > 0,
}


def covering_subset(configurations):
    """A few configurations that together have every option in OPTIONS: greedily
    the one with the most options not yet covered (ties: the earlier one)."""
    chosen, uncovered = [], set(OPTIONS)
    while uncovered:
        best = max(configurations, key=lambda c: sum(OPTIONS[name](c) for name in uncovered))
        gained = {name for name in uncovered if OPTIONS[name](best)}
        assert gained, f"no configuration has {sorted(uncovered)}"
        chosen.append(best)
        uncovered -= gained
    return [c for c in configurations if c in chosen]  # in their original order


# TensorFlow checks all 60. JAX compiles every new shape (4-15 s a check on 2
# CPU cores, the largest share of the JAX pass), so it checks the few
# configurations that together have every option, both directions each, and
# the first (plain self-attention): the JAX pass is there to show the layer's
# keras.ops code is right on another backend, not to repeat the random search.
JAX_CONFIGURATIONS = [
    CONFIGURATIONS[0],
    *(c for c in covering_subset(CONFIGURATIONS[:20]) if c != CONFIGURATIONS[0]),
]
CHECKED = CONFIGURATIONS if keras.backend.backend() == "tensorflow" else JAX_CONFIGURATIONS


def test_configurations_cover_every_option():
    def count(predicate):
        return sum(1 for config in CONFIGURATIONS if predicate(config))

    assert len(CONFIGURATIONS) >= 50
    assert count(OPTIONS["cross-attention with T != S"]) >= 5
    assert count(OPTIONS["value_dim != key_dim"]) >= 5
    assert count(OPTIONS["output_shape"]) >= 5
    assert count(OPTIONS["two-dimensional output_shape"]) >= 2
    assert count(OPTIONS["causal mask"]) >= 5
    assert count(OPTIONS["explicit attention mask"]) >= 5
    assert count(OPTIONS["Keras mask on the query"]) >= 5
    assert count(OPTIONS["Keras mask on the value (cross)"]) >= 3
    assert count(OPTIONS["separate key input"]) >= 3
    assert count(OPTIONS["no bias"]) >= 3
    assert count(OPTIONS["attention dropout"]) >= 2
    assert len({c.num_heads for c in CONFIGURATIONS}) >= 3


def test_the_jax_subset_has_every_option():
    for name, predicate in OPTIONS.items():
        assert any(predicate(c) for c in JAX_CONFIGURATIONS), name
    assert len({c.num_heads for c in JAX_CONFIGURATIONS}) >= 3
    assert len(JAX_CONFIGURATIONS) <= 8


@pytest.mark.parametrize("direction", ["keras->ours", "ours->keras"])
@pytest.mark.parametrize("config", CHECKED, ids=[c.describe() for c in CHECKED])
def test_matches_keras(config, direction):
    result = check_configuration(config, direction)
    assert result.output <= OUTPUT_TOLERANCE, result
    assert result.output_with_scores <= OUTPUT_TOLERANCE, result
    assert result.scores <= OUTPUT_TOLERANCE, result
    assert result.gradients <= GRADIENT_TOLERANCE, result


class _SquaredScale(MultiHeadAttention):
    """Scales logits by 1/key_dim instead of 1/sqrt(key_dim): a plausible bug."""

    def compute_attention_logits(self, query_heads, key_heads):
        return super().compute_attention_logits(query_heads, key_heads) / np.sqrt(self.key_dim)


class _ForgetsCausalMask(MultiHeadAttention):
    def call(self, query, value, key=None, use_causal_mask=False, **kwargs):
        return super().call(query, value, key=key, **kwargs)


@pytest.mark.parametrize(
    "broken_class, config",
    [
        (_SquaredScale, CONFIGURATIONS[0]),
        (_ForgetsCausalMask, CONFIGURATIONS[6]),
    ],
)
def test_crosscheck_detects_a_wrong_layer(broken_class, config):
    result = check_configuration(config, "keras->ours", ours_class=broken_class)
    assert not result.passed
    assert result.output > 100 * OUTPUT_TOLERANCE


def test_padded_query_rows_are_compared_on_the_scores_path():
    config = dataclasses.replace(CONFIGURATIONS[8], seed=3, batch_size=3)
    result = check_configuration(config)
    assert result.passed, result
