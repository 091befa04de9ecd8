"""Greedy and beam search over the cached decoder (keras_transformer.decoding)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import beam_search, greedy_decode
from keras_transformer.models.seq2seq import Seq2SeqTransformer

START, END = 4, 5
MAX_LENGTH = 8
SHARPENING = 2.0
SOURCES = np.array([[5, 6, 7, 8, 9, 10], [9, 3, 0, 0, 0, 0], [7, 7, 7, 7, 0, 0]], np.int32)


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(3)
    model = Seq2SeqTransformer(
        30,
        12,
        sequence_length=16,
        num_encoder_layers=2,
        num_decoder_layers=2,
        d_model=32,
        num_heads=4,
        intermediate_dim=64,
        dropout=0.0,
    )
    model.build()
    # Sharper logits than the initialization gives, and the smallest push
    # towards [END] at which greedy decoding ends some sequences but not all
    # at once, so that [END] is chosen somewhere and hypotheses differ in
    # length (a random initialization alone rarely picks [END]).
    kernel, bias = model.output_projection.get_weights()
    for end_bias in np.arange(0.0, 20.0, 0.25):
        pushed = bias.copy()
        pushed[END] += end_bias
        model.output_projection.set_weights([kernel * SHARPENING, pushed])
        tokens = greedy_decode(model, SOURCES, MAX_LENGTH, START, END).numpy()
        ends = {list(row).index(END) if END in row else None for row in tokens}
        if len(ends) > 1 and ends != {None}:
            return model
    raise AssertionError("no push towards [END] gives sequences of different lengths")


@pytest.fixture(scope="module")
def greedy(model):
    """`greedy_decode` of SOURCES, eager, once for the tests that compare with it."""
    return greedy_decode(model, SOURCES, MAX_LENGTH, START, END).numpy()


def uncached_greedy(model, sources, max_length):
    """Recomputes the whole decoder prefix each step, as the TensorFlow tutorial does."""
    encoder_output, source_mask = model.encode(sources)
    prefix = np.full((len(sources), 1), START, np.int32)
    finished = np.zeros(len(sources), bool)
    generated = []
    for _ in range(max_length):
        logits = keras.ops.convert_to_numpy(model.decode(prefix, encoder_output, source_mask))
        next_tokens = np.where(finished, 0, logits[:, -1].argmax(-1)).astype(np.int32)
        generated.append(next_tokens)
        finished |= next_tokens == END
        prefix = np.concatenate([prefix, next_tokens[:, None]], axis=1)
        if finished.all():
            break
    generated = np.stack(generated, axis=1)
    return np.pad(generated, [[0, 0], [0, max_length - generated.shape[1]]])


def sequence_score(model, source, sequence, length_penalty):
    """The model's length-normalized log-probability of `sequence` (up to [END])."""
    tokens = list(sequence)
    length = tokens.index(END) + 1 if END in tokens else len(tokens)
    tokens = tokens[:length]
    encoder_output, source_mask = model.encode(source[None])
    target_in = np.array([[START] + tokens[:-1]], np.int32)
    logits = keras.ops.convert_to_numpy(model.decode(target_in, encoder_output, source_mask))[0]
    log_probs = (
        logits
        - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - logits.max(-1, keepdims=True)
    )
    total = sum(log_probs[position, token] for position, token in enumerate(tokens))
    # GNMT's penalty, written out here rather than taken from the code under test.
    return float(total / ((5.0 + length) / 6.0) ** length_penalty)


def test_cached_greedy_equals_uncached_greedy(model, greedy):
    np.testing.assert_array_equal(greedy, uncached_greedy(model, SOURCES, MAX_LENGTH))
    assert greedy.shape == (len(SOURCES), MAX_LENGTH)


def test_greedy_stops_each_sequence_at_end_and_pads_after_it(greedy):
    assert (greedy == END).any(), "the fixture should make [END] appear somewhere"
    for row in greedy:
        if END in row:
            assert not row[list(row).index(END) + 1 :].any()


