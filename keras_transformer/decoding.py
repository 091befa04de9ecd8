"""Greedy decoding, beam search and sampling over a cached decoder.

Which function runs where:

* `greedy_decode`, `beam_search` and `sample_decode`: TensorFlow ops only
  (the export's signatures). Each runs the encoder once per batch and then
  one decoder position per step (`model.decode_step` with each block's
  key/value cache), inside one `tf.while_loop` with fixed-shape state, so
  they trace into a SavedModel and stop as soon as every sequence has
  produced `[END]`.
* `greedy_decode_loop`, `beam_search_loop` and `sample_loop`: any Keras
  backend (TensorFlow, JAX, PyTorch), returning NumPy arrays. The model runs
  in `keras.ops`, one Python step at a time, and the choice of tokens is NumPy
  bookkeeping. `greedy_decode_loop` and `beam_search_loop` give
  `greedy_decode`'s and `beam_search`'s tokens, for training and evaluation
  where TensorFlow is not; `sample_loop` draws from the model's distribution
  (temperature, top-k, nucleus), the same draws on every backend for a seed.

`model` is anything with the `Seq2SeqTransformer` decoding methods:
`encode(source_ids)`, `initialize_cache(encoder_output, source_mask, max_length)`
and `decode_step(token_ids, index, self_cache, step_constants)`,
where `step_constants` is what every step reads unchanged (computed once,
outside the loop).
"""

import math
import numbers

import keras
import numpy as np

from keras_transformer.layers.masks import MASKED_LOGIT


def greedy_decode(model, source_ids, max_length, start_id, end_id):
    """Most probable next token at every step.

    Args:
        model: a `Seq2SeqTransformer` (or anything with its decoding methods).
        source_ids: int `[B, S]`, 0-padded.
        max_length: most tokens to generate (`[END]` included).
        start_id, end_id: the target's `[START]` and `[END]` ids.

    Returns:
        int32 `[B, max_length]`: generated ids, `[END]` included, 0 after it.
    """
    import tensorflow as tf

    encoder_output, source_mask = model.encode(source_ids, training=False)
    self_cache, step_constants = model.initialize_cache(encoder_output, source_mask, max_length)
    batch_size = tf.shape(source_ids)[0]
    tokens = tf.fill([batch_size], tf.constant(start_id, tf.int32))
    finished = tf.zeros([batch_size], tf.bool)
    # A fixed [max_length, B] buffer (not a TensorArray) so that an empty batch,
    # which ends the loop before its first step, still stacks to [0, max_length].
    outputs = tf.zeros([max_length, batch_size], tf.int32)

    def keep_going(index, tokens, finished, self_cache, outputs):
        return tf.logical_and(index < max_length, tf.logical_not(tf.reduce_all(finished)))

    def step(index, tokens, finished, self_cache, outputs):
        logits, self_cache = model.decode_step(tokens[:, None], index, self_cache, step_constants)
        next_tokens = tf.argmax(logits, axis=-1, output_type=tf.int32)
        next_tokens = tf.where(finished, 0, next_tokens)
        outputs = tf.tensor_scatter_nd_update(outputs, [[index]], next_tokens[None])
        finished = tf.logical_or(finished, tf.equal(next_tokens, end_id))
        return index + 1, next_tokens, finished, self_cache, outputs

    _, _, _, _, outputs = tf.while_loop(
        keep_going, step, (tf.constant(0), tokens, finished, self_cache, outputs)
    )
    return tf.transpose(outputs)


