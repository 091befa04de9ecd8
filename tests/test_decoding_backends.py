"""`beam_search_loop` and `sample_loop`, on every backend.

One tiny random-weight translator (its weights drawn by NumPy, the same on
every backend) whose hypotheses end at different steps, some never, and
with two tokens that always have equal logits, placed so that a beam of
width 3 must choose between them at its first step. `beam_search_loop` is
checked against `beam_search` (on TensorFlow) and, on every backend,
against a beam search written here from its definition; `sample_loop`'s
log-probabilities against distributions recomputed here.
"""

import keras
import numpy as np
import pytest

from keras_transformer.decoding import beam_search_loop, greedy_decode_loop, sample_loop
from tests.decoding_helpers import (
    PAD,
    assert_padded_after_end,
    first_end_positions,
    push_end_until_ends_vary,
    random_sources,
    tiny_translator,
)

START, END = 1, 2
# Two ids whose logits are always equal (zero output kernel columns, one bias).
TIED = (3, 4)
MAX_LENGTH = 7
BEAM_WIDTH = 3
SOURCES = random_sources()[:3]
# Every source BEAM_WIDTH times, for greedy decoding and sampling (three draws
# of each source a call): the beam search's batch size, since on JAX every new
# batch size compiles every step again.
REPEATED_SOURCES = np.repeat(SOURCES, BEAM_WIDTH, axis=0)
# Two hypotheses whose log-probabilities are closer than this but not equal
# could rank differently here and in the code under test (float32 against
# float64): the fixture fails rather than the comparison.
NEAR_TIE = 1e-4

on_tensorflow_only = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="beam_search is TensorFlow ops"
)


