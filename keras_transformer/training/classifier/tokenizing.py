"""The classifier's texts as tokens: the vocabulary built, the settings tokenization
fixes chosen, every split encoded (a run folder's, or a token folder's)."""

import os

import numpy as np

from keras_transformer.data.tokens import (
    CLASSIFIER_TOKEN_SETTINGS,
    CLASSIFIER_VOCABULARY,
    ClassificationTokens,
    TokenizedClassificationData,
    classifier_input_length,
)
from keras_transformer.training.classifier.data_rules import classifier_tokenization_from_data
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


def encode_classification_data(data, settings, vocabulary_path, chosen_from_data=None):
    """`data` encoded with the vocabulary at `vocabulary_path`, to the
    `sequence_length` (or the longer `ngram_length`) and with the pooling of
    `settings` (all chosen), as a `TokenizedClassificationData` named as `data`."""
    import tensorflow as tf

    from keras_transformer.text.wordpiece import WordPieceTokenizer

    tokenizer = WordPieceTokenizer(vocabulary_path)
    add_cls = settings.pooling == "cls"

    def encode(split):
        token_ids = tokenizer.encode(
            tf.constant(split.texts, tf.string), classifier_input_length(settings), add_cls=add_cls
        )
        return ClassificationTokens(token_ids.numpy(), np.asarray(split.labels, np.int32))

    return TokenizedClassificationData(
        name=data.name,
        source_name=data.name,
        settings={name: getattr(settings, name) for name in CLASSIFIER_TOKEN_SETTINGS},
        chosen_from_data=chosen_from_data or {},
        vocabulary_files={CLASSIFIER_VOCABULARY: vocabulary_path},
        class_names=list(data.class_names),
        train=encode(data.train),
        validation=encode(data.validation),
        test=encode(data.test),
    )
