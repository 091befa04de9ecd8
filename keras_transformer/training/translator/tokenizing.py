"""The translator's pairs as tokens: the run's vocabularies built and read, the
settings tokenization fixes chosen, every split encoded (a run folder's, or a
token folder's)."""

import dataclasses

from keras_transformer.data.tokens import (
    SHARED_VOCABULARY,
    SOURCE_VOCABULARY,
    TARGET_VOCABULARY,
    TRANSLATOR_TOKEN_SETTINGS,
    TokenizedTranslationData,
    TranslationTokens,
)
from keras_transformer.text.vocabulary import read_vocabulary
from keras_transformer.training.data_rules import choices_record
from keras_transformer.training.runs import RunFolder, say
from keras_transformer.training.translator.data_rules import (
    target_word_count,
    translator_tokenization_from_data,
)


def tokenize_translation_data(data, settings, vocabulary_dir, verbose=1):
    """Builds the vocabularies into `vocabulary_dir`, chooses the settings that
    fix the tokens (the vocabulary sizes, `sequence_length`) where `settings`
    leaves them None, and encodes every split.

    Args:
        data: a `TranslationData`.
        settings: a `TranslatorSettings`; not changed.
        vocabulary_dir: where the vocabulary files go (a run folder, or the
            token folder being written).
        verbose: say what is built (the chosen values are the caller's to say).

    Returns:
        A `TokenizedTranslationData` named as `data`.
    """
    folder = RunFolder(vocabulary_dir)

    def build_tokenizers(source_vocabulary_size, target_vocabulary_size):
        say(verbose, f"Building WordPiece vocabularies from {len(data.train)} training pairs...")
        sizes = dataclasses.replace(
            settings,
            vocabulary_size=source_vocabulary_size,
            target_vocabulary_size=target_vocabulary_size,
        )
        build_run_vocabularies(folder, data, sizes)
        return run_tokenizers(folder, sizes)

    settings, chosen = translator_tokenization_from_data(
        settings, data.train.sources, data.train.targets, build_tokenizers
    )
    return encode_translation_data(data, settings, folder, choices_record(chosen))


def encode_translation_data(data, settings, vocabulary_folder, chosen_from_data=None):
    """`data` encoded with the vocabularies in `vocabulary_folder` (a `RunFolder`)
    at `settings.sequence_length`, as a `TokenizedTranslationData` named as `data`."""
    import tensorflow as tf

    source_tokenizer, target_tokenizer = run_tokenizers(vocabulary_folder, settings)

    def encode(split, keep_texts):
        source_ids = source_tokenizer.encode(
            tf.constant(split.sources), settings.sequence_length
        ).numpy()
        target_ids = target_tokenizer.encode(
            tf.constant(split.targets), settings.sequence_length + 1, add_start_end=True
        ).numpy()
        texts = (
            {"sources": list(split.sources), "targets": list(split.targets)} if keep_texts else {}
        )
        return TranslationTokens(source_ids, target_ids, **texts)

    files = (
        [SHARED_VOCABULARY]
        if settings.shared_vocabulary
        else [SOURCE_VOCABULARY, TARGET_VOCABULARY]
    )
    return TokenizedTranslationData(
        name=data.name,
        source_name=data.name,
        settings={name: getattr(settings, name) for name in TRANSLATOR_TOKEN_SETTINGS},
        chosen_from_data=chosen_from_data or {},
        vocabulary_files={file_name: vocabulary_folder.file(file_name) for file_name in files},
        source_language=data.source_language,
        target_language=data.target_language,
        train_target_words=target_word_count(data.train.targets),
        train=encode(data.train, keep_texts=False),
        validation=encode(data.validation, keep_texts=True),
        test=encode(data.test, keep_texts=True),
    )


def build_run_vocabularies(folder, data, settings):
    """Learns the run's vocabularies from the training pairs into `folder` (read by
    `run_tokenizers`)."""
    from keras_transformer.text.wordpiece import build_vocabulary, save_vocabulary

    if settings.shared_vocabulary:
        # Cased, since its tokens are also the output.
        vocabulary = build_vocabulary(
            [*data.train.sources, *data.train.targets], settings.vocabulary_size, lower_case=False
        )
        save_vocabulary(vocabulary, folder.file(SHARED_VOCABULARY))
        return
    # Sources are lower-cased (less sparsity); targets keep case, since they are output.
    save_vocabulary(
        build_vocabulary(data.train.sources, settings.vocabulary_size),
        folder.file(SOURCE_VOCABULARY),
    )
    save_vocabulary(
        build_vocabulary(data.train.targets, settings.target_vocabulary_size, lower_case=False),
        folder.file(TARGET_VOCABULARY),
    )


def run_tokenizers(folder, settings):
    """The run's `(source, target)` tokenizers: one object twice with `shared_vocabulary`."""
    from keras_transformer.text.wordpiece import WordPieceTokenizer

    if settings.shared_vocabulary:
        tokenizer = WordPieceTokenizer(folder.file(SHARED_VOCABULARY), lower_case=False)
        return tokenizer, tokenizer
    return (
        WordPieceTokenizer(folder.file(SOURCE_VOCABULARY)),
        WordPieceTokenizer(folder.file(TARGET_VOCABULARY), lower_case=False),
    )


def run_vocabularies(folder, settings):
    """The run's `(source, target)` vocabularies as lists of tokens (no TensorFlow needed)."""
    if settings.shared_vocabulary:
        vocabulary = read_vocabulary(folder.file(SHARED_VOCABULARY))
        return vocabulary, vocabulary
    return read_vocabulary(folder.file(SOURCE_VOCABULARY)), read_vocabulary(
        folder.file(TARGET_VOCABULARY)
    )
