"""The translator's settings: what shapes a run, saved with it for `--resume`."""

import dataclasses

from keras_transformer.training.settings import check_settings
from keras_transformer.training.translator.data_rules import LARGE_CORPUS

MONITORS = ("val_chrf", "val_masked_accuracy", "val_loss")  # what `--monitor` selects the epoch on
SCHEDULES = ("inverse_sqrt", "cosine")


@dataclasses.dataclass
class TranslatorSettings:
    """Everything that shapes a translator run; saved with the run for `--resume`.

    The `FROM_DATA` fields left None are chosen from the training pairs
    (`keras_transformer.training.translator.data_rules`); `max_length` caps the
    chosen `sequence_length`. `vocabulary_size` is the source side's.
    """

    LARGE_CORPUS = LARGE_CORPUS
    FROM_DATA = (
        "vocabulary_size",
        "target_vocabulary_size",
        "sequence_length",
        "num_layers",
        "d_model",
        "intermediate_dim",
        "dropout",
        "label_smoothing",
        "warmup_steps",
        "schedule",
        "patience",
    )

    epochs: int = 20
    batch_size: int = 64
    sequence_length: int = None
    max_length: int = 64
    vocabulary_size: int = None
    # None: chosen from the targets, or `vocabulary_size` when that was set.
    target_vocabulary_size: int = None
    num_layers: int = None
    # None: as many decoder blocks as encoder blocks (`num_layers`). A deep
    # encoder with a shallow decoder decodes faster: the encoder runs once.
    num_decoder_layers: int = None
    d_model: int = None
    num_heads: int = 4
    intermediate_dim: int = None
    dropout: float = None
    label_smoothing: float = None
    warmup_steps: int = None
    learning_rate_scale: float = 0.75
    clip_norm: float = 1.0
    patience: int = None  # None: 0 under the cosine schedule, else 3
    # chrF of greedy translations of `chrf_pairs` validation pairs: what the
    # user reads, where the loss and the teacher-forced token accuracy are
    # only proxies. One of MONITORS; the validation loss breaks ties.
    monitor: str = "val_chrf"
    seed: int = 1337
    mixed_precision: str = "off"  # "off", "float16" or "bfloat16"
    jit_compile: bool = False  # XLA
    chrf_pairs: int = 200  # validation pairs translated each epoch for `val_chrf` (0: none)
    shared_vocabulary: bool = False  # one cased vocabulary for both sides, one tied embedding
    # "inverse_sqrt": the paper's warmup then 1/sqrt(step) (TransformerSchedule).
    # "cosine": the same warmup to the same peak, then a cosine that reaches 0
    # at the planned steps, or where a time budget ends (FitScheduleToBudget).
    # None: the corpus' size tier chooses.
    schedule: str = None

    def validate(self):
        extra = (
            "warmup_steps",
            "target_vocabulary_size",
            *(() if self.num_decoder_layers is None else ("num_decoder_layers",)),
        )
        check_settings(self, extra_integers=extra)
        if self.monitor not in MONITORS:
            raise ValueError(
                f"`monitor` must be one of {', '.join(MONITORS)}, got {self.monitor!r}."
            )
        if not isinstance(self.chrf_pairs, int) or self.chrf_pairs < 0:
            raise ValueError(
                f"`chrf_pairs` must be a non-negative integer, got {self.chrf_pairs!r}."
            )
        if self.monitor == "val_chrf" and self.chrf_pairs == 0:
            raise ValueError(
                "`monitor` val_chrf needs validation pairs to translate: `chrf_pairs` is 0."
            )
        if self.schedule is not None and self.schedule not in SCHEDULES:
            raise ValueError(
                f"`schedule` must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}."
            )
        if self.patience is not None and (not isinstance(self.patience, int) or self.patience < 0):
            raise ValueError(f"`patience` must be a non-negative integer, got {self.patience!r}.")
        if not isinstance(self.shared_vocabulary, bool):
            raise ValueError(
                f"`shared_vocabulary` must be True or False, got {self.shared_vocabulary!r}."
            )
        return self


def saved_translator_settings(saved):
    """The `TranslatorSettings` in a run's `settings.json` (as `saved_run_or_fresh_start` reads it)."""
    # A run saved before `val_chrf` existed resumes without it: a new column
    # would not match its history.csv's header.
    return TranslatorSettings(**{"chrf_pairs": 0, **saved["settings"]})
