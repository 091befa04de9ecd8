"""benchmarks/train_throughput.py: its FLOP count and its like-for-like models.

The benchmark's MFU is only as good as its FLOP count, and its ratios only mean
something if the models it compares have the same sizes. No timing here. The
benchmark itself checks, before timing, that the keras-hub classifier (a
benchmark-only dependency) has ours' weight shapes; here, the check and the
models that need no keras-hub.
"""

import math

import keras
import numpy as np
import pytest

if keras.backend.backend() != "tensorflow":
    pytest.skip("the benchmark runs on the TensorFlow backend", allow_module_level=True)

import train_throughput as bench

TINY_CLASSIFIER = dict(
    name="tiny", num_layers=2, d_model=16, num_heads=2, intermediate_dim=32, length=8, batch=3
)
TINY_SEQ2SEQ = dict(
    bench.seq2seq_config(8, 2),
    num_layers=2,
    d_model=16,
    num_heads=4,
    intermediate_dim=24,
    tutorial_key_dim=4,
)


def kernel_parameters(layer, where=lambda path: True):
    """Entries of the kernels (matmul weights) of `layer` whose path passes `where`."""
    return sum(
        math.prod(variable.shape)
        for variable in layer.trainable_variables
        if "kernel" in variable.path and where(variable.path)
    )


def test_classifier_flops_match_a_hand_count():
    # batch 2, length 4, d 8, 2 heads of 4, feed-forward 16, one layer, 3 classes.
    tokens = 2 * 4
    projections = 4 * (2 * tokens * 8 * 8)  # query, key, value, output
    attention = 2 * (2 * 2 * 4 * 4 * 8)  # QK^T and weights V: 2 * T * S * d each, per sequence
    feed_forward = 2 * tokens * 8 * 16 + 2 * tokens * 16 * 8
    head = 2 * 2 * 8 * 3  # on the pooled [batch, d] only
    forward = bench.classifier_forward_flops(2, 4, 8, 2, 16, 1, 3)
    assert forward == projections + attention + feed_forward + head == 9312
    assert bench.training_flops(forward) == 3 * 9312


def test_classifier_matmul_flops_are_twice_the_kernels_per_token_plus_attention():
    config = TINY_CLASSIFIER
    model = bench.build_classifier("ours", config)
    batch, length, width = config["batch"], config["length"], config["d_model"]
    blocks = sum(kernel_parameters(block) for block in model.encoder_blocks)
    attention = config["num_layers"] * bench.attention_flops(
        batch,
        length,
        length,
        config["num_heads"],
        width // config["num_heads"],
        width // config["num_heads"],
    )
    expected = 2 * batch * length * blocks + 2 * batch * kernel_parameters(model.head) + attention
    assert bench.classifier_flops(config) == 3 * expected


def test_seq2seq_matmul_flops_are_twice_the_kernels_per_token_plus_attention():
    config = TINY_SEQ2SEQ
    model = bench.build_seq2seq("ours", config)
    batch, length, width, heads = (
        config["batch"],
        config["length"],
        config["d_model"],
        config["num_heads"],
    )
    # Every kernel runs once per position (source or target: same length here),
    # the cross-attention's key and value on the source, the rest on the target.
    kernels = sum(kernel_parameters(block) for block in model.encoder_blocks + model.decoder_blocks)
    kernels += kernel_parameters(model.output_projection)
    per_layer_attention = 3 * bench.attention_flops(
        batch, length, length, heads, width // heads, width // heads
    )
    expected = 2 * batch * length * kernels + config["num_layers"] * per_layer_attention
    assert bench.seq2seq_flops(config, "ours") == 3 * expected


def test_the_keras_built_classifier_has_ours_weights():
    models = {kind: bench.build_classifier(kind, TINY_CLASSIFIER) for kind in ("ours", "keras")}
    assert bench.weight_shapes(models["keras"]) == bench.weight_shapes(models["ours"])
    bench.check_same_weight_shapes(models, "ours", ["keras"])


def test_the_like_for_like_check_refuses_a_model_of_other_sizes():
    # The app's translator is pre-norm: two more layer norms than ours post-norm.
    models = {
        kind: bench.build_seq2seq(kind, TINY_SEQ2SEQ) for kind in ("ours", "tutorial", "ours-app")
    }
    bench.check_same_weight_shapes(models, "ours", ["tutorial"])
    with pytest.raises(ValueError, match="ours-app does not have the weight shapes of ours"):
        bench.check_same_weight_shapes(models, "ours", ["tutorial", "ours-app"])
    # The KerasHub translator's position tables are the only shapes it may add.
    with pytest.raises(ValueError, match=r"only in ours: \[\(8, 16\)\]"):
        bench.check_same_weight_shapes(
            models, "ours", ["tutorial"], bench.peer_position_tables(TINY_SEQ2SEQ)
        )


def test_every_kind_of_seq2seq_trains_on_the_same_ids_under_its_own_input_names():
    batch_for = bench.seq2seq_batch(TINY_SEQ2SEQ, seed=0)
    (ours, ours_labels), (peer, peer_labels) = batch_for("ours-app"), batch_for("keras-hub")
    assert sorted(ours) == ["source_ids", "target_ids"]
    assert sorted(peer) == ["decoder_inputs", "encoder_inputs"]
    np.testing.assert_array_equal(ours["source_ids"], peer["encoder_inputs"])
    np.testing.assert_array_equal(ours["target_ids"], peer["decoder_inputs"])
    np.testing.assert_array_equal(ours_labels, peer_labels)


def test_tutorial_and_ours_seq2seq_have_the_same_weights_and_outputs_shape():
    models = {kind: bench.build_seq2seq(kind, TINY_SEQ2SEQ) for kind in ("ours", "tutorial")}
    shapes = {
        kind: sorted(tuple(v.shape) for v in model.trainable_variables)
        for kind, model in models.items()
    }
    assert shapes["tutorial"] == shapes["ours"]
    inputs, _ = bench.seq2seq_batch(TINY_SEQ2SEQ, seed=0)("ours")
    expected_shape = (TINY_SEQ2SEQ["batch"], TINY_SEQ2SEQ["length"], bench.VOCABULARY_SIZE)
    for model in models.values():
        logits = np.asarray(model(inputs))
        assert logits.shape == expected_shape
        assert np.all(np.isfinite(logits))
