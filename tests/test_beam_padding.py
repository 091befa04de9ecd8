"""Beam search pads every hypothesis after its first [END], in every beam and
every batch row, including hypotheses that finish at different steps.

A scripted decoder (anything with the `Seq2SeqTransformer` decoding methods
is a model to `beam_search`) makes the finishing steps differ on purpose; a
tiny random-weight `Seq2SeqTransformer` checks the same with real logits.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import beam_search
from tests.decoding_helpers import (
    assert_padded_after_end,
    push_end_until_ends_vary,
    random_sources,
    tiny_translator,
)

PAD, START, END = 0, 1, 2
VOCABULARY_SIZE = 12
MAX_LENGTH = 10


class ScriptedDecoder:
    """Logits from a fixed random table of (previous token -> next token), with
    [END] growing likelier after a step each source names (its first id), so
    rows, and beams of one row, finish at different steps. [PAD] and [START]
    are never proposed, so any 0 in an output is padding written by the search.
    The self cache is the token history, reordered by the search with its beams."""

    def __init__(self, seed=0):
        rng = np.random.default_rng(seed)
        table = rng.normal(scale=2.0, size=(VOCABULARY_SIZE, VOCABULARY_SIZE))
        table[:, [PAD, START]] = -30.0
        table[:, END] = rng.normal(scale=1.0, size=VOCABULARY_SIZE) - 2.0
        self.table = tf.constant(table, tf.float32)

    def encode(self, source_ids, training=None):
        return tf.cast(source_ids, tf.float32)[:, :, None], tf.not_equal(source_ids, 0)

    def initialize_cache(self, encoder_output, source_mask, max_length):
        rows = tf.shape(encoder_output)[0]
        history = tf.zeros([2, rows, max_length], tf.float32)
        return history, {"end_step": encoder_output[:, 0, 0]}

    def decode_step(self, token_ids, index, self_cache, step_constants):
        previous = token_ids[:, 0]
        written = tf.tensor_scatter_nd_update(
            tf.transpose(self_cache, [2, 0, 1]),
            [[index]],
            tf.cast(tf.tile(previous[None, None], [1, 2, 1]), tf.float32),
        )
        self_cache = tf.transpose(written, [1, 2, 0])
        logits = tf.gather(self.table, previous)
        # [END] rises by 3 per step past the source's step.
        end_push = 3.0 * (tf.cast(index, tf.float32) - step_constants["end_step"])
        logits = logits + end_push[:, None] * tf.one_hot(END, VOCABULARY_SIZE)[None, :]
        return logits, self_cache


# First ids name the step at which [END] takes over (the rest is padding and filler).
SOURCES = np.array([[1, 5, 6], [3, 0, 0], [5, 7, 0], [7, 9, 9], [20, 4, 0], [2, 0, 0]], np.int32)


@pytest.mark.parametrize("beam_width", [2, 4])
def test_every_beam_is_padded_after_its_first_end(beam_width):
    model = ScriptedDecoder()
    sequences, scores = beam_search(
        model,
        tf.constant(SOURCES),
        MAX_LENGTH,
        START,
        END,
        beam_width=beam_width,
        return_all_beams=True,
    )
    sequences = sequences.numpy()
    assert sequences.shape == (len(SOURCES), beam_width, MAX_LENGTH)
    end_positions = assert_padded_after_end(sequences, END)
    # What the script promises: some hypotheses finish early, at several different
    # steps, beams of one row among them, and a source with a late step never finishes.
    finished = end_positions[end_positions >= 0]
    assert len(set(finished.tolist())) >= 3, end_positions
    assert finished.min() < MAX_LENGTH // 2, end_positions
    per_row = end_positions.reshape(len(SOURCES), beam_width)
    assert any(len(set(row.tolist())) > 1 for row in per_row), per_row
    assert (per_row[4] == -1).any(), per_row
    # Before [END], only real tokens (the script never proposes [PAD] or [START]).
    for row, end in zip(sequences.reshape(-1, MAX_LENGTH), end_positions):
        stop = end if end >= 0 else MAX_LENGTH
        assert (row[:stop] > START).all() and (row[:stop] != END).all(), row

    best, best_scores = beam_search(
        model, tf.constant(SOURCES), MAX_LENGTH, START, END, beam_width=beam_width
    )
    assert_padded_after_end(best.numpy(), END)
    np.testing.assert_allclose(best_scores.numpy(), scores.numpy()[:, 0], rtol=1e-6)


def test_a_row_finishing_first_stays_padded_while_the_others_decode():
    """One row ends at its first step, another decodes to the last step: the early
    row's beams gain no token in the steps the loop still runs for the other."""
    sources = np.array([[-5, 0], [30, 0]], np.int32)
    sequences, _ = beam_search(
        ScriptedDecoder(seed=1),
        tf.constant(sources),
        MAX_LENGTH,
        START,
        END,
        beam_width=3,
        return_all_beams=True,
    )
    sequences = sequences.numpy()
    end_positions = assert_padded_after_end(sequences, END).reshape(2, 3)
    assert (end_positions[0] == 0).any(), sequences[0]
    assert (end_positions[1] == -1).all(), sequences[1]
    early = sequences[0][end_positions[0] == 0]
    assert (early[:, 1:] == PAD).all(), early


@pytest.fixture(scope="module")
def translator_ending_at_varied_steps():
    """A random-weight model whose hypotheses end at different steps, some never."""
    keras.utils.set_random_seed(11)
    return push_end_until_ends_vary(
        tiny_translator(),
        END,
        lambda model: beam_search(
            model,
            tf.constant(random_sources()),
            MAX_LENGTH,
            START,
            END,
            beam_width=3,
            return_all_beams=True,
        )[0].numpy(),
    )


def test_a_random_weight_transformers_beams_are_padded_after_end(translator_ending_at_varied_steps):
    sequences, _ = beam_search(
        translator_ending_at_varied_steps,
        tf.constant(random_sources()),
        MAX_LENGTH,
        START,
        END,
        beam_width=3,
        return_all_beams=True,
    )
    assert_padded_after_end(sequences.numpy(), END)
