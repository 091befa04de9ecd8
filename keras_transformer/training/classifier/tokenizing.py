"""The classifier's texts as tokens: the vocabulary built, the settings tokenization
fixes chosen, every split encoded (a run folder's, or a token folder's)."""

import os

import numpy as np

from keras_transformer.data.tokens import (
    CLASSIFIER_VOCABULARY,
    ClassificationTokens,
    TokenizedClassificationData,
    classifier_input_length,
    classifier_token_settings,
    classifier_tokenizer_files,
)
from keras_transformer.training.classifier.data_rules import (
    classifier_tokenization_for_checkpoint,
    classifier_tokenization_from_data,
)
from keras_transformer.training.data_rules import choices_record
from keras_transformer.training.runs import say


def tokenize_classification_data(data, settings, vocabulary_dir, verbose=1, unlabeled_texts=()):
    """Builds the vocabulary into `vocabulary_dir`, chooses the settings that
    fix the tokens (`vocabulary_size`, `sequence_length`) where `settings`
    leaves them None, and encodes every split.

    Args:
        data: a `ClassificationData`.
        settings: a `ClassifierSettings`; not changed.
        vocabulary_dir: where `vocabulary.txt` goes (a run folder, or the
            token folder being written).
        verbose: say what is built (the chosen values are the caller's to say).
        unlabeled_texts: more texts for the vocabulary.

    Returns:
        A `TokenizedClassificationData` named as `data`.
    """
    from keras_transformer.text.wordpiece import (  # needs TensorFlow
        WordPieceTokenizer,
        build_vocabulary,
        save_vocabulary,
    )

    unlabeled_texts = list(unlabeled_texts)
    vocabulary_path = os.path.join(vocabulary_dir, CLASSIFIER_VOCABULARY)
    if settings.pretrained is not None:
        return _tokenize_for_checkpoint(data, settings, vocabulary_dir, verbose)

    def build_tokenizer(vocabulary_size):
        # Unlabelled texts shape the vocabulary too; the lengths are the labelled texts'.
        say(
            verbose,
            f"Building a WordPiece vocabulary from {len(data.train) + len(unlabeled_texts)} "
            "texts...",
        )
        save_vocabulary(
            build_vocabulary([*data.train.texts, *unlabeled_texts], vocabulary_size),
            vocabulary_path,
        )
        return WordPieceTokenizer(vocabulary_path)

    settings, chosen = classifier_tokenization_from_data(
        settings, data.train.texts, build_tokenizer
    )
    return encode_classification_data(data, settings, vocabulary_path, choices_record(chosen))


def _tokenize_for_checkpoint(data, settings, vocabulary_dir, verbose):
    """`tokenize_classification_data` for a run that fine-tunes `settings.pretrained`:
    the checkpoint's tokenizer saved into `vocabulary_dir`, its sizes taken,
    `sequence_length` chosen from the texts within its positions."""
    from keras_transformer.models.pretrained import read_checkpoint_config
    from keras_transformer.text.pretrained import PretrainedTokenizer

    config = read_checkpoint_config(settings.pretrained)
    tokenizer = PretrainedTokenizer.from_pretrained(settings.pretrained)
    say(verbose, f"Reading the checkpoint's tokenizer from {settings.pretrained}...")
    tokenizer.save(vocabulary_dir, CLASSIFIER_VOCABULARY)
    settings, chosen = classifier_tokenization_for_checkpoint(
        settings, config, tokenizer, data.train.texts
    )
    return encode_classification_data(
        data,
        settings,
        os.path.join(vocabulary_dir, CLASSIFIER_VOCABULARY),
        choices_record(chosen),
    )


def run_tokenizer(settings, vocabulary_path):
    """The tokenizer a classifier run of `settings` encodes with: the
    checkpoint's rules (`PretrainedTokenizer`, its casing beside
    `vocabulary_path`) when it fine-tunes one, else our `WordPieceTokenizer`."""
    if settings.pretrained is not None:
        from keras_transformer.text.pretrained import PretrainedTokenizer

        return PretrainedTokenizer.from_pretrained(
            os.path.dirname(vocabulary_path), os.path.basename(vocabulary_path)
        )
    from keras_transformer.text.wordpiece import WordPieceTokenizer

    return WordPieceTokenizer(vocabulary_path)


def encoding_arguments(settings):
    """How a classifier run of `settings` wraps each text: `[CLS]` first for
    `cls` pooling, and `[CLS] ... [SEP]` always for a pretrained checkpoint,
    whose inputs were so in pretraining."""
    pretrained = settings.pretrained is not None
    return {"add_cls": pretrained or settings.pooling == "cls", "add_sep": pretrained}


def encode_classification_data(data, settings, vocabulary_path, chosen_from_data=None):
    """`data` encoded with the vocabulary at `vocabulary_path`, to the
    `sequence_length` (or the longer `ngram_length`) and with the pooling of
    `settings` (all chosen), as a `TokenizedClassificationData` named as `data`."""
    import tensorflow as tf

    tokenizer = run_tokenizer(settings, vocabulary_path)
    wrapping = encoding_arguments(settings)

    def encode(split):
        token_ids = tokenizer.encode(
            tf.constant(split.texts, tf.string), classifier_input_length(settings), **wrapping
        )
        return ClassificationTokens(token_ids.numpy(), np.asarray(split.labels, np.int32))

    return TokenizedClassificationData(
        name=data.name,
        source_name=data.name,
        settings={
            name: getattr(settings, name) for name in classifier_token_settings(settings.pretrained)
        },
        chosen_from_data=chosen_from_data or {},
        # A checkpoint's casing rules lie beside its vocabulary (`PretrainedTokenizer.save`).
        vocabulary_files={
            name: os.path.join(os.path.dirname(vocabulary_path), name)
            for name in classifier_tokenizer_files(settings.pretrained)
        },
        class_names=list(data.class_names),
        train=encode(data.train),
        validation=encode(data.validation),
        test=encode(data.test),
    )
