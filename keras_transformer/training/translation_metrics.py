"""chrF of the translator's own output, every epoch, so a run keeps its best-translating epoch.

`corpus_chrf` is chrF as sacrebleu defines it (Popović 2015; sacrebleu's
defaults): character n-grams of orders 1 to 6 with whitespace removed,
case-sensitive, one reference per hypothesis, n-gram counts summed over the
whole corpus before the precision and recall of each order are taken, the
orders with both counts non-zero averaged, then the F-score with recall
weighted `beta` = 2 times as much as precision, scaled to 0-100.

`ValidationChrF` is the Keras callback that greedy-decodes a fixed, seeded
subset of the validation pairs at the end of every epoch, detokenizes the
output as the export's `greedy` signature does, and logs the corpus chrF as
`val_chrf`, where the history, the time budget and `BestEpoch` read it.
"""

from collections import Counter

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.decoding import greedy_decode
from keras_transformer.text.padding import trim_shared_padding
from keras_transformer.text.wordpiece import END
from keras_transformer.text.wordpiece import START

CHAR_ORDER = 6
BETA = 2


def character_ngrams(text, order):
    """Counts of the character n-grams of length `order` in `text`, whitespace removed."""
    characters = "".join(text.split())
    return Counter(characters[start : start + order] for start in range(len(characters) - order + 1))


def chrf_statistics(hypothesis, reference, char_order=CHAR_ORDER):
    """`[[hypothesis n-grams, reference n-grams, matches] for each order 1..char_order]`.

    Matches are clipped by the reference's counts. As in sacrebleu, an order
    the reference is too short to have counts no hypothesis n-grams either,
    so a short reference does not cost a long hypothesis precision twice.
    """
    statistics = []
    for order in range(1, char_order + 1):
        hypothesis_ngrams = character_ngrams(hypothesis, order)
        reference_ngrams = character_ngrams(reference, order)
        matches = sum(min(count, reference_ngrams[ngram]) for ngram, count in hypothesis_ngrams.items())
        hypothesis_count = sum(hypothesis_ngrams.values()) if reference_ngrams else 0
        statistics.append([hypothesis_count, sum(reference_ngrams.values()), matches])
    return statistics


def chrf_from_statistics(statistics, beta=BETA):
    """chrF (0-100) from per-order `[hypothesis, reference, matches]` counts."""
    precisions, recalls = [], []
    for hypothesis_count, reference_count, matches in statistics:
        if hypothesis_count > 0 and reference_count > 0:
            precisions.append(matches / hypothesis_count)
            recalls.append(matches / reference_count)
    if not precisions:
        return 0.0
    precision, recall = np.mean(precisions), np.mean(recalls)
    if precision + recall == 0:
        return 0.0
    factor = beta**2
    return float(100 * (1 + factor) * precision * recall / (factor * precision + recall))


def corpus_chrf(hypotheses, references, char_order=CHAR_ORDER, beta=BETA):
    """Corpus-level chrF (0-100) of `hypotheses` against one reference each."""
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(f"chrF needs one reference per hypothesis: got {len(hypotheses)} hypotheses "
                         f"and {len(references)} references.")
    totals = np.zeros((char_order, 3), np.int64)
    for hypothesis, reference in zip(hypotheses, references):
        totals += np.asarray(chrf_statistics(hypothesis, reference, char_order), np.int64)
    return chrf_from_statistics(totals.tolist(), beta)


def chrf_subset(num_pairs, size, seed):
    """Sorted indices of a seeded subset of `size` of `num_pairs` pairs (all of them when fewer)."""
    if size >= num_pairs:
        return np.arange(num_pairs)
    return np.sort(np.random.default_rng(seed).choice(num_pairs, size=size, replace=False))


class ValidationChrF(keras.callbacks.Callback):
    """Logs `val_chrf`: corpus chrF of the greedy translations of fixed validation pairs.

    Sources are encoded as the export encodes them, decoded with
    `greedy_decode` and its key/value caches in batches of similar source
    length, and detokenized with the target tokenizer, so the score is that
    of what a user of the export's `greedy` signature reads. Outputs are cut
    at `max_output_length` tokens and at twice the longest reference (plus
    `[END]`): an untrained model that never says `[END]` then costs a short
    decode, and an output twice too long scores poorly either way. The
    decode runs inside the epoch, so it counts against `--time-budget` like
    validation does.

    Args:
        sources, references: the validation pairs to score (already the subset).
        source_tokenizer, target_tokenizer: the run's `WordPieceTokenizer`s.
        max_output_length: most target tokens generated, `[END]` included.
        batch_size: sources decoded at once.
    """

    def __init__(self, sources, references, source_tokenizer, target_tokenizer, max_output_length,
                 batch_size=64):
        super().__init__()
        if not sources or len(sources) != len(references):
            raise ValueError(f"ValidationChrF needs pairs: got {len(sources)} sources and "
                             f"{len(references)} references.")
        self.sources, self.references = list(sources), list(references)
        self.source_tokenizer = source_tokenizer
        self.target_tokenizer = target_tokenizer
        reference_lengths = target_tokenizer.tokenize(tf.constant(self.references)).row_lengths()
        self.max_output_length = min(int(max_output_length), 2 * int(tf.reduce_max(reference_lengths)) + 1)
        self.batch_size = int(batch_size)
        self._batches = None
        self._source_ids = None
        self._translate = None

    def on_train_begin(self, logs=None):
        # Encoded once the model is known (its `sequence_length` bounds the
        # sources, as in the export); sorted by length so a batch of short
        # sentences does not wait on one long one.
        source_ids = self.source_tokenizer.encode(tf.constant(self.sources), self.model.sequence_length).numpy()
        order = np.argsort((source_ids > 0).sum(axis=1), kind="stable")
        self._batches = [order[start : start + self.batch_size] for start in range(0, len(order), self.batch_size)]
        self._source_ids = source_ids
        model, start_id, end_id = self.model, self.target_tokenizer.token_id(START), self.target_tokenizer.token_id(END)
        max_length = min(self.max_output_length, model.sequence_length)

        # One trace for every batch: the signature leaves both dimensions open.
        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
        def translate(source_ids):
            token_ids = greedy_decode(model, trim_shared_padding(source_ids), max_length, start_id, end_id)
            return self.target_tokenizer.detokenize(token_ids)

        self._translate = translate

    def translations(self):
        """The current model's translations of `sources`, in their order."""
        if self._translate is None:
            raise RuntimeError("ValidationChrF translates once training has begun (on_train_begin).")
        translations = [None] * len(self.sources)
        for indices in self._batches:
            for index, text in zip(indices, self._translate(tf.constant(self._source_ids[indices])).numpy()):
                translations[index] = text.decode("utf-8", errors="replace")
        return translations

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["val_chrf"] = corpus_chrf(self.translations(), self.references)
