"""Masked loss and accuracy, and the paper's learning-rate schedule."""

import keras
import numpy as np
import pytest

from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import masked_accuracy
from keras_transformer.training.schedules import TransformerSchedule

TARGETS = np.array([[3, 1, 0, 0], [2, 2, 2, 0]], np.int32)
LOGITS = np.random.default_rng(0).normal(size=(2, 4, 5)).astype(np.float32)


def numpy_crossentropy(targets, logits, smoothing=0.0):
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    one_hot = np.eye(logits.shape[-1])[targets]
    one_hot = one_hot * (1 - smoothing) + smoothing / logits.shape[-1]
    per_token = -(one_hot * log_probs).sum(-1)
    real = targets != 0
    return per_token[real].mean()


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_loss_is_the_mean_over_real_tokens(smoothing):
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=smoothing)
    value = float(keras.ops.convert_to_numpy(loss(TARGETS, LOGITS)))
    assert value == pytest.approx(numpy_crossentropy(TARGETS, LOGITS, smoothing), rel=1e-5)


def test_padding_logits_do_not_change_the_loss():
    changed = LOGITS.copy()
    changed[TARGETS == 0] = 100.0
    loss = MaskedSparseCategoricalCrossentropy()
    assert float(loss(TARGETS, changed)) == pytest.approx(float(loss(TARGETS, LOGITS)), rel=1e-6)


# Two replicas need two logical CPUs, set before TensorFlow starts: a fresh process.
TWO_REPLICAS = """
import json, sys
import numpy as np
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
targets, logits = (
    np.asarray(value, dtype) for value, dtype in zip(json.load(sys.stdin), ("int32", "float32"))
)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
rows = strategy.experimental_distribute_values_from_function(
    lambda context: (
        targets[context.replica_id_in_sync_group::2], logits[context.replica_id_in_sync_group::2]
    ))
values = strategy.run(MaskedSparseCategoricalCrossentropy(), args=rows)
print(json.dumps([float(value) for value in strategy.experimental_local_results(values)]))
"""


def test_loss_under_two_replicas_is_divided_by_them():
    """Keras sums the replicas' gradients, so each replica's loss must be its
    share: its mean over real tokens divided by the number of replicas (what
    Keras' own losses do). Undivided, two workers reported twice the loss."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run(
        [sys.executable, "-c", TWO_REPLICAS],
        input=json.dumps([TARGETS.tolist(), LOGITS.tolist()]),
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
        env=dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    per_replica = json.loads(result.stdout.strip().splitlines()[-1])
    expected = [
        numpy_crossentropy(TARGETS[row : row + 1], LOGITS[row : row + 1]) / 2 for row in (0, 1)
    ]
    np.testing.assert_allclose(per_replica, expected, rtol=1e-5)


def test_accuracy_counts_real_tokens_only():
    logits = np.zeros((2, 4, 5), np.float32)
    logits[0, 0, 3] = logits[0, 1, 4] = 1.0  # right, wrong
    logits[1, :3, 2] = 1.0  # three right
    logits[:, 3, 0] = logits[0, 2, 0] = 1.0  # padding "right": must not count
    assert float(masked_accuracy(TARGETS, logits)) == pytest.approx(4 / 5)


def test_loss_config_round_trips():
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    again = MaskedSparseCategoricalCrossentropy.from_config(loss.get_config())
    assert again.label_smoothing == 0.1


def test_schedule_warms_up_linearly_then_decays_as_inverse_square_root():
    schedule = TransformerSchedule(d_model=256, warmup_steps=100)
    rates = np.array([float(schedule(step)) for step in range(400)])
    assert rates.argmax() == 99  # step 100 (1-based) is the peak
    np.testing.assert_allclose(rates[49] / rates[24], 2.0, rtol=1e-5)  # linear
    np.testing.assert_allclose(rates[399] / rates[99], 0.5, rtol=1e-5)  # 1/sqrt(4)
    assert rates[99] == pytest.approx(256**-0.5 * 100**-0.5, rel=1e-5)
    assert TransformerSchedule.from_config(schedule.get_config()).warmup_steps == 100
