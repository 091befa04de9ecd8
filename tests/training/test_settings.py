"""Each setting declared once: the flags, the defaults and the checks derive from its field."""

import dataclasses

import pytest

from keras_transformer.cli import train_classifier, train_translator
from keras_transformer.training.classifier.settings import ClassifierSettings
from keras_transformer.training.settings import flag_of, help_text
from keras_transformer.training.translator.settings import TranslatorSettings

APPS = [(train_classifier, ClassifierSettings), (train_translator, TranslatorSettings)]


@pytest.mark.parametrize("app, settings_class", APPS)
def test_no_flags_give_the_default_settings(app, settings_class):
    assert app.settings_from(app.build_parser().parse_args([])) == settings_class()


@pytest.mark.parametrize("app, settings_class", APPS)
def test_every_setting_but_those_only_code_sets_has_its_flag(app, settings_class):
    parser = app.build_parser()
    flags = {flag: action for action in parser._actions for flag in action.option_strings}
    for field in dataclasses.fields(settings_class):
        flag = flag_of(field)
        if field.name in ("clip_norm", "target_vocabulary_size"):
            assert flag is None
            continue
        assert flags[flag].dest == field.name
        assert flags[flag].default == field.default
        assert flags[flag].help == help_text(field)


def test_a_flag_sets_its_setting_under_another_name():
    parser = train_translator.build_parser()
    args = parser.parse_args(
        ["--vocab-size", "300", "--decoder-layers", "2", "--shared-vocabulary"]
    )
    settings = train_translator.settings_from(args)
    assert (settings.vocabulary_size, settings.num_decoder_layers) == (300, 2)
    assert settings.shared_vocabulary is True
    no_bag = train_classifier.settings_from(
        train_classifier.build_parser().parse_args(["--no-bag-of-ngrams"])
    )
    assert no_bag.bag_of_ngrams is False


def test_from_data_lists_the_settings_declared_so():
    assert ClassifierSettings.FROM_DATA == (
        "sequence_length",
        "ngram_length",
        "vocabulary_size",
        "ngram_l2",
        "ngram_buckets",
        "batch_size",
        "warmup_fraction",
    )
    assert set(TranslatorSettings.FROM_DATA) == {
        "vocabulary_size",
        "target_vocabulary_size",
        "sequence_length",
        "num_layers",
        "d_model",
        "intermediate_dim",
        "dropout",
        "source_word_dropout",
        "label_smoothing",
        "warmup_steps",
        "schedule",
        "patience",
        "average_epochs",
    }


def test_help_says_the_default_or_that_the_data_chooses():
    fields = {field.name: field for field in dataclasses.fields(ClassifierSettings)}
    assert help_text(fields["d_model"]) == "default 128"
    assert help_text(fields["batch_size"]) == "default: from the data"
    assert help_text(fields["ngram_refit"]).endswith("(default: on)")
    assert help_text(fields["num_layers"]) is None


@pytest.mark.parametrize(
    "settings, message",
    [
        (ClassifierSettings(monitor="val_chrf"), "`monitor` must be one of val_accuracy"),
        (ClassifierSettings(pooling="sum"), "`pooling` must be one of mean, max, cls"),
        (ClassifierSettings(epochs=0), "`epochs` must be a positive integer, got 0"),
        (ClassifierSettings(batch_size=True), "`batch_size` must be a positive integer"),
        (ClassifierSettings(pretrain_epochs=-1), "`pretrain_epochs` must be a non-negative"),
        (ClassifierSettings(jit_compile="yes"), "`jit_compile` must be True or False"),
        (ClassifierSettings(mixed_precision="int8"), "`mixed_precision` must be one of off"),
        (TranslatorSettings(num_decoder_layers=0), "`num_decoder_layers` must be a positive"),
        (TranslatorSettings(chrf_pairs=-1), "`chrf_pairs` must be a non-negative integer"),
        (TranslatorSettings(shared_vocabulary=1), "`shared_vocabulary` must be True or False"),
        (
            TranslatorSettings(source_word_dropout=1.0),
            r"`source_word_dropout` must be a number in \[0, 1\), got 1.0",
        ),
        (TranslatorSettings(source_word_dropout="0.1"), "`source_word_dropout` must be a number"),
        (ClassifierSettings(dropout=-0.1), r"`dropout` must be a number in \[0, 1\)"),
    ],
)
def test_the_declared_checks_name_the_bad_setting(settings, message):
    with pytest.raises(ValueError, match=message):
        settings.validate()


def test_settings_left_to_the_data_pass_the_checks_until_chosen():
    assert TranslatorSettings().validate() == TranslatorSettings()
    assert ClassifierSettings().validate() == ClassifierSettings()
