"""Train the Transformer text classifier, evaluate it, export a SavedModel.

    keras-transformer train-classifier --data bbc --export-dir exported_models/classifier
    keras-transformer train-classifier --data csv:reviews.csv --text-column review --label-column stars
    keras-transformer train-classifier --resume            # after a crash or Ctrl-C
    keras-transformer train-classifier --data csv:reviews.csv --search 4 --time-budget 20
    keras-transformer train-classifier --mixed-precision bfloat16 --jit-compile \
        --distribute mirrored                           # GPUs

Data: `bbc` (BBC News, offline), `csv:PATH` / `tsv:PATH` (your own file with a
header row), `tfds:NAME` (TensorFlow Datasets, online, optional package),
`tokens:DIR` (a folder of `keras-transformer tokenize classifier`, which fixes
the vocabulary, --sequence-length, --max-length and [CLS] pooling).

--pretrained PATH fine-tunes a BERT-family checkpoint folder (Hugging Face's
layout; nothing downloads) instead of training a Transformer from scratch:

    keras-transformer train-classifier --data csv:reviews.csv --pretrained all-MiniLM-L6-v2
    keras-transformer train-classifier --data csv:reviews.csv --pretrained all-MiniLM-L6-v2 \
        --lora-rank 8                                   # low-rank adapters only
    keras-transformer train-classifier --data csv:reviews.csv --pretrained all-MiniLM-L6-v2 \
        --search 2                                      # the peak rate chosen on validation
    keras-transformer train-classifier --data tokens:DIR --pretrained all-MiniLM-L6-v2
                                # DIR from `tokenize classifier --pretrained` (JAX too)

The run folder (--run-dir) keeps the vocabulary, a backup every epoch (for
--resume), checkpoints (last.keras, best.keras: the epoch with the best
--monitor, which the export also gets), TensorBoard logs
(`tensorboard --logdir RUN_DIR/logs`), history.csv, metrics.json with the
test-split report, confusion_matrix.png and learning_curves.png. The export
goes to EXPORT_DIR/N, N one above the newest version there.
"""

import argparse
import functools
import sys

from keras_transformer.cli.export import export_run_and_say
from keras_transformer.cli.training_flags import (
    CLASSIFIER_RAW_DATA_FLAGS,
    add_classifier_data_flags,
    add_training_flags,
    classification_data_from_flags,
    flags_given,
    setting_flag,
    settings_from_flags,
    strategy_and_data,
    token_data_and_settings,
    train_on_chief,
)
from keras_transformer.training.classifier.data_rules import CHECKPOINT_SIZES
from keras_transformer.training.classifier.pretraining import read_unlabeled_texts
from keras_transformer.training.classifier.settings import ClassifierSettings
from keras_transformer.training.settings import fine_tuning_defaults


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-transformer train-classifier",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    groups = add_training_flags(
        parser, ClassifierSettings, add_classifier_data_flags, run_dir="runs/classifier"
    )
    groups["data"].add_argument(
        "--unlabeled",
        default=None,
        metavar="PATH",
        help="UTF-8 file of unlabelled texts, one a line, for the vocabulary and "
        "--pretrain-epochs (give it again with --resume)",
    )
    groups["training"].add_argument(
        "--search",
        type=int,
        default=0,
        metavar="N",
        help="try N configurations (blocks, width, dropout, pooling, learning rate; not those "
        "given as flags) with KerasTuner, the first the flags as given, each in an equal "
        "share of --time-budget, and keep the one whose Transformer scores best by --monitor "
        "on validation; with --pretrained, only the peak learning rate, from the fine-tuning "
        "default up; RUN_DIR/search.json lists them (default 0: train once)",
    )
    export = parser.add_argument_group("export")
    export.add_argument("--export-dir", default="exported_models/classifier")
    export.add_argument("--no-export", action="store_true", help="train and evaluate only")
    return parser


def settings_from(args, given=frozenset()):
    """The run's settings: the flags, with `--pretrained`'s fine-tuning defaults for those
    not given."""
    return fine_tuning_defaults(settings_from_flags(ClassifierSettings, args), given)


def check_flags(args, given=frozenset()):
    if args.max_examples is not None and args.max_examples < 2:
        raise ValueError(f"--max-examples must be at least 2, got {args.max_examples}.")
    if args.unlabeled is not None and not args.pretrain_epochs:
        raise ValueError("--unlabeled texts are for pretraining: give --pretrain-epochs too.")
    if args.search < 0:
        raise ValueError(f"--search takes the number of configurations to try, got {args.search}.")
    if args.search and args.pretrain_epochs:
        raise ValueError(
            "--search does not pretrain its trials: drop --pretrain-epochs or --search."
        )
    if args.pretrained is not None:
        from keras_transformer.models.pretrained import read_checkpoint_config  # loads Keras

        read_checkpoint_config(args.pretrained)
        fixed = [
            setting_flag(ClassifierSettings, name)
            for name in CHECKPOINT_SIZES
            if name in given and name != "vocabulary_size"
        ]
        if fixed:
            raise ValueError(
                f"{', '.join(fixed)}: the checkpoint {args.pretrained} fixes the encoder's sizes; "
                "drop them."
            )


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    given = flags_given(parser, argv)
    settings_of = functools.partial(settings_from, given=given)

    def load_data():
        # Pretraining masks raw texts: a token folder has none to give it.
        tokens = token_data_and_settings(
            args,
            given,
            "classifier",
            settings_of(args),
            (*CLASSIFIER_RAW_DATA_FLAGS, "--unlabeled", "--pretrain-epochs"),
        )
        if tokens is not None:
            return (tokens[0], []), tokens[1]
        unlabeled_texts = read_unlabeled_texts(args.unlabeled) if args.unlabeled is not None else []
        return (classification_data_from_flags(args), unlabeled_texts), settings_of(args)

    strategy, (data, unlabeled_texts), settings = strategy_and_data(
        parser,
        args,
        settings_of(args),
        load_data,
        check_flags=functools.partial(check_flags, given=given),
    )

    # Imported late so that `--help` and bad flags answer without loading TensorFlow's model code.
    from keras_transformer.training.classifier.pipeline import train_classifier

    print(
        f"{data.name}: {len(data.train)} train, {len(data.validation)} validation, "
        f"{len(data.test)} test texts; classes {', '.join(data.class_names)}",
        flush=True,
    )
    train = functools.partial(train_classifier, unlabeled_texts=unlabeled_texts)
    if args.search:
        from keras_transformer.training.classifier.search import search_classifier

        train = functools.partial(search_classifier, trials=args.search, fixed=given)
    run = train_on_chief(parser, args, train, data, settings, strategy)
    if run is None:
        return 0
    print(f"Run folder: {run.run_dir} (metrics.json, confusion_matrix.png, learning_curves.png)")
    if not args.no_export:
        export_run_and_say(run.run_dir, args.export_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
