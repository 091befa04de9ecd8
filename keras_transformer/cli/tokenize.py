"""Tokenize a corpus once, into a folder that training reads without TensorFlow.

    keras-transformer tokenize classifier --data bbc --out tokens/bbc
    keras-transformer tokenize translator --data bible:es-en --out tokens/bible-es-en
    # then train here, or on a machine without TensorFlow:
    keras-transformer train-classifier --data tokens:tokens/bbc
    # a BERT-family checkpoint's tokens, to fine-tune it from the folder:
    keras-transformer tokenize classifier --data csv:reviews.csv --pretrained all-MiniLM-L6-v2 \
        --out tokens/reviews-minilm
    keras-transformer train-classifier --data tokens:tokens/reviews-minilm \
        --pretrained all-MiniLM-L6-v2

The data and vocabulary flags are the training app's: the folder holds the
same split, vocabulary and token ids that a training run of the same flags
builds, and training from it gives the same run. The settings that
tokenization fixes (vocabulary, --sequence-length, --max-length, [CLS]
pooling, --shared-vocabulary) are kept in DIR/tokens.json; training chooses
the rest (batch size, warmup, the translator's size) from the folder's counts
as it would from the texts. An earlier token folder at --out is replaced;
any other non-empty folder is refused.

With --pretrained PATH the texts are encoded as the fine-tuning run of
keras-transformer train-classifier --pretrained PATH encodes them: the
checkpoint's vocabulary and casing rules (saved in the folder), [CLS] text
[SEP], --sequence-length chosen from the texts within the checkpoint's
positions. Training from the folder takes --pretrained again: that
checkpoint, or one of the same vocabulary, casing and sizes (its path may
differ); the pooling is the training run's choice.
"""

import argparse
import sys

from keras_transformer.cli.training_flags import (
    add_classifier_data_flags,
    add_settings_flags,
    add_translator_data_flags,
    classification_data_from_flags,
    flags_given,
    settings_from_flags,
    translation_data_from_flags,
)
from keras_transformer.data import DataError
from keras_transformer.data.tokens import (
    CLASSIFIER_TOKEN_SETTINGS,
    SPLITS,
    TRANSLATOR_TOKEN_SETTINGS,
    folder_size,
    read_token_folder,
    save_tokenized,
    token_folder_writer,
)
from keras_transformer.training.classifier.settings import ClassifierSettings
from keras_transformer.training.classifier.tokenizing import tokenize_classification_data
from keras_transformer.training.data_rules import choices_from_record
from keras_transformer.training.settings import fine_tuning_defaults
from keras_transformer.training.translator.settings import TranslatorSettings
from keras_transformer.training.translator.tokenizing import tokenize_translation_data

# Per task: its settings, the flags of its raw data, the settings tokenization fixes
# (with the classifier's checkpoint, whose vocabulary it may encode with).
TASKS = {
    "classifier": (
        ClassifierSettings,
        add_classifier_data_flags,
        (*CLASSIFIER_TOKEN_SETTINGS, "pretrained"),
    ),
    "translator": (TranslatorSettings, add_translator_data_flags, TRANSLATOR_TOKEN_SETTINGS),
}


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-transformer tokenize",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    tasks = parser.add_subparsers(dest="task", required=True, metavar="{classifier,translator}")
    for task, (settings_class, add_data_flags, token_settings) in TASKS.items():
        task_parser = tasks.add_parser(
            task,
            help=f"the data and vocabulary flags of keras-transformer train-{task}",
        )
        # Which flags were given (fine-tuning defaults fill the others) is the task's parser's
        # to tell.
        task_parser.set_defaults(task_parser=task_parser)
        task_parser.add_argument(
            "--out", required=True, metavar="DIR", help="the token folder to write"
        )
        data = task_parser.add_argument_group("data")
        add_data_flags(data, token_folders=False)
        groups = {"data": data, "model": task_parser.add_argument_group("tokens")}
        # The seed of the split and the subsets: among the general options.
        add_settings_flags(
            {**groups, "training": task_parser}, settings_class, (*token_settings, "seed")
        )
    return parser


def settings_from(args, given=frozenset()):
    """The training settings the flags set, the rest at their defaults (`--pretrained`'s
    fine-tuning defaults for those not in `given`, as the training app takes them)."""
    return fine_tuning_defaults(settings_from_flags(TASKS[args.task][0], args), given)


def main(argv=None):
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    # The task comes first: the rest are its flags.
    given = flags_given(args.task_parser, argv[argv.index(args.task) + 1 :])
    try:
        settings = settings_from(args, given).validate()
        if getattr(args, "pretrained", None) is not None and "pooling" in given:
            raise ValueError(
                "--pooling is the fine-tuning run's choice: a checkpoint's tokens start with "
                "[CLS] whatever the pooling. Give it to keras-transformer train-classifier."
            )
        if args.max_examples is not None and args.max_examples < 2:
            raise ValueError(f"--max-examples must be at least 2, got {args.max_examples}.")
        if args.task == "classifier":
            data = classification_data_from_flags(args)
            print(
                f"{data.name}: {len(data.train)} train, {len(data.validation)} validation, "
                f"{len(data.test)} test texts; classes {', '.join(data.class_names)}",
                flush=True,
            )
        else:
            data = translation_data_from_flags(args)
            print(
                f"{data.name} ({data.source_language} -> {data.target_language}): "
                f"{len(data.train)} train, {len(data.validation)} validation, "
                f"{len(data.test)} test pairs",
                flush=True,
            )
        tokenize = (
            tokenize_classification_data if args.task == "classifier" else tokenize_translation_data
        )
        with token_folder_writer(args.out) as folder:
            tokenized = tokenize(data, settings, folder)
            for choice in choices_from_record(tokenized.chosen_from_data):
                print(choice.line())
            save_tokenized(tokenized, folder)
        written = read_token_folder(args.out, args.task)
    except (DataError, ValueError) as error:
        parser.exit(2, f"error: {error}\n")
    counts = ", ".join(f"{len(getattr(written, split))} {split}" for split in SPLITS)
    size = folder_size(args.out)
    size = f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.0f} KiB"
    pretrained = getattr(args, "pretrained", None)
    pretrained = f" --pretrained {pretrained}" if pretrained is not None else ""
    print(
        f"Token folder: {args.out} ({counts}; {size}). "
        f"Train from it: keras-transformer train-{args.task} --data tokens:{args.out}{pretrained}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
