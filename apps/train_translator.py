"""Train the Transformer translator on sentence pairs.

    python -m apps.train_translator --data bible:es-en --run-dir runs/translator
    python -m apps.train_translator --data tsv:spa.txt --max-examples 20000 --time-budget 30
    python -m apps.train_translator --resume            # after a crash or Ctrl-C
    python -m apps.train_translator --mixed-precision bfloat16 --jit-compile --distribute mirrored  # GPUs

Data: `bible:SRC-TGT` (offline Bible verses: es, fr, it, kjv -> en, ...),
`tsv:PATH` (Anki/Tatoeba pairs: source TAB target), `tfds:NAME` (online),
`tokens:DIR` (a folder of `python -m apps.tokenize translator`, which fixes the
vocabularies, --sequence-length, --max-length and --shared-vocabulary).

The run folder has the classifier's layout (vocabularies, backup for
--resume, checkpoints, TensorBoard logs, history.csv, learning_curves.png)
plus samples.json: a few test sources translated greedily after training.
"""

import argparse
import sys

from apps.export import (
    add_translator_export_flags,
    check_translator_export_flags,
    export_run_and_say,
)
from apps.training_flags import (
    TRANSLATOR_RAW_DATA_FLAGS,
    add_hardware_flags,
    add_model_size_flags,
    add_monitor_flag,
    add_run_flags,
    add_translator_token_flags,
    default_help,
    flags_given,
    strategy_and_data,
    token_data_and_settings,
    train_on_chief,
    translation_data_from_flags,
)
from keras_transformer.training.translator.settings import MONITORS, SCHEDULES, TranslatorSettings

DEFAULTS = TranslatorSettings()


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m apps.train_translator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = parser.add_argument_group("data")
    model = parser.add_argument_group("model")
    add_translator_token_flags(data, model, DEFAULTS)
    model.add_argument(
        "--num-layers",
        type=int,
        default=DEFAULTS.num_layers,
        help=default_help(
            DEFAULTS.num_layers, "encoder blocks (and decoder blocks unless --decoder-layers)"
        ),
    )
    model.add_argument(
        "--decoder-layers",
        type=int,
        default=DEFAULTS.num_decoder_layers,
        help="decoder blocks (default: --num-layers)",
    )
    add_model_size_flags(model, DEFAULTS)

    training = parser.add_argument_group("training")
    training.add_argument("--epochs", type=int, default=DEFAULTS.epochs)
    training.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULTS.batch_size,
        help=default_help(DEFAULTS.batch_size),
    )
    training.add_argument(
        "--label-smoothing",
        type=float,
        default=DEFAULTS.label_smoothing,
        help=default_help(DEFAULTS.label_smoothing),
    )
    training.add_argument(
        "--warmup-steps",
        type=int,
        default=DEFAULTS.warmup_steps,
        help=default_help(DEFAULTS.warmup_steps),
    )
    training.add_argument(
        "--learning-rate-scale",
        type=float,
        default=DEFAULTS.learning_rate_scale,
        help="multiplies the paper's warmup schedule (the peak of both schedules)",
    )
    training.add_argument(
        "--schedule",
        choices=SCHEDULES,
        default=DEFAULTS.schedule,
        help="after the warmup: inverse_sqrt (the paper's 1/sqrt(step)) or cosine (to 0 "
        "at the last planned step, or where --time-budget ends; "
        f"{default_help(DEFAULTS.schedule)})",
    )
    add_run_flags(training, DEFAULTS, run_dir="runs/translator")
    add_monitor_flag(training, MONITORS, DEFAULTS.monitor)
    training.add_argument(
        "--chrf-pairs",
        type=int,
        default=DEFAULTS.chrf_pairs,
        metavar="N",
        help="validation pairs (a seeded subset) translated greedily after every epoch "
        f"to log val_chrf (default {DEFAULTS.chrf_pairs}; 0 = none, which needs "
        "another --monitor)",
    )
    add_hardware_flags(parser)

    export = parser.add_argument_group("export")
    export.add_argument("--export-dir", default="exported_models/translator")
    export.add_argument("--no-export", action="store_true", help="train only")
    add_translator_export_flags(export)
    return parser


def check_flags(args):
    check_translator_export_flags(args)


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    given = flags_given(parser, argv)
    settings = TranslatorSettings(
        epochs=args.epochs,
        batch_size=args.batch_size,
        sequence_length=args.sequence_length,
        max_length=args.max_length,
        vocabulary_size=args.vocab_size,
        num_layers=args.num_layers,
        num_decoder_layers=args.decoder_layers,
        d_model=args.d_model,
        num_heads=args.num_heads,
        intermediate_dim=args.intermediate_dim,
        dropout=args.dropout,
        label_smoothing=args.label_smoothing,
        warmup_steps=args.warmup_steps,
        learning_rate_scale=args.learning_rate_scale,
        patience=args.patience,
        seed=args.seed,
        mixed_precision=args.mixed_precision,
        jit_compile=args.jit_compile,
        monitor=args.monitor,
        chrf_pairs=args.chrf_pairs,
        shared_vocabulary=args.shared_vocabulary,
        schedule=args.schedule,
    )

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
    print(f"Run folder: {run.run_dir} (samples.json, learning_curves.png, model.keras)")
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
