"""What the decoding tests share, without TensorFlow: a tiny random-weight translator
whose hypotheses end at different steps, its sources, and the check that every
sequence is padded after its first `[END]`."""

import numpy as np
import pytest

from keras_transformer.models.seq2seq import Seq2SeqTransformer

PAD = 0


def tiny_translator():
    """A built one-block `Seq2SeqTransformer`: 20 source ids, 12 target ids, 12 positions."""
    model = Seq2SeqTransformer(
        20,
        12,
        sequence_length=12,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_model=16,
        num_heads=2,
        intermediate_dim=32,
        dropout=0.0,
    )
    model.build()
    return model


def push_end_until_ends_vary(model, end_id, decode, sharpening=4.0):
    """Makes a random-weight model's outputs end at different steps, some never.

    Sharpens its logits (`sharpening` times the output kernel) and raises the
    `[END]` bias until `decode(model)` (NumPy ids `[..., max_length]`) ends at
    two different steps at least and somewhere not at all. The fresh
    initialization never ends and a large bias ends everything at once; the
    bias in between depends on the initial weights, so it is searched for
    rather than fixed. Returns the model; fails the test if no bias in
    [0, 10) does it.
    """
    kernel, bias = model.output_projection.get_weights()
    for end_bias in np.arange(0.0, 10.0, 0.5):
        shifted = bias.copy()
        shifted[end_id] += end_bias
        model.output_projection.set_weights([kernel * sharpening, shifted])
        end_positions = first_end_positions(decode(model), end_id)
        finished = end_positions[end_positions >= 0]
        if len(set(finished.tolist())) >= 2 and (end_positions == -1).any():
            return model
    pytest.fail("no [END] bias in [0, 10) makes the random model's outputs end at different steps")


def random_sources():
    """8 sources of 7 ids, 0-padded to lengths 7, 1, 3, 5, 2, 7, 4 and 6."""
    rng = np.random.default_rng(0)
    sources = rng.integers(3, 20, size=(8, 7)).astype(np.int32)
    for row, length in enumerate([7, 1, 3, 5, 2, 7, 4, 6]):
        sources[row, length:] = 0
    return sources


def first_end_positions(sequences, end_id):
    """`[..., max_length]` -> each row's first `end_id` position, -1 where there is none."""
    rows = sequences.reshape(-1, sequences.shape[-1])
    return np.array(
        [np.flatnonzero(row == end_id)[0] if (row == end_id).any() else -1 for row in rows]
    )


def assert_padded_after_end(sequences, end_id):
    """`[..., max_length]`: after the first `end_id`, only padding; returns each row's
    `end_id` position (-1 if none)."""
    rows = sequences.reshape(-1, sequences.shape[-1])
    end_positions = first_end_positions(sequences, end_id)
    for row, first in zip(rows, end_positions):
        if first >= 0:
            assert (row[first + 1 :] == PAD).all(), f"tokens after [END] at {first}: {row.tolist()}"
    return end_positions
