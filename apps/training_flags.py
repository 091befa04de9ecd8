"""What `train_classifier`, `train_translator` and `tokenize` share: the flags
of the data and its tokens, of a model's size, of a run and of where training
computes, and the flow from flags to a trained run (usage errors exit with
status 2 and one `error:` line)."""

import argparse
import sys

from keras_transformer.data import DataError, load_classification_data, load_translation_data
from keras_transformer.data.registry import TOKEN_SOURCE, token_folder_path
from keras_transformer.data.tokens import read_token_folder, settings_from_tokens
from keras_transformer.training.distribute import (
    DISTRIBUTE_CHOICES,
    MIXED_PRECISION_POLICIES,
    check_batch_size,
    check_jit_compile,
    describe_strategy,
    is_chief,
    make_strategy,
    worker_name,
)


def default_help(default, text=None):
    """A flag's help ending with its default; None is "from the data"
    (chosen from the training split before training, see `data_defaults`)."""
    said = "default: from the data" if default is None else f"default {default}"
    return f"{text} ({said})" if text else said


# The flags that only shape raw texts, per task: a token folder has them behind it.
CLASSIFIER_RAW_DATA_FLAGS = ("--text-column", "--label-column", "--max-examples")
TRANSLATOR_RAW_DATA_FLAGS = ("--max-words", "--max-examples", "--validation-size", "--test-size")


def add_classifier_token_flags(data_group, model_group, defaults, token_folders=True):
    """The flags that decide a classifier's tokens: `--data` (`tokens:DIR` too
    with `token_folders`), `--text-column`, `--label-column`, `--max-examples`,
    `--sequence-length`, `--ngram-length`, `--max-length`, `--vocab-size`, `--pooling`."""
    from keras_transformer.models.classifier import POOLINGS

    tokens = f" | {TOKEN_SOURCE}" if token_folders else ""
    data_group.add_argument(
        "--data", default="bbc", help=f"bbc | csv:PATH | tsv:PATH | tfds:NAME{tokens} (default bbc)"
    )
    data_group.add_argument(
        "--text-column", default=None, help="csv/tsv: column with the text (default text)"
    )
    data_group.add_argument(
        "--label-column", default=None, help="csv/tsv: column with the label (default label)"
    )
    data_group.add_argument(
        "--max-examples",
        type=int,
        default=None,
        metavar="N",
        help="train on a stratified subset of N training texts (quick runs)",
    )
    model_group.add_argument(
        "--sequence-length",
        type=int,
        default=defaults.sequence_length,
        help=default_help(defaults.sequence_length, "tokens per text; longer texts are cut"),
    )
    model_group.add_argument(
        "--ngram-length",
        type=int,
        default=defaults.ngram_length,
        help=default_help(
            defaults.ngram_length,
            "tokens per text the bag of n-grams reads, the Transformer the first "
            "--sequence-length of them",
        ),
    )
    _add_max_length_flag(model_group, defaults)
    _add_vocabulary_flag(model_group, defaults, "WordPiece vocabulary size")
    model_group.add_argument(
        "--pooling",
        choices=POOLINGS,
        default=defaults.pooling,
        help=f"how the encoder's outputs become one vector; cls adds a [CLS] token "
        f"before every text (default {defaults.pooling})",
    )


def add_translator_token_flags(data_group, model_group, defaults, token_folders=True):
    """The flags that decide a translator's tokens: `--data` (`tokens:DIR` too
    with `token_folders`), `--max-words`, `--max-examples`, `--validation-size`,
    `--test-size`, `--sequence-length`, `--max-length`, `--shared-vocabulary`,
    `--vocab-size`."""
    tokens = f" | {TOKEN_SOURCE}" if token_folders else ""
    data_group.add_argument(
        "--data",
        default="bible:es-en",
        help=f"bible:SRC-TGT | tsv:PATH | tfds:NAME{tokens} (default bible:es-en)",
    )
    data_group.add_argument(
        "--max-words", type=int, default=30, help="drop pairs longer than this (words)"
    )
    data_group.add_argument(
        "--max-examples",
        type=int,
        default=None,
        metavar="N",
        help="train on a seeded subset of N training pairs (quick runs)",
    )
    data_group.add_argument("--validation-size", type=int, default=1000)
    data_group.add_argument("--test-size", type=int, default=1000)
    model_group.add_argument(
        "--sequence-length",
        type=int,
        default=defaults.sequence_length,
        help=default_help(
            defaults.sequence_length, "longest source and output, in tokens; longer ones are cut"
        ),
    )
    _add_max_length_flag(model_group, defaults)
    model_group.add_argument(
        "--shared-vocabulary",
        action="store_true",
        help="one cased WordPiece vocabulary learned from both languages, with one token "
        "embedding for the encoder, the decoder and the output projection "
        "(--vocab-size is its size); for languages that share a script",
    )
    _add_vocabulary_flag(model_group, defaults, "WordPiece vocabulary size of each side")