def greedy_decode_loop(model, source_ids, max_length, start_id, end_id):
    """`greedy_decode` on any Keras backend: the same tokens, one Python step at a time.

    Takes and returns what `greedy_decode` does, the ids as a NumPy int32
    `[B, max_length]` array. Stops once every row has produced `[END]`.
    """
    ops = keras.ops
    encoder_output, source_mask = model.encode(
        ops.convert_to_tensor(source_ids, "int32"), training=False
    )
    self_cache, step_constants = model.initialize_cache(encoder_output, source_mask, max_length)
    batch_size = int(ops.shape(encoder_output)[0])
    tokens = np.full([batch_size], start_id, np.int32)
    finished = np.zeros([batch_size], bool)
    outputs = np.zeros([batch_size, max_length], np.int32)
    for index in range(max_length):
        if finished.all():
            break
        logits, self_cache = model.decode_step(
            ops.convert_to_tensor(tokens[:, None]), index, self_cache, step_constants
        )
        tokens = np.where(finished, 0, ops.convert_to_numpy(ops.argmax(logits, axis=-1))).astype(
            np.int32
        )
        outputs[:, index] = tokens
        finished |= tokens == end_id
    return outputs


def beam_search(
    model,
    source_ids,
    max_length,
    start_id,
    end_id,
    beam_width=4,
    length_penalty=0.6,
    return_all_beams=False,
):
    """Keeps the `beam_width` most probable prefixes of every source.

    Hypotheses are ranked, when finished and at the end, by
    `log P(y) / ((5 + |y|) / 6) ** length_penalty` (Wu et al., 2016), where
    `|y|` counts generated tokens up to and including `[END]`. A finished
    hypothesis stays in its beam with its score frozen.

    Args:
        model, source_ids, max_length, start_id, end_id: as `greedy_decode`.
        beam_width: hypotheses kept per source; 1 is greedy decoding.
        length_penalty: 0 ranks by total log-probability, which favours
            short outputs; higher values favour longer ones.
        return_all_beams: return every hypothesis, best first.

    Returns:
        (int32 `[B, max_length]` best hypothesis per source, float32 `[B]`
        its length-normalized score); with `return_all_beams`,
        `[B, beam_width, max_length]` and `[B, beam_width]`.
    """
    import tensorflow as tf

    encoder_output, source_mask = model.encode(source_ids, training=False)
    batch_size = tf.shape(source_ids)[0]
    flat_size = batch_size * beam_width
    # Every beam of a source starts from the same encoder output.
    encoder_output = tf.repeat(encoder_output, beam_width, axis=0)
    source_mask = tf.repeat(source_mask, beam_width, axis=0)
    self_cache, step_constants = model.initialize_cache(encoder_output, source_mask, max_length)

    # Only the first beam is live at the start, so the first step does not
    # pick the same token beam_width times.
    log_probs = tf.tile(
        tf.concat([[0.0], tf.fill([beam_width - 1], MASKED_LOGIT)], axis=0)[None, :],
        [batch_size, 1],
    )
    tokens = tf.fill([flat_size], tf.constant(start_id, tf.int32))
    sequences = tf.zeros([batch_size, beam_width, max_length], tf.int32)
    finished = tf.zeros([batch_size, beam_width], tf.bool)
    lengths = tf.zeros([batch_size, beam_width], tf.int32)

    def keep_going(index, tokens, log_probs, sequences, finished, lengths, self_cache):
        return tf.logical_and(index < max_length, tf.logical_not(tf.reduce_all(finished)))

    def step(index, tokens, log_probs, sequences, finished, lengths, self_cache):
        logits, self_cache = model.decode_step(tokens[:, None], index, self_cache, step_constants)
        log_probs, parent, next_tokens = _extend_beams(
            log_probs, logits, finished, batch_size, beam_width
        )
        sequences, finished, lengths = _follow_parents(
            parent, next_tokens, index, sequences, finished, lengths, end_id
        )
        # Reorder every cache to follow its hypothesis' parent beam.
        parent_rows = tf.reshape(parent + tf.range(batch_size)[:, None] * beam_width, [-1])
        # Caches are [2 (keys, values), B * beam_width, ...].
        self_cache = tf.nest.map_structure(
            lambda cache: tf.gather(cache, parent_rows, axis=1), self_cache
        )
        return (
            index + 1,
            tf.reshape(next_tokens, [-1]),
            log_probs,
            sequences,
            finished,
            lengths,
            self_cache,
        )

    _, _, log_probs, sequences, finished, lengths, _ = tf.while_loop(
        keep_going,
        step,
        (tf.constant(0), tokens, log_probs, sequences, finished, lengths, self_cache),
    )
    scores = length_normalized(log_probs, lengths, length_penalty)
    if return_all_beams:
        scores, order = tf.math.top_k(scores, k=beam_width)
        return tf.gather(sequences, order, batch_dims=1), scores
    best = tf.argmax(scores, axis=-1, output_type=tf.int32)
    return tf.gather(sequences, best, batch_dims=1), tf.gather(scores, best, batch_dims=1)


