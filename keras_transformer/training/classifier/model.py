"""The classifier's model built and compiled from `ClassifierSettings`, and the builder
its masked-token pretraining model shares."""

import keras

from keras_transformer.models import TransformerClassifier
from keras_transformer.training.compiling import compile_for_fit
from keras_transformer.training.data_rules import check_chosen
from keras_transformer.training.distribute import dtype_policy, strategy_scope
from keras_transformer.training.metrics import MacroF1
from keras_transformer.training.schedules import WarmupCosine


def build_classifier_model(settings, vocabulary_size, num_classes, steps_per_epoch, strategy=None):
    """The built and compiled `TransformerClassifier` that `train_classifier` trains,
    with a `WarmupCosine` learning rate sized by `settings.epochs`.

    Created in `strategy`'s scope (its variables then live on every replica)
    under `settings.mixed_precision`'s dtype policy, compiled with XLA when
    `settings.jit_compile`. Under mixed_float16, `compile` wraps the
    optimizer in a `keras.optimizers.LossScaleOptimizer`.
    """
    check_chosen(settings, "sequence_length", "warmup_fraction")
    if settings.pretrained is not None:
        return _build_fine_tuned_model(
            settings, num_classes, settings.epochs * steps_per_epoch, strategy
        )
    return build_compiled_model(
        settings,
        TransformerClassifier,
        settings.epochs * steps_per_epoch,
        loss="sparse_categorical_crossentropy",
        make_metrics=lambda: _classifier_metrics(settings, num_classes),
        strategy=strategy,
        vocabulary_size=vocabulary_size,
        num_classes=num_classes,
        pooling=settings.pooling,
        **_bag_of_ngrams_beside(settings),
    )


def _build_fine_tuned_model(settings, num_classes, total_steps, strategy):
    """`build_classifier_model` for a run that fine-tunes `settings.pretrained`: a
    `PretrainedClassifier` on the checkpoint's encoder (its low-rank adapters only
    with `settings.lora_rank`), with the bag of n-grams of `settings` beside it."""
    from keras_transformer.models.pretrained_classifier import PretrainedClassifier

    return _compiled(
        settings,
        lambda: PretrainedClassifier.from_pretrained(
            settings.pretrained,
            num_classes,
            pooling=settings.pooling,
            dropout=settings.dropout,
            lora_rank=settings.lora_rank,
            sequence_length=settings.sequence_length,
            **_bag_of_ngrams_beside(settings),
        ),
        total_steps,
        "sparse_categorical_crossentropy",
        lambda: _classifier_metrics(settings, num_classes),
        strategy,
        make_optimizer=lambda model: build_fine_tuning_adamw(settings, total_steps, model),
    )


def _classifier_metrics(settings, num_classes):
    return [
        keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
        *([MacroF1(num_classes)] if settings.monitor == "val_macro_f1" else []),
    ]


def _bag_of_ngrams_beside(settings):
    """The classifier's `bag_of_ngrams` and `ngram_length` arguments for `settings`."""
    return {
        "bag_of_ngrams": bag_of_ngrams_arguments(settings),
        "ngram_length": settings.ngram_length if settings.bag_of_ngrams is not False else None,
    }


def bag_of_ngrams_arguments(settings):
    """The `bag_of_ngrams` argument of `TransformerClassifier` for `settings`:
    None, or `BagOfNgrams` arguments: `ngram_l2` as `l2`, with a bias (the
    regression's intercept), `ngram_buckets` hashed rows per family, word
    features unless `ngram_units` is `"pieces"`, frozen (`add_bag_of_ngrams` fits it), unless the dict says
    otherwise."""
    if settings.bag_of_ngrams is False:
        return None
    given = {} if settings.bag_of_ngrams is True else dict(settings.bag_of_ngrams)
    if "l2" not in given:
        check_chosen(settings, "ngram_l2")
        given["l2"] = settings.ngram_l2
    check_chosen(settings, "ngram_buckets")
    buckets = {"num_buckets": settings.ngram_buckets}
    if settings.ngram_units != "pieces":
        buckets["num_word_buckets"] = settings.ngram_buckets
    return {"use_bias": True, "trainable": False, **buckets, **given}


def build_compiled_model(
    settings, model_class, total_steps, loss, make_metrics, strategy=None, **model_arguments
):
    """A `model_class` with the encoder sizes of `settings` and `model_arguments`,
    built and compiled with `build_adamw` over `total_steps`, ready for `fit`.

    Created in `strategy`'s scope under `settings.mixed_precision`'s dtype
    policy, with the metrics `make_metrics()` returns (created in that scope
    too), compiled with XLA when `settings.jit_compile`.
    """
    return _compiled(
        settings,
        lambda: model_class(
            sequence_length=settings.sequence_length,
            num_layers=settings.num_layers,
            d_model=settings.d_model,
            num_heads=settings.num_heads,
            intermediate_dim=settings.intermediate_dim,
            dropout=settings.dropout,
            **model_arguments,
        ),
        total_steps,
        loss,
        make_metrics,
        strategy,
    )


def _compiled(settings, make_model, total_steps, loss, make_metrics, strategy, make_optimizer=None):
    """`make_model()` created, built and compiled for `fit` as `build_compiled_model` says,
    with `make_optimizer(model)` (default: `build_adamw`)."""
    with strategy_scope(strategy), dtype_policy(settings.mixed_precision):
        model = make_model()
        # BackupAndRestore loads weights before the first batch, so they must exist.
        model.build((None, settings.sequence_length))
        compile_for_fit(
            model,
            build_adamw(settings, total_steps) if make_optimizer is None else make_optimizer(model),
            loss=loss,
            metrics=make_metrics(),
            jit_compile=settings.jit_compile,
        )
    return model


def build_adamw(settings, total_steps):
    """The AdamW of `settings` (weight decay, clipping) with a `WarmupCosine` over `total_steps`."""
    check_chosen(settings, "warmup_fraction")
    return keras.optimizers.AdamW(
        learning_rate=WarmupCosine(settings.learning_rate, total_steps, settings.warmup_fraction),
        weight_decay=settings.weight_decay,
        clipnorm=settings.clip_norm,
    )


def build_fine_tuning_adamw(settings, total_steps, model):
    """`build_adamw` for fine-tuning `model`, a `PretrainedClassifier`: a `FineTuningAdamW`
    whose encoder blocks and embeddings learn at `settings.layer_decay`'s factors, with no
    weight decay on the layer norms and biases."""
    from keras_transformer.models import FineTuningAdamW

    check_chosen(settings, "warmup_fraction")
    return FineTuningAdamW(
        learning_rate=WarmupCosine(settings.learning_rate, total_steps, settings.warmup_fraction),
        weight_decay=settings.weight_decay,
        clipnorm=settings.clip_norm,
        learning_rate_factors=model.encoder.layer_decay_factors(settings.layer_decay),
    )