def _add_max_length_flag(group, defaults):
    group.add_argument(
        "--max-length",
        type=int,
        default=defaults.max_length,
        help=default_help(
            defaults.max_length, "the longest --sequence-length chosen from the data"
        ),
    )


def _add_vocabulary_flag(group, defaults, text):
    group.add_argument(
        "--vocab-size",
        type=int,
        default=defaults.vocabulary_size,
        help=default_help(defaults.vocabulary_size, text),
    )


def add_seed_flag(group, default):
    """`--seed`: of the split, the subsets, the initial weights and the shuffling."""
    group.add_argument(
        "--seed",
        type=int,
        default=default,
        help=f"seeds the data split and the --max-examples subset and, in training, the "
        f"initial weights and the shuffling (default {default})",
    )


def classification_data_from_flags(args):
    """The raw `ClassificationData` that `add_classifier_token_flags`' flags name."""
    return load_classification_data(
        args.data,
        text_column=args.text_column,
        label_column=args.label_column,
        seed=args.seed,
        max_examples=args.max_examples,
    )


def translation_data_from_flags(args):
    """The raw `TranslationData` that `add_translator_token_flags`' flags name."""
    return load_translation_data(
        args.data,
        seed=args.seed,
        validation_size=args.validation_size,
        test_size=args.test_size,
        max_words=args.max_words,
        max_examples=args.max_examples,
    )


def flags_given(parser, argv):
    """The `dest` of every flag given on the command line `argv` (None:
    `sys.argv[1:]`), told apart from one left at its default."""
    unset = object()
    # argparse fills in a default only where the namespace has no value yet.
    namespace = argparse.Namespace(**{action.dest: unset for action in parser._actions})
    parsed = parser.parse_args(argv, namespace=namespace)
    return {dest for dest, value in vars(parsed).items() if value is not unset}


def token_data_and_settings(args, given, task, settings, raw_data_flags):
    """For `--data tokens:DIR`: `(the folder's tokens, settings with the values
    tokenization fixed)`; None when `--data` names raw data.

    Raises:
        ValueError: a flag of `raw_data_flags` was given, or a flag contradicts
            the folder (naming the flag and the folder's value).
        DataError: the folder cannot be read (see `read_token_folder`).
    """
    folder = token_folder_path(args.data)
    if folder is None:
        return None
    for flag in raw_data_flags:
        if flag.lstrip("-").replace("-", "_") in given:
            raise ValueError(
                f"{flag} applies to raw texts, and {args.data} is already tokenized: leave it out "
                f"(or give it to python -m apps.tokenize)."
            )
    tokens = read_token_folder(folder, task, name=args.data)
    given_settings = {"vocabulary_size" if dest == "vocab_size" else dest for dest in given}
    return tokens, settings_from_tokens(settings, tokens, given_settings)


def add_model_size_flags(model_group, defaults):
    """`--d-model`, `--num-heads`, `--intermediate-dim`, `--dropout`."""
    model_group.add_argument(
        "--d-model", type=int, default=defaults.d_model, help=default_help(defaults.d_model)
    )
    model_group.add_argument(
        "--num-heads", type=int, default=defaults.num_heads, help=default_help(defaults.num_heads)
    )
    model_group.add_argument(
        "--intermediate-dim",
        type=int,
        default=defaults.intermediate_dim,
        help=default_help(defaults.intermediate_dim, "feed-forward width"),
    )
    model_group.add_argument(
        "--dropout", type=float, default=defaults.dropout, help=default_help(defaults.dropout)
    )