def _extend_beams(log_probs, logits, finished, batch_size, beam_width):
    """One beam search step's choice: of every hypothesis extended by every token, the
    `beam_width` most probable per source.

    Takes the hypotheses' log-probabilities `[B, beam_width]`, the next token's logits
    `[B * beam_width, vocabulary]` and which hypotheses are finished `[B, beam_width]`.
    Returns the chosen extensions' log-probabilities `[B, beam_width]`, the beam each
    extends (`parent`) and the token it adds, both int32 `[B, beam_width]`.
    """
    import tensorflow as tf

    step_log_probs = tf.nn.log_softmax(logits)
    vocabulary_size = tf.shape(step_log_probs)[-1]
    step_log_probs = tf.reshape(step_log_probs, [batch_size, beam_width, vocabulary_size])
    # A finished hypothesis may only "continue" with padding, at no cost.
    frozen = tf.one_hot(0, vocabulary_size, on_value=0.0, off_value=MASKED_LOGIT)
    step_log_probs = tf.where(finished[:, :, None], frozen[None, None, :], step_log_probs)
    candidates = tf.reshape(log_probs[:, :, None] + step_log_probs, [batch_size, -1])
    log_probs, flat_choice = tf.math.top_k(candidates, k=beam_width)
    return log_probs, flat_choice // vocabulary_size, flat_choice % vocabulary_size


def _follow_parents(parent, next_tokens, index, sequences, finished, lengths, end_id):
    """The hypotheses `_extend_beams` chose: each is its parent's sequence with `next_tokens`
    at `index`; a length grows unless the parent had finished, and `[END]` finishes."""
    import tensorflow as tf

    sequences = tf.gather(sequences, parent, batch_dims=1)
    finished = tf.gather(finished, parent, batch_dims=1)
    lengths = tf.gather(lengths, parent, batch_dims=1)
    sequences = tf.tensor_scatter_nd_update(
        tf.transpose(sequences, [2, 0, 1]), [[index]], next_tokens[None]
    )
    sequences = tf.transpose(sequences, [1, 2, 0])
    lengths = lengths + tf.cast(tf.logical_not(finished), tf.int32)
    finished = tf.logical_or(finished, tf.equal(next_tokens, end_id))
    return sequences, finished, lengths


