"""The classifier's settings: what shapes a run, saved with it for `--resume`."""

import dataclasses

from keras_transformer.training.classifier.data_rules import LARGE_CORPUS
from keras_transformer.training.settings import check_settings

MONITORS = ("val_accuracy", "val_macro_f1", "val_loss")  # what `--monitor` selects the epoch on
# `--ngram-units`: the bag of n-grams' feature families (`BagOfNgrams.adapt`), or a choice on validation
# between both and the words alone: the pieces add rare stems and punctuation, but can dilute the words.
NGRAM_UNITS = {
    "pieces": [("pieces",)],
    "words": [("words",)],
    "both": [("pieces", "words")],
    "choose": [("pieces", "words"), ("words",)],
}


@dataclasses.dataclass
class ClassifierSettings:
    """Everything that shapes a classifier run; saved with the run for `--resume`.

    The `FROM_DATA` fields left None are chosen from the training texts
    (`keras_transformer.training.classifier.data_rules`); `max_length` caps the
    chosen `sequence_length`.
    """

    LARGE_CORPUS = LARGE_CORPUS
    FROM_DATA = (
        "vocabulary_size",
        "sequence_length",
        "batch_size",
        "warmup_fraction",
        "ngram_l2",
        "ngram_length",
    )

    epochs: int = 12
    batch_size: int = None
    sequence_length: int = None
    max_length: int = 512
    vocabulary_size: int = None
    num_layers: int = 1
    d_model: int = 128
    num_heads: int = 4
    intermediate_dim: int = 256
    dropout: float = 0.3
    pooling: str = "max"
    learning_rate: float = 1e-3
    weight_decay: float = 0.01
    warmup_fraction: float = None
    clip_norm: float = 1.0
    patience: int = 4
    monitor: str = "val_accuracy"  # one of MONITORS; the validation loss breaks ties
    seed: int = 1337
    mixed_precision: str = "off"  # "off", "float16" or "bfloat16"
    jit_compile: bool = False  # XLA
    # Masked-token pretraining of the encoder before fine-tuning (0 = none).
    pretrain_epochs: int = 0
    # A logistic regression on the TF-IDF of WordPiece unigrams and bigrams
    # (`BagOfNgrams`), fit after the Transformer and added to its logits at a
    # weight chosen on validation: True, False, or a dict of `BagOfNgrams`
    # arguments.
    bag_of_ngrams: object = True
    ngram_l2: float = None  # the bag of n-grams' L2 penalty (`BagOfNgrams`' l2)
    # Fit it again on training + validation once validation chose (`add_bag_of_ngrams`).
    ngram_refit: bool = True
    ngram_units: str = "choose"  # one of NGRAM_UNITS
    # The tokens the bag of n-grams reads, beyond sequence_length for long texts.
    ngram_length: int = None

    def validate(self):
        check_settings(self)
        if self.monitor not in MONITORS:
            raise ValueError(
                f"`monitor` must be one of {', '.join(MONITORS)}, got {self.monitor!r}."
            )
        if self.learning_rate <= 0:
            raise ValueError(f"`learning_rate` must be positive, got {self.learning_rate}.")
        if self.warmup_fraction is not None and not 0.0 <= self.warmup_fraction < 1.0:
            raise ValueError(f"`warmup_fraction` must be in [0, 1), got {self.warmup_fraction}.")
        if not isinstance(self.bag_of_ngrams, (bool, dict)):
            raise ValueError(
                f"`bag_of_ngrams` must be True, False or a dict of BagOfNgrams arguments, "
                f"got {self.bag_of_ngrams!r}."
            )
        if self.ngram_l2 is not None and not (
            isinstance(self.ngram_l2, (int, float)) and self.ngram_l2 >= 0
        ):
            raise ValueError(f"`ngram_l2` must be a number of at least 0, got {self.ngram_l2!r}.")
        if self.ngram_length is not None and not (
            isinstance(self.ngram_length, int)
            and not isinstance(self.ngram_length, bool)
            and self.ngram_length > 0
        ):
            raise ValueError(
                f"`ngram_length` must be a positive integer, got {self.ngram_length!r}."
            )
        if self.ngram_units not in NGRAM_UNITS:
            raise ValueError(
                f"`ngram_units` must be one of {', '.join(NGRAM_UNITS)}, got {self.ngram_units!r}."
            )
        if not isinstance(self.ngram_refit, bool):
            raise ValueError(f"`ngram_refit` must be True or False, got {self.ngram_refit!r}.")
        if not isinstance(self.pretrain_epochs, int) or self.pretrain_epochs < 0:
            raise ValueError(
                f"`pretrain_epochs` must be an integer of at least 0, got {self.pretrain_epochs!r}."
            )
        return self


def saved_classifier_settings(saved):
    """The `ClassifierSettings` in a run's `settings.json` (as `saved_run_or_fresh_start` reads it)."""
    # A run saved before the bag of n-grams existed has none, and one saved before its word
    # features has only the pieces': their checkpoints lack those weights.
    return ClassifierSettings(
        **{"bag_of_ngrams": False, "ngram_units": "pieces", **saved["settings"]}
    )