def add_run_flags(training_group, defaults, run_dir):
    """`--patience`, `--seed`, `--time-budget`, `--resume`, `--run-dir`, `--verbose`."""
    training_group.add_argument(
        "--patience",
        type=int,
        default=defaults.patience,
        help="early stopping: epochs without a better --monitor; 0 = off "
        f"({default_help(defaults.patience)})",
    )
    add_seed_flag(training_group, defaults.seed)
    training_group.add_argument(
        "--time-budget",
        type=float,
        default=None,
        metavar="MINUTES",
        help="stop training after MINUTES, then finish the run and export as usual",
    )
    training_group.add_argument(
        "--resume", action="store_true", help="continue the run in --run-dir from its last epoch"
    )
    training_group.add_argument("--run-dir", default=run_dir)
    training_group.add_argument(
        "--verbose",
        type=int,
        choices=(0, 1, 2),
        default=None,
        help="Keras verbosity: 1 progress bars, 2 one line per epoch "
        "(default: 1 on a terminal, 2 when output goes to a file or pipe)",
    )


def add_monitor_flag(training_group, choices, default):
    """`--monitor`: the validation metric that picks the kept epoch and drives early stopping."""
    training_group.add_argument(
        "--monitor",
        choices=choices,
        default=default,
        help=f"validation metric that chooses the epoch kept (best.keras, the exported weights) and "
        f"early stopping; the validation loss breaks ties (default {default})",
    )


def add_hardware_flags(parser):
    """`--mixed-precision`, `--jit-compile`, `--distribute` (docs: "GPUs and clusters")."""
    hardware = parser.add_argument_group("hardware")
    hardware.add_argument(
        "--mixed-precision",
        choices=tuple(MIXED_PRECISION_POLICIES),
        default="off",
        help="compute in float16 (loss-scaled) or bfloat16 with float32 weights (default off); "
        "saved with the run, which --resume keeps",
    )
    hardware.add_argument(
        "--jit-compile",
        action="store_true",
        help="compile the training step with XLA on TensorFlow (always on JAX); saved with the run",
    )
    hardware.add_argument(
        "--distribute",
        choices=DISTRIBUTE_CHOICES,
        default="none",
        help="mirrored: this machine's GPUs; multi_worker: the machines in TF_CONFIG, one process "
        "each with the same flags; data_parallel: Keras' DataParallel over the devices JAX sees "
        "(KERAS_BACKEND=jax). --batch-size is the global batch, split over all replicas",
    )


def keras_verbosity(verbose):
    """`--verbose` as given, else progress bars only for a person at a terminal:
    redrawn bars fill a log file with carriage returns and escape codes."""
    if verbose is not None:
        return verbose
    return 1 if sys.stdout.isatty() else 2


def strategy_and_data(parser, args, settings, load_data, check_flags=None):
    """Checks the flags, makes the strategy, loads the data; bad input exits 2.

    Args:
        parser: the app's parser, for usage errors.
        args: its parsed flags (with `add_run_flags` and `add_hardware_flags`).
        settings: the run's settings, validated here.
        load_data: `() -> (data, settings)`, the settings with what the data
            fixes (a token folder); may raise `DataError` or `ValueError`.
        check_flags: `(args) -> None` raising `ValueError` for the app's own flags.

    Returns:
        `(strategy, data, settings)`; the strategy is None without `--distribute`.
    """
    try:
        settings.validate()
        if args.time_budget is not None and args.time_budget <= 0:
            raise ValueError(f"--time-budget must be positive, got {args.time_budget}.")
        if check_flags is not None:
            check_flags(args)
        check_jit_compile(args.distribute, args.jit_compile)
        # Before any TensorFlow op runs (loading data may run some).
        strategy = make_strategy(args.distribute)
        check_batch_size(strategy, args.batch_size)
        data, settings = load_data()
    except (DataError, ValueError) as error:
        parser.exit(2, f"error: {error}\n")
    return strategy, data, settings


def train_on_chief(parser, args, train, data, settings, strategy):
    """`train(data, settings, run_dir, ...)` with the run flags; a `ValueError`
    (e.g. a bad `--resume`) exits 2.

    Returns:
        The run, or None on a worker that is not the chief (which writes
        nothing), after saying so.
    """
    if strategy is not None:
        print(describe_strategy(strategy), flush=True)
    try:
        run = train(
            data,
            settings,
            args.run_dir,
            resume=args.resume,
            time_budget_minutes=args.time_budget,
            verbose=keras_verbosity(args.verbose),
            strategy=strategy,
        )
    except ValueError as error:
        parser.exit(2, f"error: {error}\n")
    if not is_chief(strategy):
        print(f"{worker_name(strategy)} done; the chief writes the run folder and the export.")
        return None
    return run
