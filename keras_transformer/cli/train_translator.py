"""Train the Transformer translator on sentence pairs.

    keras-transformer train-translator --data bible:es-en --run-dir runs/translator
    keras-transformer train-translator --data tsv:spa.txt --max-examples 20000 --time-budget 30
    keras-transformer train-translator --resume            # after a crash or Ctrl-C
    keras-transformer train-translator --mixed-precision bfloat16 --jit-compile \
        --distribute mirrored                           # GPUs

Data: `bible:SRC-TGT` (offline Bible verses: es, fr, it, kjv -> en, ...),
`tsv:PATH` (Anki/Tatoeba pairs: source TAB target), `tfds:NAME` (online),
`tokens:DIR` (a folder of `keras-transformer tokenize translator`, which fixes the
vocabularies, --sequence-length, --max-length and --shared-vocabulary).

The run folder has the classifier's layout (vocabularies, backup for
--resume, checkpoints, TensorBoard logs, history.csv, learning_curves.png).
After training the whole test split is translated greedily: metrics.json
holds its BLEU and chrF (sacrebleu's, cased, 13a; without sacrebleu chrF only),
test_translations.tsv every translation beside its source and reference, and
samples.json the first few.
"""

import argparse
import sys

from keras_transformer.cli.export import (
    add_translator_export_flags,
    check_translator_export_flags,
    export_run_and_say,
)
from keras_transformer.cli.training_flags import (
    TRANSLATOR_RAW_DATA_FLAGS,
    add_training_flags,
    add_translator_data_flags,
    flags_given,
    settings_from_flags,
    strategy_and_data,
    token_data_and_settings,
    train_on_chief,
    translation_data_from_flags,
)
from keras_transformer.training.translator.settings import TranslatorSettings


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-transformer train-translator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_training_flags(
        parser, TranslatorSettings, add_translator_data_flags, run_dir="runs/translator"
    )
    export = parser.add_argument_group("export")
    export.add_argument("--export-dir", default="exported_models/translator")
    export.add_argument("--no-export", action="store_true", help="train only")
    add_translator_export_flags(export)
    return parser


def settings_from(args):
    return settings_from_flags(TranslatorSettings, args)


def check_flags(args):
    check_translator_export_flags(args)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    given = flags_given(parser, argv)
    settings = settings_from(args)

    def load_data():
        tokens = token_data_and_settings(
            args, given, "translator", settings, TRANSLATOR_RAW_DATA_FLAGS
        )
        return tokens if tokens is not None else (translation_data_from_flags(args), settings)

    strategy, data, settings = strategy_and_data(
        parser, args, settings, load_data, check_flags=check_flags
    )

    from keras_transformer.training.translator.pipeline import train_translator

    print(
        f"{data.name} ({data.source_language} -> {data.target_language}): {len(data.train)} train, "
        f"{len(data.validation)} validation, {len(data.test)} test pairs",
        flush=True,
    )
    run = train_on_chief(parser, args, train_translator, data, settings, strategy)
    if run is None:
        return 0
    print(
        f"Run folder: {run.run_dir} (metrics.json, test_translations.tsv, samples.json, "
        "learning_curves.png, model.keras)"
    )
    if not args.no_export:
        export_run_and_say(
            run.run_dir,
            args.export_dir,
            beam_width=args.beam_width,
            length_penalty=args.length_penalty,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
