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
`val_chrf`, where the history, the time budget and `BestEpoch` read it. It
needs TensorFlow on no backend.
"""

from collections import Counter

import keras
import numpy as np

from keras_transformer.text.vocabulary import END, START
from keras_transformer.training.translator.greedy import GreedyTranslator

CHAR_ORDER = 6
BETA = 2


def character_ngrams(text, order):
    """Counts of the character n-grams of length `order` in `text`, whitespace removed."""
    characters = "".join(text.split())
    return Counter(
        characters[start : start + order] for start in range(len(characters) - order + 1)
    )


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
        matches = sum(
            min(count, reference_ngrams[ngram]) for ngram, count in hypothesis_ngrams.items()
        )
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
        raise ValueError(
            f"chrF needs one reference per hypothesis: got {len(hypotheses)} hypotheses "
            f"and {len(references)} references."
        )
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

    Sources, encoded as for training, are translated by a `GreedyTranslator`
    (the model's key/value caches, batches of similar source length,
    detokenized as the export detokenizes), so the score is that of what a
    user of the export's `greedy` signature reads. Outputs are cut at
    `max_output_length` tokens and at twice the longest reference (plus
    `[END]`): an untrained model that never says `[END]` then costs a short
    decode, and an output twice too long scores poorly either way. The decode
    runs inside the epoch, so it counts against `--time-budget` like
    validation does.

    Args:
        source_ids: int `[N, L]` encoded sources, 0-padded (already the subset).
        reference_ids: int `[N, L']` the references encoded as training
            targets (`[START]`, `[END]` and padding are not counted).
        references: the `N` reference texts.
        vocabulary: the target vocabulary, a list of tokens in id order.
        max_output_length: most target tokens generated, `[END]` included.
        batch_size: sources decoded at once.
    """

    def __init__(
        self, source_ids, reference_ids, references, vocabulary, max_output_length, batch_size=64
    ):
        super().__init__()
        source_ids, reference_ids = np.asarray(source_ids, np.int32), np.asarray(reference_ids)
        if not len(references) or not len(source_ids) == len(reference_ids) == len(references):
            raise ValueError(
                f"ValidationChrF needs pairs: got {len(source_ids)} sources, {len(reference_ids)} "
                f"encoded references and {len(references)} references."
            )
        self.references = list(references)
        self.vocabulary = list(vocabulary)
        special_ids = [0, self.vocabulary.index(START), self.vocabulary.index(END)]
        reference_lengths = np.isin(reference_ids, special_ids, invert=True).sum(axis=1)
        self.max_output_length = min(int(max_output_length), 2 * int(reference_lengths.max()) + 1)
        self.batch_size = int(batch_size)
        self._source_ids = source_ids
        self._translator = None

    def on_train_begin(self, logs=None):
        self._translator = GreedyTranslator(
            self.model, self.vocabulary, self.max_output_length, self.batch_size
        )

    def translations(self):
        """The current model's translations of the sources, in their order."""
        if self._translator is None:
            raise RuntimeError(
                "ValidationChrF translates once training has begun (on_train_begin)."
            )
        return self._translator(self._source_ids)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["val_chrf"] = corpus_chrf(self.translations(), self.references)
