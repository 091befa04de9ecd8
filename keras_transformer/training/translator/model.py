"""The translator's model built and compiled from `TranslatorSettings`, and its schedule."""

import keras

from keras_transformer.models import Seq2SeqTransformer
from keras_transformer.training.compiling import compile_for_fit
from keras_transformer.training.data_rules import check_chosen
from keras_transformer.training.distribute import dtype_policy, strategy_scope
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import masked_accuracy
from keras_transformer.training.schedules import TransformerSchedule, WarmupCosine


def build_compiled_translator(
    settings, source_vocabulary_size, target_vocabulary_size, strategy=None, total_steps=None
):
    """`build_translator_model`, compiled for `fit` (Adam on `settings.schedule`, masked loss
    and accuracy) in `strategy`'s scope under `settings.mixed_precision`. The cosine
    schedule reaches 0 after `total_steps` (needed for it)."""
    with strategy_scope(strategy), dtype_policy(settings.mixed_precision):
        model = build_translator_model(settings, source_vocabulary_size, target_vocabulary_size)
        compile_for_fit(
            model,
            keras.optimizers.Adam(
                learning_rate_schedule_of(settings, total_steps),
                beta_1=0.9,
                beta_2=0.98,
                epsilon=1e-9,
                clipnorm=settings.clip_norm,
            ),
            loss=MaskedSparseCategoricalCrossentropy(label_smoothing=settings.label_smoothing),
            metrics=[keras.metrics.MeanMetricWrapper(masked_accuracy, name="masked_accuracy")],
            jit_compile=settings.jit_compile,
        )
    return model


def learning_rate_schedule_of(settings, total_steps=None):
    """The `TransformerSchedule` of `settings`, or with `schedule` "cosine" a
    `WarmupCosine` over `total_steps` with the same warmup and peak."""
    check_chosen(settings, "schedule", "d_model", "warmup_steps")
    inverse_sqrt = TransformerSchedule(
        settings.d_model, settings.warmup_steps, settings.learning_rate_scale
    )
    if settings.schedule == "inverse_sqrt":
        return inverse_sqrt
    if total_steps is None:
        raise ValueError("The cosine schedule needs `total_steps`.")
    peak = float(keras.ops.convert_to_numpy(inverse_sqrt(settings.warmup_steps - 1)))
    return WarmupCosine(peak, total_steps, warmup_steps=settings.warmup_steps)


def build_translator_model(settings, source_vocabulary_size, target_vocabulary_size):
    """A built `Seq2SeqTransformer` of `settings`' sizes (what `train_translator` trains)."""
    check_chosen(
        settings,
        "sequence_length",
        "num_layers",
        "d_model",
        "intermediate_dim",
        "dropout",
        "source_word_dropout",
    )
    model = Seq2SeqTransformer(
        source_vocabulary_size=source_vocabulary_size,
        target_vocabulary_size=target_vocabulary_size,
        # Targets carry [START] or [END] on top of `sequence_length` tokens.
        sequence_length=settings.sequence_length + 1,
        num_encoder_layers=settings.num_layers,
        num_decoder_layers=settings.num_decoder_layers or settings.num_layers,
        d_model=settings.d_model,
        num_heads=settings.num_heads,
        intermediate_dim=settings.intermediate_dim,
        dropout=settings.dropout,
        source_word_dropout=settings.source_word_dropout,
        share_embeddings=settings.shared_vocabulary,
    )
    model.build()
    return model