def beam_search_loop(
    model,
    source_ids,
    max_length,
    start_id,
    end_id,
    beam_width=4,
    length_penalty=0.6,
    return_all_beams=False,
):
    """`beam_search` on any Keras backend: the same hypotheses, one Python step at a time.

    The model runs in `keras.ops` on the current backend (TensorFlow, JAX or
    PyTorch); choosing the hypotheses is NumPy bookkeeping that makes
    `beam_search`'s choices: the same frozen finished hypotheses, the same
    ranking (`length_normalized`) and, among equal log-probabilities, the same
    winner as `tf.math.top_k` (the lower index: the earlier beam, then the
    lower token id). Stops once every hypothesis has produced `[END]`.

    Every step copies the step's log-probabilities (`[B * beam_width,
    vocabulary]` floats) from the backend to NumPy.

    Args:
        model: a `Seq2SeqTransformer`, or anything with its decoding methods.
        source_ids: int array or tensor `[B, S]`, 0-padded.
        max_length: int. Most tokens to generate, `[END]` included.
        start_id: int. The target's `[START]` id.
        end_id: int. The target's `[END]` id.
        beam_width: int, defaults to `4`. Hypotheses kept per source; `1` is
            greedy decoding.
        length_penalty: float, defaults to `0.6`. GNMT's alpha: `0` ranks by
            total log-probability, which favours short outputs; higher values
            favour longer ones.
        return_all_beams: bool, defaults to `False`. Return every hypothesis,
            best first.

    Returns:
        A tuple `(ids, scores)` of NumPy arrays: int32 `[B, max_length]`, the
        best hypothesis of every source (`[END]` included, 0 after it), and
        float32 `[B]`, its length-normalized score. With `return_all_beams`,
        `[B, beam_width, max_length]` and `[B, beam_width]`, scores descending.

    Example:

    >>> import numpy as np
    >>> from keras_transformer.models import Seq2SeqTransformer
    >>> model = Seq2SeqTransformer(20, 12, sequence_length=8, num_encoder_layers=1,
    ...                            num_decoder_layers=1, d_model=16, num_heads=2,
    ...                            intermediate_dim=32)
    >>> model.build()
    >>> ids, scores = beam_search_loop(model, np.array([[5, 6, 7], [8, 0, 0]]), 6,
    ...                                start_id=1, end_id=2, beam_width=3)
    >>> ids.shape, ids.dtype, scores.shape
    ((2, 6), dtype('int32'), (2,))
    """
    if not _is_integer(beam_width) or beam_width < 1:
        raise ValueError(f"`beam_width` must be an integer >= 1, got {beam_width!r}.")
    ops = keras.ops
    encoder_output, source_mask = model.encode(
        ops.convert_to_tensor(source_ids, "int32"), training=False
    )
    batch_size = int(ops.shape(encoder_output)[0])
    # Every beam of a source starts from the same encoder output.
    encoder_output = ops.repeat(encoder_output, beam_width, axis=0)
    source_mask = ops.repeat(source_mask, beam_width, axis=0)
    self_cache, step_constants = model.initialize_cache(encoder_output, source_mask, max_length)

    # Only the first beam is live at the start, so the first step does not
    # pick the same token beam_width times.
    log_probs = np.full([batch_size, beam_width], MASKED_LOGIT, np.float32)
    log_probs[:, 0] = 0.0
    tokens = np.full([batch_size * beam_width], start_id, np.int32)
    sequences = np.zeros([batch_size, beam_width, max_length], np.int32)
    finished = np.zeros([batch_size, beam_width], bool)
    lengths = np.zeros([batch_size, beam_width], np.int32)
    source_rows = np.arange(batch_size, dtype=np.int32)[:, None] * beam_width
    for index in range(max_length):
        if finished.all():
            break
        logits, self_cache = model.decode_step(
            ops.convert_to_tensor(tokens[:, None]), index, self_cache, step_constants
        )
        step_log_probs = np.asarray(
            ops.convert_to_numpy(ops.log_softmax(logits, axis=-1)), np.float32
        )
        log_probs, parent, next_tokens = _extend_beams_numpy(log_probs, step_log_probs, finished)
        sequences, finished, lengths = _follow_parents_numpy(
            parent, next_tokens, index, sequences, finished, lengths, end_id
        )
        # Every cache follows its hypothesis' parent beam.
        self_cache = _take_cache_rows(self_cache, (parent + source_rows).reshape(-1))
        tokens = next_tokens.reshape(-1)

    scores = length_normalized(log_probs, lengths, length_penalty)
    # `beam_search` takes `tf.argmax` (the first best) or, for every beam, `tf.math.top_k`.
    order = _top_k_lower_index_first(scores, beam_width)
    if return_all_beams:
        return (
            np.take_along_axis(sequences, order[:, :, None], axis=1),
            np.take_along_axis(scores, order, axis=1),
        )
    best = order[:, 0]
    rows = np.arange(batch_size)
    return sequences[rows, best], scores[rows, best]