def test_beam_width_one_is_greedy(model, greedy):
    beam, _ = beam_search(model, SOURCES, MAX_LENGTH, START, END, beam_width=1)
    np.testing.assert_array_equal(beam.numpy(), greedy)


@pytest.mark.parametrize("length_penalty", [0.0, 0.6])
def test_beam_score_is_the_models_score_of_the_returned_sequence(model, greedy, length_penalty):
    sequences, scores = beam_search(
        model, SOURCES, MAX_LENGTH, START, END, beam_width=4, length_penalty=length_penalty
    )
    for source, sequence, score, greedy_sequence in zip(
        SOURCES, sequences.numpy(), scores.numpy(), greedy
    ):
        assert score == pytest.approx(
            sequence_score(model, source, sequence, length_penalty), abs=1e-3
        )
        # The greedy path is one of the hypotheses a width-4 beam explores
        # first; the beam's answer scores at least as well here.
        assert score >= sequence_score(model, source, greedy_sequence, length_penalty) - 1e-3


def test_every_beam_is_scored_as_the_model_scores_it(model):
    # Every hypothesis, not only the best: a beam whose cache followed the
    # wrong parent would be scored with another hypothesis' prefix.
    sequences, scores = beam_search(
        model,
        SOURCES,
        MAX_LENGTH,
        START,
        END,
        beam_width=4,
        length_penalty=0.6,
        return_all_beams=True,
    )
    assert sequences.shape == (len(SOURCES), 4, MAX_LENGTH)
    for source, beams, beam_scores in zip(SOURCES, sequences.numpy(), scores.numpy()):
        assert list(beam_scores) == sorted(beam_scores, reverse=True)
        assert len({tuple(beam) for beam in beams}) == 4  # distinct hypotheses
        for beam, score in zip(beams, beam_scores):
            assert score == pytest.approx(sequence_score(model, source, beam, 0.6), abs=1e-3)


def test_a_batch_mixing_short_and_long_sources_decodes_each_as_alone(model, greedy):
    together, _ = beam_search(model, SOURCES, MAX_LENGTH, START, END, beam_width=3)
    for index, source in enumerate(SOURCES):
        length = int((source != 0).sum())
        alone, _ = beam_search(model, source[None, :length], MAX_LENGTH, START, END, beam_width=3)
        np.testing.assert_array_equal(alone.numpy()[0], together.numpy()[index])
        greedy_alone = greedy_decode(model, source[None, :length], MAX_LENGTH, START, END).numpy()
        np.testing.assert_array_equal(greedy_alone[0], greedy[index])


def test_an_empty_source_decodes_the_same_in_any_batch(model):
    # An empty text tokenizes to padding only: its cross-attention attends
    # nowhere, whatever the width the rest of the batch pads it to.
    with_empty = np.concatenate([SOURCES, np.zeros((1, SOURCES.shape[1]), np.int32)])
    empty = np.zeros((1, 1), np.int32)
    np.testing.assert_array_equal(
        greedy_decode(model, with_empty, MAX_LENGTH, START, END).numpy()[-1],
        greedy_decode(model, empty, MAX_LENGTH, START, END).numpy()[0],
    )
    together, _ = beam_search(model, with_empty, MAX_LENGTH, START, END, beam_width=3)
    alone, _ = beam_search(model, empty, MAX_LENGTH, START, END, beam_width=3)
    np.testing.assert_array_equal(together.numpy()[-1], alone.numpy()[0])


def test_decoding_traces_with_unknown_batch_and_source_length(model, greedy):
    signature = [tf.TensorSpec([None, None], tf.int32)]
    traced_greedy = tf.function(
        lambda ids: greedy_decode(model, ids, MAX_LENGTH, START, END), input_signature=signature
    )
    beam = tf.function(
        lambda ids: beam_search(model, ids, MAX_LENGTH, START, END, beam_width=2)[0],
        input_signature=signature,
    )
    np.testing.assert_array_equal(traced_greedy(tf.constant(SOURCES)).numpy(), greedy)
    assert beam(tf.constant(SOURCES[:1, :2])).shape == (1, MAX_LENGTH)
