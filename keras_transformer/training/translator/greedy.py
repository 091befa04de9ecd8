"""Greedy translations of encoded sources, batched by length, on any Keras backend.

What a run reads of its own model: the validation subset behind `val_chrf`
every epoch, the test split's score and samples at the end. Detokenized as
the export's `greedy` signature detokenizes, so a score is that of what a
user of the export reads.
"""

import keras
import numpy as np

from keras_transformer.decoding import greedy_decode, greedy_decode_loop
from keras_transformer.text.padding import trim_shared_padding, trim_shared_padding_array
from keras_transformer.text.vocabulary import END, START, detokenize


class GreedyTranslator:
    """Translates encoded sources greedily, in batches of similar source length.

    On TensorFlow `greedy_decode` runs as one traced `tf.function` for every
    batch (its signature leaves both dimensions open); on other backends
    `greedy_decode_loop` gives the same tokens. Sources are sorted by length
    so that a batch of short sentences does not wait on one long one; the
    translations come back in the sources' order.

    Args:
        model: a `Seq2SeqTransformer`, or anything with its decoding methods
            and `sequence_length`.
        vocabulary: the target vocabulary, a list of tokens in id order.
        max_output_length: int, most tokens generated per source, `[END]`
            included; capped at the model's `sequence_length`.
        batch_size: int, sources decoded at once. Defaults to 64.

    Example:

    >>> translator = GreedyTranslator(model, target_vocabulary, max_output_length=32)
    >>> translator(source_ids)  # doctest: +SKIP
    ['the dog sleeps', ...]
    """

    def __init__(self, model, vocabulary, max_output_length, batch_size=64):
        self.vocabulary = list(vocabulary)
        self.batch_size = int(batch_size)
        max_length = min(int(max_output_length), int(model.sequence_length))
        start_id, end_id = self.vocabulary.index(START), self.vocabulary.index(END)
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
            def traced(source_ids):
                return greedy_decode(
                    model, trim_shared_padding(source_ids), max_length, start_id, end_id
                )

            self._decode = lambda source_ids: traced(tf.constant(source_ids)).numpy()
        else:
            self._decode = lambda source_ids: greedy_decode_loop(
                model, trim_shared_padding_array(source_ids), max_length, start_id, end_id
            )

    def __call__(self, source_ids, verbose=0):
        """The translations (str) of `source_ids` (int `[N, L]`, 0-padded), in their order.
        `verbose` as Keras': 1 a progress bar counting the sources, 2 one line at the end."""
        source_ids = np.asarray(source_ids, np.int32)
        order = np.argsort((source_ids > 0).sum(axis=1), kind="stable")
        bar = (
            keras.utils.Progbar(len(order), verbose=verbose, unit_name="source")
            if verbose
            else None
        )
        translations = [None] * len(order)
        for start in range(0, len(order), self.batch_size):
            indices = order[start : start + self.batch_size]
            texts = detokenize(self._decode(source_ids[indices]), self.vocabulary)
            for index, text in zip(indices, texts):
                translations[index] = text
            if bar is not None:
                bar.add(len(indices))
        return translations
