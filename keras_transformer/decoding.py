"""Greedy and beam search over a cached decoder.

`greedy_decode` and `beam_search` are TensorFlow ops only: both run the
encoder once per batch and then one decoder position per step
(`model.decode_step` with each block's key/value cache), inside one
`tf.while_loop` with fixed-shape state, so they trace into a SavedModel
and stop as soon as every sequence has produced `[END]`.

`model` is anything with the `Seq2SeqTransformer` decoding methods:
`encode(source_ids)`, `initialize_cache(encoder_output, source_mask, max_length)`
and `decode_step(token_ids, index, self_cache, step_constants)`,
where `step_constants` is what every step reads unchanged (computed once,
outside the loop).

`greedy_decode_loop` gives `greedy_decode`'s tokens on any Keras backend (a
Python loop over `keras.ops`), for training where TensorFlow is not.
"""

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


def length_normalized(log_probs, lengths, length_penalty):
    """GNMT's `log P / ((5 + length) / 6) ** alpha`."""
    import tensorflow as tf

    penalty = tf.pow((5.0 + tf.cast(lengths, tf.float32)) / 6.0, length_penalty)
    return log_probs / penalty


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
