"""The translator's settings: what shapes a run, saved with it for `--resume`."""

from keras_transformer.training.settings import (
    check_settings,
    jit_compile_setting,
    max_length_setting,
    mixed_precision_setting,
    monitor_setting,
    patience_setting,
    seed_setting,
    setting,
    settings_class,
)
from keras_transformer.training.translator.data_rules import LARGE_CORPUS

# What `--monitor` selects the epoch on. chrF of greedy translations of `chrf_pairs`
# validation pairs is what the user reads, where the loss and the teacher-forced token
# accuracy are only proxies.
MONITORS = ("val_chrf", "val_masked_accuracy", "val_loss")
SCHEDULES = ("inverse_sqrt", "cosine")


@settings_class
class TranslatorSettings:
    """Everything that shapes a translator run; saved with the run for `--resume`.

    The `FROM_DATA` fields left None are chosen from the training pairs
    (`keras_transformer.training.translator.data_rules`); `max_length` caps
    the chosen `sequence_length`. `vocabulary_size` is the source side's.
    Each field's help says what it does.
    """

    LARGE_CORPUS = LARGE_CORPUS

    sequence_length: int = setting(
        None,
        "longest source and output, in tokens; longer ones are cut ({default})",
        group="model",
        from_data=True,
        minimum=1,
    )
    max_length: int = max_length_setting(64)
    shared_vocabulary: bool = setting(
        False,
        "one cased WordPiece vocabulary learned from both languages, with one token embedding "
        "for the encoder, the decoder and the output projection (--vocab-size is its size); for "
        "languages that share a script",
        group="model",
    )
    vocabulary_size: int = setting(
        None,
        "WordPiece vocabulary size of each side ({default})",
        group="model",
        from_data=True,
        flag="--vocab-size",
        minimum=1,
    )
    # Chosen from the targets, or `vocabulary_size` when that was set.
    target_vocabulary_size: int = setting(None, group="model", from_data=True, flag=None, minimum=1)
    num_layers: int = setting(
        None,
        "encoder blocks (and decoder blocks unless --decoder-layers) ({default})",
        group="model",
        from_data=True,
        minimum=1,
    )
    # A deep encoder with a shallow decoder decodes faster: the encoder runs once.
    num_decoder_layers: int = setting(
        None,
        "decoder blocks (default: --num-layers)",
        group="model",
        flag="--decoder-layers",
        minimum=1,
    )
    d_model: int = setting(None, "{default}", group="model", from_data=True, minimum=1)
    num_heads: int = setting(4, "{default}", group="model", minimum=1)
    intermediate_dim: int = setting(
        None, "feed-forward width ({default})", group="model", from_data=True, minimum=1
    )
    dropout: float = setting(None, "{default}", group="model", from_data=True)
    source_word_dropout: float = setting(
        None,
        "in training, the fraction of source tokens whose whole embedding is dropped ({default})",
        group="model",
        from_data=True,
    )

    epochs: int = setting(20, group="training", minimum=1)
    batch_size: int = setting(64, "{default}", group="training", minimum=1)
    label_smoothing: float = setting(None, "{default}", group="training", from_data=True)
    warmup_steps: int = setting(None, "{default}", group="training", from_data=True, minimum=1)
    learning_rate_scale: float = setting(
        0.75,
        "multiplies the paper's warmup schedule (the peak of both schedules)",
        group="training",
    )
    # "inverse_sqrt": the paper's warmup then 1/sqrt(step) (TransformerSchedule).
    # "cosine": the same warmup to the same peak, then a cosine that reaches 0
    # at the planned steps, or where a time budget ends (FitScheduleToBudget).
    schedule: str = setting(
        None,
        "after the warmup: inverse_sqrt (the paper's 1/sqrt(step)) or cosine (to 0 at the last "
        "planned step, or where --time-budget ends; {default})",
        group="training",
        from_data=True,
        choices=SCHEDULES,
    )
    # 0 under the cosine schedule, else 3 (`TRANSLATOR_PATIENCE`).
    patience: int = patience_setting(None, from_data=True)
    seed: int = seed_setting()
    monitor: str = monitor_setting(MONITORS)
    chrf_pairs: int = setting(
        200,
        "validation pairs (a seeded subset) translated greedily after every epoch to log "
        "val_chrf ({default}; 0 = none, which needs another --monitor)",
        group="training",
        metavar="N",
        minimum=0,
    )
    # 5 under inverse_sqrt, 0 (off) under the cosine (`TRANSLATOR_AVERAGED_EPOCHS`).
    average_epochs: int = setting(
        None,
        "at the end, average the weights of the last N epochs and keep the average instead of "
        "the best epoch when its greedy chrF on the validation split is higher; 0 = off "
        "({default})",
        group="training",
        from_data=True,
        metavar="N",
        minimum=0,
    )
    clip_norm: float = setting(1.0, group="training", flag=None)

    mixed_precision: str = mixed_precision_setting()
    jit_compile: bool = jit_compile_setting()

    def validate(self):
        check_settings(self)
        if self.monitor == "val_chrf" and self.chrf_pairs == 0:
            raise ValueError(
                "`monitor` val_chrf needs validation pairs to translate: `chrf_pairs` is 0."
            )
        return self