def next_token_log_probs(model, sources, prefixes):
    """float64 `[rows, V]`: log P(next token | source, `[START]` + prefix), the model's
    `decode_step` fed the whole prefix from a fresh cache."""
    ops = keras.ops
    encoder_output, source_mask = model.encode(ops.convert_to_tensor(sources), training=False)
    self_cache, step_constants = model.initialize_cache(encoder_output, source_mask, MAX_LENGTH)
    inputs = np.array([(START, *prefix) for prefix in prefixes], np.int32)
    for index in range(inputs.shape[1]):
        logits, self_cache = model.decode_step(
            ops.convert_to_tensor(inputs[:, index : index + 1]), index, self_cache, step_constants
        )
    logits = np.asarray(ops.convert_to_numpy(logits), np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def gnmt_score(log_prob, length, length_penalty):
    """Wu et al. (2016)'s length normalization, written out here rather than taken from
    the code under test."""
    return log_prob / ((5.0 + length) / 6.0) ** length_penalty


def ranked_apart_from_near_ties(candidates, cut=None):
    """`candidates` (log-probability or score first) best first; equal ones keep their
    order (Python's sort is stable: the earlier beam, then the lower token id). Fails
    where two that are not equal are too close to rank the same way in float32; with
    `cut`, only around that rank. Returns (ranked, whether equal ones straddle the cut)."""
    ranked = sorted(candidates, key=lambda candidate: -candidate[0])
    pairs = range(len(ranked) - 1) if cut is None else [cut - 1] if cut < len(ranked) else []
    for rank in pairs:
        gap = ranked[rank][0] - ranked[rank + 1][0]
        if 0 < gap < NEAR_TIE:
            pytest.fail(f"a near tie ({gap:.1e}) the fixture should not have: choose other seeds")
    tie_at_cut = cut is not None and cut < len(ranked) and ranked[cut - 1][0] == ranked[cut][0]
    return ranked, tie_at_cut


def reference_beam_search(model, sources, beam_width):
    """Beam search from its definition, apart from the code under test: every hypothesis
    a tuple of tokens rescored from scratch at each step, never a reordered cache.

    Returns every source's last hypotheses, `(log-probability, tokens, finished)`
    in the order of the last step's choice, and how many choices of a step had
    two equal candidates on either side of the cut. The length penalty only
    ranks what the search kept (`ranked_by_score`).
    """
    # A finished hypothesis gains [PAD] at no cost.
    beams = [[(0.0, (), False)] for _ in sources]
    ties_at_cut = 0
    for _ in range(MAX_LENGTH):
        if all(finished for source_beams in beams for _, _, finished in source_beams):
            break
        rows = [(source, tokens) for source, b in enumerate(beams) for _, tokens, _ in b]
        # Filler rows (never read) keep one batch size from the first step on.
        rows += [rows[0]] * (len(sources) * beam_width - len(rows))
        log_probs = iter(
            next_token_log_probs(
                model, sources[[source for source, _ in rows]], [tokens for _, tokens in rows]
            )
        )
        for source, source_beams in enumerate(beams):
            candidates = []
            for log_prob, tokens, finished in source_beams:
                step = next(log_probs)
                if finished:
                    candidates.append((log_prob, (*tokens, PAD), True))
                    continue
                for token, token_log_prob in enumerate(step):
                    candidates.append((log_prob + token_log_prob, (*tokens, token), token == END))
            ranked, tie_at_cut = ranked_apart_from_near_ties(candidates, cut=beam_width)
            beams[source] = ranked[:beam_width]
            ties_at_cut += tie_at_cut
    return beams, ties_at_cut


def ranked_by_score(beams, length_penalty):
    """`reference_beam_search`'s hypotheses best first: ids `[B, beam_width, MAX_LENGTH]`
    and scores `[B, beam_width]` (float64)."""
    beam_width = len(beams[0])
    sequences = np.zeros((len(beams), beam_width, MAX_LENGTH), np.int32)
    scores = np.zeros((len(beams), beam_width))
    for source, source_beams in enumerate(beams):
        scored = []
        for log_prob, tokens, finished in source_beams:
            length = tokens.index(END) + 1 if finished else len(tokens)
            scored.append((gnmt_score(log_prob, length, length_penalty), tokens))
        ranked, _ = ranked_apart_from_near_ties(scored)
        for beam, (score, tokens) in enumerate(ranked):
            sequences[source, beam, : len(tokens)] = tokens
            scores[source, beam] = score
    return sequences, scores


def tie_at_the_first_cut(model, beam_width):
    """Gives `TIED` zero output kernel columns and one bias, between the logits ranked
    `beam_width - 1` and `beam_width` of the first source's first step: a beam of
    `beam_width` keeps one of the two there, the lower id as `tf.math.top_k` does."""
    kernel, bias = model.output_projection.get_weights()
    kernel[:, TIED] = 0.0
    model.output_projection.set_weights([kernel, bias])
    first_step = next_token_log_probs(model, REPEATED_SOURCES, [()] * len(REPEATED_SOURCES))[0]
    # Log-probabilities of one step differ from logits by one constant.
    logits = first_step - first_step[TIED[0]] + bias[TIED[0]]
    others = np.sort(np.delete(logits, TIED))[::-1]
    bias[list(TIED)] = (others[beam_width - 2] + others[beam_width - 1]) / 2
    model.output_projection.set_weights([kernel, bias])
    return model


@pytest.fixture(scope="module")
def seq2seq(randomize):
    model = tiny_translator()
    randomize(model, seed=5, scale=0.3)
    push_end_until_ends_vary(
        model,
        END,
        lambda model: greedy_decode_loop(model, REPEATED_SOURCES, MAX_LENGTH, START, END),
    )
    return tie_at_the_first_cut(model, BEAM_WIDTH)


@pytest.fixture(scope="module")
def reference(seq2seq):
    """`reference_beam_search` of SOURCES with width 3."""
    return reference_beam_search(seq2seq, SOURCES, BEAM_WIDTH)


@pytest.fixture(scope="module")
def greedy(seq2seq):
    """`greedy_decode_loop` of REPEATED_SOURCES."""
    return greedy_decode_loop(seq2seq, REPEATED_SOURCES, MAX_LENGTH, START, END)


@on_tensorflow_only
@pytest.mark.parametrize("beam_width, length_penalty", [(3, 0.6), (2, 0.0)])
def test_beam_search_loop_gives_beam_searchs_hypotheses(seq2seq, beam_width, length_penalty):
    import tensorflow as tf

    from keras_transformer.decoding import beam_search

    for return_all_beams in (True, False):
        arguments = (MAX_LENGTH, START, END, beam_width, length_penalty, return_all_beams)
        expected_ids, expected_scores = beam_search(seq2seq, tf.constant(SOURCES), *arguments)
        ids, scores = beam_search_loop(seq2seq, SOURCES, *arguments)
        assert ids.dtype == np.int32 and scores.dtype == np.float32
        np.testing.assert_array_equal(ids, expected_ids.numpy())
        np.testing.assert_allclose(scores, expected_scores.numpy(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("length_penalty", [0.6, 1.5])
def test_beam_search_loop_equals_a_beam_search_from_its_definition(
    seq2seq, reference, length_penalty
):
    beams, ties_at_cut = reference
    expected_ids, expected_scores = ranked_by_score(beams, length_penalty)
    # What the fixture promises: a choice between equal candidates, and
    # hypotheses that end at different steps, some never.
    assert ties_at_cut >= 1
    end_positions = first_end_positions(expected_ids, END)
    assert len(set(end_positions[end_positions >= 0].tolist())) >= 2, end_positions
    assert (end_positions == -1).any(), end_positions

    arguments = (MAX_LENGTH, START, END, BEAM_WIDTH, length_penalty)
    ids, scores = beam_search_loop(seq2seq, SOURCES, *arguments, return_all_beams=True)
    assert ids.shape == (len(SOURCES), BEAM_WIDTH, MAX_LENGTH)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-5)
    assert (np.diff(scores, axis=1) <= 0).all(), scores  # best first
    best_ids, best_scores = beam_search_loop(seq2seq, SOURCES, *arguments)
    assert best_ids.shape == (len(SOURCES), MAX_LENGTH) and best_scores.shape == (len(SOURCES),)
    np.testing.assert_array_equal(best_ids, expected_ids[:, 0])
    np.testing.assert_allclose(best_scores, expected_scores[:, 0], rtol=1e-5, atol=1e-5)


def test_beam_width_one_is_greedy_decode_loop(seq2seq, greedy):
    ids, _ = beam_search_loop(seq2seq, REPEATED_SOURCES, MAX_LENGTH, START, END, beam_width=1)
    np.testing.assert_array_equal(ids, greedy)


class EndingByStep:
    """A model's decoding methods with `[END]` all but certain from step `last` on,
    counting the steps decoded."""

    def __init__(self, model, last):
        self.model = model
        self.last = last
        self.steps = 0
        self.end_push = np.zeros(model.target_vocabulary_size, np.float32)
        self.end_push[END] = 100.0

    def encode(self, *args, **kwargs):
        return self.model.encode(*args, **kwargs)

    def initialize_cache(self, *args):
        return self.model.initialize_cache(*args)

    def decode_step(self, token_ids, index, self_cache, step_constants):
        self.steps += 1
        logits, self_cache = self.model.decode_step(token_ids, index, self_cache, step_constants)
        if index >= self.last:
            logits = logits + keras.ops.convert_to_tensor(self.end_push)
        return logits, self_cache


def test_the_loops_stop_once_every_sequence_has_ended(seq2seq):
    model = EndingByStep(seq2seq, last=3)
    ids, _ = beam_search_loop(
        model, SOURCES, MAX_LENGTH, START, END, BEAM_WIDTH, return_all_beams=True
    )
    end_positions = first_end_positions(ids, END)
    assert (end_positions >= 0).all() and end_positions.max() <= 3, end_positions
    assert model.steps == end_positions.max() + 1 < MAX_LENGTH

    model = EndingByStep(seq2seq, last=3)
    ids, _ = sample_loop(model, REPEATED_SOURCES, MAX_LENGTH, START, END, seed=0)
    end_positions = first_end_positions(ids, END)
    assert (end_positions >= 0).all() and end_positions.max() <= 3, end_positions
    assert model.steps == end_positions.max() + 1 < MAX_LENGTH


def test_an_empty_batch_decodes_to_empty_arrays(seq2seq):
    ids, scores = beam_search_loop(seq2seq, SOURCES[:0], MAX_LENGTH, START, END, BEAM_WIDTH)
    assert ids.shape == (0, MAX_LENGTH) and scores.shape == (0,)
    ids, log_probs = sample_loop(seq2seq, SOURCES[:0], MAX_LENGTH, START, END, seed=0)
    assert ids.shape == (0, MAX_LENGTH) and log_probs.shape == (0,)


def filtered_distribution(logits, temperature, top_k, top_p):
    """The distribution `sample_loop` draws from after `logits` (float64 `[V]`), as
    `{token: probability}` over the tokens it keeps, written token by token here."""
    probabilities = np.exp(logits / temperature - (logits / temperature).max())
    probabilities /= probabilities.sum()
    ranked = sorted(range(len(logits)), key=lambda token: (-logits[token], token))
    kept = ranked[:top_k] if top_k else ranked
    kept_mass = sum(probabilities[token] for token in kept)
    nucleus, mass = [], 0.0
    for token in kept:
        nucleus.append(token)
        mass += probabilities[token] / kept_mass
        if top_p < 1 and mass >= top_p:
            break
    nucleus_mass = sum(probabilities[token] for token in nucleus)
    return {token: probabilities[token] / nucleus_mass for token in nucleus}


def teacher_forced_logits(model, sources, ids):
    """float64 `[B, max_length, V]`: the logits of every step, the model fed `ids`."""
    ops = keras.ops
    encoder_output, source_mask = model.encode(ops.convert_to_tensor(sources), training=False)
    self_cache, step_constants = model.initialize_cache(encoder_output, source_mask, MAX_LENGTH)
    inputs = np.concatenate([np.full((len(ids), 1), START, np.int32), ids[:, :-1]], axis=1)
    steps = []
    for index in range(ids.shape[1]):
        logits, self_cache = model.decode_step(
            ops.convert_to_tensor(inputs[:, index : index + 1]), index, self_cache, step_constants
        )
        steps.append(np.asarray(ops.convert_to_numpy(logits), np.float64))
    return np.stack(steps, axis=1)


def test_a_seed_draws_the_same_ids_and_another_seed_others(seq2seq):
    def draw(seed):
        return sample_loop(
            seq2seq, REPEATED_SOURCES, MAX_LENGTH, START, END, temperature=1.5, seed=seed
        )

    ids, log_probs = draw(0)
    again_ids, again_log_probs = draw(0)
    np.testing.assert_array_equal(again_ids, ids)
    np.testing.assert_array_equal(again_log_probs, log_probs)
    assert (draw(1)[0] != ids).any()


@pytest.mark.parametrize(
    "temperature, top_k, top_p", [(1.0, 1, 1.0), (2.0, 1, 0.5), (1.0, 0, 1e-6), (0.5, 5, 1e-6)]
)
def test_keeping_only_the_most_probable_token_is_greedy(seq2seq, greedy, temperature, top_k, top_p):
    ids, log_probs = sample_loop(
        seq2seq, REPEATED_SOURCES, MAX_LENGTH, START, END, temperature, top_k, top_p, seed=3
    )
    np.testing.assert_array_equal(ids, greedy)
    # Scored by the model, not by the one-token distribution drawn from (log 1 = 0).
    logits = teacher_forced_logits(seq2seq, REPEATED_SOURCES, ids)
    log_softmax = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    ended = np.cumsum(ids == END, axis=1) - (ids == END)  # 1 after each row's first [END]
    chosen = np.take_along_axis(log_softmax, ids[..., None], axis=-1)[..., 0]
    expected = np.where(ended > 0, 0.0, chosen).sum(axis=1)
    np.testing.assert_allclose(log_probs, expected, rtol=1e-5, atol=1e-5)
    assert (log_probs < 0).all()


@pytest.mark.parametrize(
    "temperature, top_k, top_p", [(1.0, 0, 1.0), (0.7, 4, 1.0), (1.3, 0, 0.8), (1.0, 5, 0.6)]
)
def test_draws_are_in_the_filtered_distribution_and_scored_by_the_model(
    seq2seq, temperature, top_k, top_p
):
    ids, log_probs = sample_loop(
        seq2seq, REPEATED_SOURCES, MAX_LENGTH, START, END, temperature, top_k, top_p, seed=4
    )
    assert ids.dtype == np.int32 and ids.shape == (len(REPEATED_SOURCES), MAX_LENGTH)
    assert log_probs.dtype == np.float32 and log_probs.shape == (len(REPEATED_SOURCES),)
    end_positions = assert_padded_after_end(ids, END)
    logits = teacher_forced_logits(seq2seq, REPEATED_SOURCES, ids)
    kept_sizes = set()
    for row, end in enumerate(end_positions):
        expected = 0.0
        for index in range(MAX_LENGTH if end < 0 else end + 1):
            distribution = filtered_distribution(logits[row, index], temperature, top_k, top_p)
            kept_sizes.add(len(distribution))
            assert ids[row, index] in distribution, (row, index, distribution)
            step_logits = logits[row, index]
            model_probabilities = np.exp(step_logits - step_logits.max())
            model_probabilities /= model_probabilities.sum()
            expected += np.log(model_probabilities[ids[row, index]])
        assert log_probs[row] == pytest.approx(expected, rel=1e-5, abs=1e-5), row
    # The filters kept more than one token somewhere and, when asked, fewer than all.
    assert max(kept_sizes) > 1
    vocabulary_size = seq2seq.target_vocabulary_size
    assert (max(kept_sizes) == vocabulary_size) == (top_k == 0 and top_p == 1.0), kept_sizes


def test_every_sampled_row_is_padded_after_its_first_end(seq2seq):
    ids, _ = sample_loop(seq2seq, REPEATED_SOURCES, MAX_LENGTH, START, END, seed=0)
    end_positions = assert_padded_after_end(ids, END)
    # Rows that end at different steps, and rows that never do.
    assert len(set(end_positions[end_positions >= 0].tolist())) >= 2, end_positions
    assert (end_positions == -1).any(), end_positions


@pytest.mark.parametrize(
    "arguments, name",
    [
        ({"temperature": 0.0}, "temperature"),
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_k": -1}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_length": 0}, "max_length"),
    ],
)
def test_bad_sampling_arguments_raise_naming_the_argument(seq2seq, arguments, name):
    arguments = {"max_length": MAX_LENGTH, **arguments}
    with pytest.raises(ValueError, match=f"`{name}`"):
        sample_loop(seq2seq, SOURCES, start_id=START, end_id=END, **arguments)


def test_a_zero_temperature_points_to_greedy_decoding(seq2seq):
    with pytest.raises(ValueError, match="greedy"):
        sample_loop(seq2seq, SOURCES, MAX_LENGTH, START, END, temperature=0.0)


@pytest.mark.parametrize("beam_width", [0, 1.5])
def test_a_bad_beam_width_raises_naming_it(seq2seq, beam_width):
    with pytest.raises(ValueError, match="`beam_width`"):
        beam_search_loop(seq2seq, SOURCES, MAX_LENGTH, START, END, beam_width=beam_width)
