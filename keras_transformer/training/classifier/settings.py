"""The classifier's settings: what shapes a run, saved with it for `--resume`."""

from keras_transformer.models.classifier import POOLINGS
from keras_transformer.training.classifier.data_rules import LARGE_CORPUS
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

MONITORS = ("val_accuracy", "val_macro_f1", "val_loss")  # what `--monitor` selects the epoch on
# `--ngram-units`: the bag of n-grams' feature families (`BagOfNgrams.adapt`), or a choice on
# validation between both and the words alone: the pieces add rare stems and punctuation, but
# can dilute the words.
NGRAM_UNITS = {
    "pieces": [("pieces",)],
    "words": [("words",)],
    "both": [("pieces", "words")],
    "choose": [("pieces", "words"), ("words",)],
}


@settings_class
class ClassifierSettings:
    """Everything that shapes a classifier run; saved with the run for `--resume`.

    The `FROM_DATA` fields left None are chosen from the training texts
    (`keras_transformer.training.classifier.data_rules`); `max_length` caps
    the chosen `sequence_length`. Each field's help says what it does.
    """

    LARGE_CORPUS = LARGE_CORPUS

    sequence_length: int = setting(
        None,
        "tokens per text; longer texts are cut ({default})",
        group="model",
        from_data=True,
        minimum=1,
    )
    # The tokens the bag of n-grams reads, beyond sequence_length for long texts.
    ngram_length: int = setting(
        None,
        "tokens per text the bag of n-grams reads, the Transformer the first --sequence-length "
        "of them ({default})",
        group="model",
        from_data=True,
        minimum=1,
    )
    max_length: int = max_length_setting(512)
    vocabulary_size: int = setting(
        None,
        "WordPiece vocabulary size ({default})",
        group="model",
        from_data=True,
        flag="--vocab-size",
        minimum=1,
    )
    pooling: str = setting(
        "max",
        "how the encoder's outputs become one vector; cls adds a [CLS] token before every text "
        "({default})",
        group="model",
        choices=POOLINGS,
        fine_tuning="mean",
    )
    num_layers: int = setting(1, group="model", minimum=1)
    d_model: int = setting(128, "{default}", group="model", minimum=1)
    num_heads: int = setting(4, "{default}", group="model", minimum=1)
    intermediate_dim: int = setting(256, "feed-forward width ({default})", group="model", minimum=1)
    dropout: float = setting(0.3, "{default}", group="model", fine_tuning=0.1)
    # A logistic regression on the TF-IDF of WordPiece unigrams and bigrams (`BagOfNgrams`),
    # fit after the Transformer and added to its logits at a weight chosen on validation:
    # True, False, or a dict of `BagOfNgrams` arguments.
    bag_of_ngrams: object = setting(
        True,
        "beside the Transformer, a logistic regression on the TF-IDF of the texts' unigrams and "
        "bigrams (see --ngram-units), fit after it; the answer sums the two's logits, each at a "
        "weight chosen on validation, where either alone may win ({default})",
        group="model",
    )
    ngram_l2: float = setting(
        None, "L2 penalty of the bag of n-grams ({default})", group="model", from_data=True
    )
    ngram_buckets: int = setting(
        None,
        "rows the bag of n-grams hashes WordPiece bigrams into, and as many for words and word "
        "bigrams ({default})",
        group="model",
        from_data=True,
        minimum=1,
    )
    ngram_units: str = setting(
        "choose",
        "the bag of n-grams' units: WordPieces, the words they spell, both, or choose between "
        "both and words on validation ({default})",
        group="model",
        choices=NGRAM_UNITS,
    )
    # Fit it again on training + validation once validation chose (`add_bag_of_ngrams`).
    ngram_refit: bool = setting(
        True,
        "once validation chose the Transformer's weight, fit the bag of n-grams again on the "
        "training and validation texts ({default})",
        group="model",
    )

    # A BERT-family checkpoint folder to fine-tune instead of a Transformer trained from
    # scratch: it fixes the vocabulary, the encoder's sizes and the longest sequence.
    pretrained: str = setting(
        None,
        "fine-tune the BERT-family checkpoint in folder PATH (Hugging Face's layout: "
        "config.json, model.safetensors, vocab.txt or tokenizer.json): its vocabulary, casing, "
        "encoder and positions replace --vocab-size, --num-layers, --d-model, --num-heads and "
        "--intermediate-dim",
        group="model",
        metavar="PATH",
    )
    lora_rank: int = setting(
        None,
        "with --pretrained: train rank-N low-rank adapters on the attention's query and value "
        "projections, and the head, instead of every weight",
        group="model",
        metavar="N",
        minimum=1,
    )

    epochs: int = setting(12, "{default}", group="training", minimum=1, fine_tuning=5)
    batch_size: int = setting(None, "{default}", group="training", from_data=True, minimum=1)
    # Shuffled batches of texts of like lengths (`ArrayBatches`), each cut to its longest text:
    # a batch of short texts pays for fewer padding positions. Off from scratch, whose defaults
    # were measured on plain shuffled batches.
    bucket_width: int = setting(
        None,
        "with N, batch together training texts whose lengths fall in one band of N tokens, so "
        "that a batch of short texts is short; without, plain shuffled batches ({default})",
        group="training",
        metavar="N",
        minimum=1,
        fine_tuning=8,
    )
    learning_rate: float = setting(
        1e-3,
        "peak of the warmup-then-cosine schedule, which ends after --epochs or with "
        "--time-budget, whichever comes first ({default})",
        group="training",
        fine_tuning={"full": 5e-5, "lora": 5e-4},
    )
    weight_decay: float = setting(
        0.01,
        "AdamW's decoupled weight decay ({default}); with --pretrained, not on the layer norms "
        "and biases, as BERT is fine-tuned",
        group="training",
    )
    # Layer-wise learning-rate decay: each block of a pretrained encoder below the top learns
    # at `layer_decay` times the rate of the block above it (`FineTuningAdamW`). 0.9 is the
    # usual recipe (ELECTRA); off by default, as no measurement here showed a gain.
    layer_decay: float = setting(
        1.0,
        "with --pretrained: the head and pooler learn at --learning-rate, encoder block i of L "
        "(0 at the bottom) at FACTOR^(L-i) times it, the embeddings at FACTOR^(L+1); in (0, 1], "
        "0.9 is the usual recipe ({default}: off)",
        group="training",
        metavar="FACTOR",
    )
    warmup_fraction: float = setting(
        None,
        "share of the planned steps that warm the learning rate up ({default})",
        group="training",
        from_data=True,
    )
    # Masked-token pretraining of the encoder before fine-tuning (0 = none).
    pretrain_epochs: int = setting(
        0,
        "first pretrain the encoder for N epochs to predict masked tokens of the training texts "
        "and --unlabeled, within half of --time-budget at most ({default}: no pretraining)",
        group="training",
        metavar="N",
        minimum=0,
    )
    patience: int = patience_setting(4)
    seed: int = seed_setting()
    monitor: str = monitor_setting(MONITORS)
    clip_norm: float = setting(1.0, group="training", flag=None)

    mixed_precision: str = mixed_precision_setting()
    jit_compile: bool = jit_compile_setting()

    def validate(self):
        check_settings(self)
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
        if not (
            isinstance(self.layer_decay, (int, float))
            and not isinstance(self.layer_decay, bool)
            and 0.0 < self.layer_decay <= 1.0
        ):
            raise ValueError(
                f"`layer_decay` (--layer-decay) must be in (0, 1], got {self.layer_decay!r}."
            )
        if self.layer_decay != 1.0 and self.pretrained is None:
            raise ValueError(
                "`layer_decay` (--layer-decay) lowers the learning rates of a pretrained "
                "checkpoint's lower blocks: give `pretrained` (--pretrained) too."
            )
        if self.lora_rank is not None and self.pretrained is None:
            raise ValueError(
                "`lora_rank` trains adapters of a pretrained checkpoint: give `pretrained` too."
            )
        if self.pretrained is not None and self.pretrain_epochs:
            raise ValueError(
                "`pretrain_epochs`: masked-token pretraining is not available when fine-tuning "
                f"`pretrained` ({self.pretrained}); turn it off."
            )
        return self