def _take_cache_rows(self_cache, rows):
    """Every cache of `self_cache`, `[2 (keys, values), B * beam_width, ...]`, with the
    rows `rows` (NumPy ints) in their order."""
    rows = keras.ops.convert_to_tensor(rows)
    return keras.tree.map_structure(lambda cache: keras.ops.take(cache, rows, axis=1), self_cache)


def _extend_beams_numpy(log_probs, step_log_probs, finished):
    """`_extend_beams` in NumPy: the same choice, equal log-probabilities resolved as there.

    Takes the hypotheses' log-probabilities float32 `[B, beam_width]`, the next token's
    log-probabilities float32 `[B * beam_width, vocabulary]` and which hypotheses are
    finished `[B, beam_width]`. Returns the chosen extensions' log-probabilities
    `[B, beam_width]`, the beam each extends (`parent`) and the token it adds.
    """
    batch_size, beam_width = log_probs.shape
    vocabulary_size = step_log_probs.shape[-1]
    step_log_probs = step_log_probs.reshape(batch_size, beam_width, vocabulary_size)
    # A finished hypothesis may only "continue" with padding, at no cost.
    frozen = np.full([vocabulary_size], MASKED_LOGIT, np.float32)
    frozen[0] = 0.0
    step_log_probs = np.where(finished[:, :, None], frozen, step_log_probs)
    candidates = (log_probs[:, :, None] + step_log_probs).reshape(batch_size, -1)
    flat_choice = _top_k_lower_index_first(candidates, beam_width)
    return (
        np.take_along_axis(candidates, flat_choice, axis=1),
        (flat_choice // vocabulary_size).astype(np.int32),
        (flat_choice % vocabulary_size).astype(np.int32),
    )


def _follow_parents_numpy(parent, next_tokens, index, sequences, finished, lengths, end_id):
    """`_follow_parents` in NumPy, for the hypotheses `_extend_beams_numpy` chose."""
    sequences = np.take_along_axis(sequences, parent[:, :, None], axis=1)
    finished = np.take_along_axis(finished, parent, axis=1)
    lengths = np.take_along_axis(lengths, parent, axis=1) + ~finished
    sequences[:, :, index] = next_tokens
    return sequences, finished | (next_tokens == end_id), lengths


def _top_k_lower_index_first(values, k):
    """Indices of the `k` largest of every row of `values`, largest first and, among
    equal values, the lower index first: what `tf.math.top_k` returns (a stable sort;
    `argsort` alone, or another backend's top-k, may order equal values otherwise)."""
    return np.argsort(-values, axis=-1, kind="stable")[..., :k]


def length_normalized(log_probs, lengths, length_penalty):
    """GNMT's `log P / ((5 + length) / 6) ** alpha`.

    On TensorFlow tensors (`beam_search`, traced into its graph) or NumPy arrays
    (`beam_search_loop`); float32 either way.
    """
    if isinstance(lengths, np.ndarray):
        lengths = lengths.astype(np.float32)
    else:
        import tensorflow as tf

        lengths = tf.cast(lengths, tf.float32)
    return log_probs / ((5.0 + lengths) / 6.0) ** length_penalty


def sample_loop(
    model,
    source_ids,
    max_length,
    start_id,
    end_id,
    temperature=1.0,
    top_k=0,
    top_p=1.0,
    seed=None,
):
    """Ancestral sampling on any Keras backend: every token drawn from the model's
    filtered next-token distribution.

    At every step the logits are divided by `temperature`; of the softmax of
    those, only the `top_k` most probable tokens stay (all with `0`), then, of
    those renormalized, the smallest set of most probable tokens whose
    probability reaches `top_p` (nucleus sampling; the most probable token
    always stays). The token is drawn from what stays, renormalized.

    The model runs in `keras.ops` on the current backend (TensorFlow, JAX or
    PyTorch). Filtering and drawing run in NumPy (float64) with
    `numpy.random.default_rng(seed)`, one uniform number per row and step, so a
    seed draws the same tokens on every backend, unless two backends' logits
    differ (float rounding) right at a draw's boundary. Tokens are ranked by
    their logits, the lower id first among equal ones, so `top_k=1` or a tiny
    `top_p` gives `greedy_decode_loop`'s tokens. Stops once every row has
    produced `[END]`.

    Args:
        model: a `Seq2SeqTransformer`, or anything with its decoding methods.
        source_ids: int array or tensor `[B, S]`, 0-padded.
        max_length: int. Most tokens to generate, `[END]` included; at least 1.
        start_id: int. The target's `[START]` id.
        end_id: int. The target's `[END]` id.
        temperature: float, defaults to `1.0`. Above 0: below 1 sharpens the
            distribution, above 1 flattens it. For the most probable token at
            every step, decode greedily (`greedy_decode_loop`).
        top_k: int, defaults to `0`. Keep only the `top_k` most probable
            tokens; `0` keeps them all.
        top_p: float, defaults to `1.0`. In `(0, 1]`: keep the smallest set of
            most probable tokens whose probability reaches `top_p`; `1` keeps
            them all.
        seed: int or `None`, defaults to `None`. Seeds the draws; `None` draws
            differently every call.

    Returns:
        A tuple `(ids, log_probs)` of NumPy arrays: int32 `[B, max_length]`, the
        drawn ids (`[END]` included, 0 after it), and float32 `[B]`, the sum of
        the log-probabilities of every row's drawn tokens under the model's own
        distribution (temperature 1, nothing filtered): how probable the model
        finds the translation, as `sample_decode` scores it for the export.

    Example:

    >>> import numpy as np
    >>> from keras_transformer.models import Seq2SeqTransformer
    >>> model = Seq2SeqTransformer(20, 12, sequence_length=8, num_encoder_layers=1,
    ...                            num_decoder_layers=1, d_model=16, num_heads=2,
    ...                            intermediate_dim=32)
    >>> model.build()
    >>> sources = np.array([[5, 6, 7], [8, 0, 0]])
    >>> ids, log_probs = sample_loop(model, sources, 6, start_id=1, end_id=2,
    ...                              temperature=0.8, top_p=0.9, seed=0)
    >>> ids.shape, ids.dtype, log_probs.dtype
    ((2, 6), dtype('int32'), dtype('float32'))
    >>> again, _ = sample_loop(model, sources, 6, start_id=1, end_id=2,
    ...                        temperature=0.8, top_p=0.9, seed=0)
    >>> bool((again == ids).all())
    True
    """
    _check_sampling_arguments(max_length, temperature, top_k, top_p)
    ops = keras.ops
    generator = np.random.default_rng(seed)
    encoder_output, source_mask = model.encode(
        ops.convert_to_tensor(source_ids, "int32"), training=False
    )
    self_cache, step_constants = model.initialize_cache(encoder_output, source_mask, max_length)
    batch_size = int(ops.shape(encoder_output)[0])
    rows = np.arange(batch_size)
    tokens = np.full([batch_size], start_id, np.int32)
    finished = np.zeros([batch_size], bool)
    outputs = np.zeros([batch_size, max_length], np.int32)
    log_probs = np.zeros([batch_size], np.float64)
    for index in range(max_length):
        if finished.all():
            break
        logits, self_cache = model.decode_step(
            ops.convert_to_tensor(tokens[:, None]), index, self_cache, step_constants
        )
        logits = np.asarray(ops.convert_to_numpy(logits), np.float64)
        drawn = _draw(_filtered_probabilities(logits, temperature, top_k, top_p), generator)
        model_log_probs = logits - _log_sum_exp(logits)
        log_probs += np.where(finished, 0.0, model_log_probs[rows, drawn])
        tokens = np.where(finished, 0, drawn).astype(np.int32)
        outputs[:, index] = tokens
        finished |= tokens == end_id
    return outputs, log_probs.astype(np.float32)


def _check_sampling_arguments(max_length, temperature, top_k, top_p):
    if not _is_integer(max_length) or max_length < 1:
        raise ValueError(f"`max_length` must be an integer >= 1, got {max_length!r}.")
    if not _is_real(temperature) or not temperature > 0 or not math.isfinite(temperature):
        raise ValueError(
            f"`temperature` must be a finite number > 0, got {temperature!r}. For the "
            "most probable token at every step, decode greedily (`greedy_decode_loop`)."
        )
    if not _is_integer(top_k) or top_k < 0:
        raise ValueError(f"`top_k` must be an integer >= 0 (0 keeps every token), got {top_k!r}.")
    if not _is_real(top_p) or not 0 < top_p <= 1:
        raise ValueError(f"`top_p` must be a number in (0, 1], got {top_p!r}.")


def _is_integer(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _filtered_probabilities(logits, temperature, top_k, top_p):
    """float64 logits `[B, V]` -> the renormalized distributions `sample_loop` draws
    from, `[B, V]`, 0 for every token filtered out."""
    scaled = logits / temperature
    probabilities = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
    # Ranked by the logits, not by the probabilities: dividing by the
    # temperature, or exp, may round two different logits to one value, and
    # the first token must be greedy's (argmax: the lower id among equals).
    order = np.argsort(-logits, axis=-1, kind="stable")
    ranked = np.take_along_axis(probabilities, order, axis=-1)
    if top_k:
        ranked[:, top_k:] = 0.0
    if top_p < 1.0:
        cumulative = np.cumsum(ranked, axis=-1)
        before = np.concatenate([np.zeros_like(cumulative[:, :1]), cumulative[:, :-1]], axis=-1)
        # A token stays while those ranked before it hold less than top_p of
        # what top_k kept: the smallest set that reaches top_p, never empty.
        ranked = np.where(before < top_p * cumulative[:, -1:], ranked, 0.0)
    filtered = np.zeros_like(probabilities)
    np.put_along_axis(filtered, order, ranked, axis=-1)
    return filtered / filtered.sum(axis=-1, keepdims=True)


def _log_sum_exp(logits):
    """`log(sum(exp(logits)))` over the last axis of float64 `[B, V]`, kept as `[B, 1]`."""
    largest = logits.max(axis=-1, keepdims=True)
    return largest + np.log(np.exp(logits - largest).sum(axis=-1, keepdims=True))


def _draw(probabilities, generator):
    """One token id per row of `probabilities` `[B, V]` (rows summing to 1), by inverting
    the cumulative distribution at one uniform number per row."""
    cumulative = np.cumsum(probabilities, axis=-1)
    # In (0, 1], not [0, 1): a token of probability 0 is never drawn, and the
    # threshold never exceeds the last cumulative value.
    thresholds = (1.0 - generator.random(len(probabilities))) * cumulative[:, -1]
    return (cumulative < thresholds[:, None]).sum(axis=-1)


def sample_decode(model, source_ids, max_length, start_id, end_id, temperature, top_k, top_p, seed):
    """Draws every next token from the model's distribution, filtered, reproducibly.

    At each step the logits are divided by `temperature`, then only the `top_k`
    most probable tokens are kept, then only the smallest set of the most
    probable whose probability reaches `top_p` (nucleus sampling; the most
    probable token is always kept). The token is drawn by
    `tf.random.stateless_categorical` seeded by `[seed, step]`, so the same
    inputs give the same tokens. With `top_k=1` this is `greedy_decode`.

    Args:
        model, source_ids, max_length, start_id, end_id: as `greedy_decode`.
        temperature: float, above 0; below 1 sharpens the distribution, above 1
            flattens it.
        top_k: int, tokens kept per step; 0 keeps them all.
        top_p: float in `(0, 1]`, the probability mass kept per step; 1 keeps
            every token.
        seed: int, the random stream.

    Returns:
        (int32 `[B, max_length]`: generated ids, `[END]` included, 0 after it;
        float32 `[B]`: the summed log-probabilities of the drawn tokens under
        the model's unfiltered distribution, `[END]` included).
    """
    import tensorflow as tf

    temperature = tf.cast(temperature, tf.float32)
    top_k = tf.cast(top_k, tf.int32)
    top_p = tf.cast(top_p, tf.float32)
    seed = tf.cast(seed, tf.int64)
    encoder_output, source_mask = model.encode(source_ids, training=False)
    self_cache, step_constants = model.initialize_cache(encoder_output, source_mask, max_length)
    batch_size = tf.shape(source_ids)[0]
    tokens = tf.fill([batch_size], tf.constant(start_id, tf.int32))
    finished = tf.zeros([batch_size], tf.bool)
    log_probs = tf.zeros([batch_size], tf.float32)
    # A fixed buffer, as in greedy_decode, so an empty batch stacks to [0, max_length].
    outputs = tf.zeros([max_length, batch_size], tf.int32)

    def keep_going(index, tokens, finished, log_probs, self_cache, outputs):
        return tf.logical_and(index < max_length, tf.logical_not(tf.reduce_all(finished)))

    def step(index, tokens, finished, log_probs, self_cache, outputs):
        logits, self_cache = model.decode_step(tokens[:, None], index, self_cache, step_constants)
        logits = tf.cast(logits, tf.float32)
        filtered = _top_p_filtered(_top_k_filtered(logits / temperature, top_k), top_p)
        step_seed = tf.stack([seed, tf.cast(index, tf.int64)])
        next_tokens = tf.random.stateless_categorical(filtered, 1, seed=step_seed, dtype=tf.int32)[
            :, 0
        ]
        next_tokens = tf.where(finished, 0, next_tokens)
        token_log_probs = tf.gather(tf.nn.log_softmax(logits), next_tokens, batch_dims=1)
        log_probs = log_probs + tf.where(finished, 0.0, token_log_probs)
        outputs = tf.tensor_scatter_nd_update(outputs, [[index]], next_tokens[None])
        finished = tf.logical_or(finished, tf.equal(next_tokens, end_id))
        return index + 1, next_tokens, finished, log_probs, self_cache, outputs

    _, _, _, log_probs, _, outputs = tf.while_loop(
        keep_going, step, (tf.constant(0), tokens, finished, log_probs, self_cache, outputs)
    )
    return tf.transpose(outputs), log_probs


def _top_k_filtered(logits, top_k):
    """`logits` `[B, V]` with all but the `top_k` largest per row masked (0: none masked)."""
    import tensorflow as tf

    vocabulary_size = tf.shape(logits)[-1]
    k = tf.where(top_k > 0, tf.minimum(top_k, vocabulary_size), vocabulary_size)
    kth_largest = tf.math.top_k(logits, k=k).values[:, -1:]
    return tf.where(logits < kth_largest, MASKED_LOGIT, logits)


def _top_p_filtered(logits, top_p):
    """`logits` `[B, V]` with all but the most probable tokens whose probability reaches
    `top_p` masked; the most probable token is always kept."""
    import tensorflow as tf

    sorted_logits = tf.sort(logits, axis=-1, direction="DESCENDING")
    # The probability of the tokens more probable than each: a token is kept
    # while that is still short of top_p, so the first always is.
    before = tf.math.cumsum(tf.nn.softmax(sorted_logits), axis=-1, exclusive=True)
    kept = tf.cast(before < top_p, tf.int32)
    smallest_kept = tf.gather(sorted_logits, tf.reduce_sum(kept, axis=-1) - 1, batch_dims=1)
    return tf.where(logits < smallest_kept[:, None], MASKED_LOGIT, logits)
