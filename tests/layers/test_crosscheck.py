"""Our MultiHeadAttention against keras.layers.MultiHeadAttention, weights copied both ways."""

import dataclasses

import keras
import numpy as np
import pytest

from keras_transformer.crosscheck import GRADIENT_TOLERANCE
from keras_transformer.crosscheck import OUTPUT_TOLERANCE
from keras_transformer.crosscheck import check_configuration
from keras_transformer.crosscheck import random_configurations
from keras_transformer.layers import MultiHeadAttention

CONFIGURATIONS = random_configurations(count=60, seed=0)
# JAX compiles every new shape (about 4 s per check on 2 cores), so it runs
# the first 20: each option alone, then random mixtures. TensorFlow runs all.
CHECKED = CONFIGURATIONS if keras.backend.backend() == "tensorflow" else CONFIGURATIONS[:20]


def test_configurations_cover_every_option():
    def count(predicate):
        return sum(1 for config in CONFIGURATIONS if predicate(config))

    assert len(CONFIGURATIONS) >= 50
    assert count(lambda c: c.cross_attention and c.query_length != c.value_length) >= 5
    assert count(lambda c: c.value_dim and c.value_dim != c.key_dim) >= 5
    assert count(lambda c: c.output_shape is not None) >= 5
    assert count(lambda c: c.output_shape is not None and len(c.output_shape) == 2) >= 2
    assert count(lambda c: c.use_causal_mask) >= 5
    assert count(lambda c: c.attention_mask) >= 5
    assert count(lambda c: c.query_keras_mask) >= 5
    assert count(lambda c: c.value_keras_mask and c.cross_attention) >= 3
    assert count(lambda c: c.key_width is not None) >= 3
    assert count(lambda c: not c.use_bias) >= 3
    assert count(lambda c: c.dropout > 0) >= 2
    assert len({c.num_heads for c in CONFIGURATIONS}) >= 3


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
