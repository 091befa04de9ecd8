"""What `train_classifier`, `train_translator` and `tokenize` share: the flags
of the data, the flags of the settings (derived from the settings' fields,
`keras_transformer.training.settings`), those of a run and of where training
computes, and the flow from flags to a trained run (usage errors exit with
status 2 and one `error:` line)."""

import argparse
import dataclasses
import sys

from keras_transformer.data import DataError, load_classification_data, load_translation_data
from keras_transformer.data.registry import TOKEN_SOURCE, token_folder_path
from keras_transformer.data.tokens import (
    TokenSettingConflict,
    read_token_folder,
    settings_from_tokens,
)
from keras_transformer.training.distribute import (
    DISTRIBUTE_CHOICES,
    check_batch_size,
    check_jit_compile,
    describe_strategy,
    is_chief,
    make_strategy,
    worker_name,
)
from keras_transformer.training.settings import flag_of, help_text

# The flags that only shape raw texts, per task: a token folder has them behind it.
CLASSIFIER_RAW_DATA_FLAGS = ("--text-column", "--label-column", "--max-examples")
TRANSLATOR_RAW_DATA_FLAGS = ("--max-words", "--max-examples", "--validation-size", "--test-size")
SETTING_GROUPS = ("data", "model", "training", "hardware")


def add_settings_flags(groups, settings_class, names=None):
    """A flag for each setting of `settings_class` that has one (of `names` only, when
    given), in the class' order, into `groups[its group]` (`SETTING_GROUPS`).

    Each flag's `dest` is the setting's name, so `settings_from_flags` reads
    them back. A setting whose default is True becomes `--NAME/--no-NAME`,
    one whose default is False `--NAME` alone.
    """
    for field in dataclasses.fields(settings_class):
        flag = flag_of(field)
        if flag is None or (names is not None and field.name not in names):
            continue
        group = groups[field.metadata["group"]]
        arguments = {"dest": field.name, "default": field.default, "help": help_text(field)}
        if isinstance(field.default, bool):
            action = argparse.BooleanOptionalAction if field.default else "store_true"
            group.add_argument(flag, action=action, **arguments)
            continue
        choices = field.metadata["choices"]
        metavar = field.metadata["metavar"]
        if metavar is None and choices is None:
            metavar = flag.lstrip("-").replace("-", "_").upper()
        group.add_argument(flag, type=field.type, choices=choices, metavar=metavar, **arguments)


def settings_from_flags(settings_class, args):
    """The `settings_class` that the flags of `add_settings_flags` in `args` set, the
    settings without a flag there at their defaults."""
    values = vars(args)
    return settings_class(
        **{
            field.name: values[field.name]
            for field in dataclasses.fields(settings_class)
            if field.name in values
        }
    )


def setting_flag(settings_class, name):
    """The flag of the setting `name`, or the name where no flag sets it alone."""
    fields = {field.name: field for field in dataclasses.fields(settings_class)}
    return flag_of(fields[name]) or name


def add_classifier_data_flags(group, token_folders=True):
    """`--data` (`tokens:DIR` too with `token_folders`), `--text-column`,
    `--label-column`, `--max-examples`: the classifier's raw texts."""
    tokens = f" | {TOKEN_SOURCE}" if token_folders else ""
    group.add_argument(
        "--data", default="bbc", help=f"bbc | csv:PATH | tsv:PATH | tfds:NAME{tokens} (default bbc)"
    )
    group.add_argument(
        "--text-column", default=None, help="csv/tsv: column with the text (default text)"
    )
    group.add_argument(
        "--label-column", default=None, help="csv/tsv: column with the label (default label)"
    )
    group.add_argument(
        "--max-examples",
        type=int,
        default=None,
        metavar="N",
        help="train on a stratified subset of N training texts (quick runs)",
    )


def add_translator_data_flags(group, token_folders=True):
    """`--data` (`tokens:DIR` too with `token_folders`), `--max-words`,
    `--max-examples`, `--validation-size`, `--test-size`: the translator's raw pairs."""
    tokens = f" | {TOKEN_SOURCE}" if token_folders else ""
    group.add_argument(
        "--data",
        default="bible:es-en",
        help=f"bible:SRC-TGT | tsv:PATH | tfds:NAME{tokens} (default bible:es-en)",
    )
    group.add_argument(
        "--max-words", type=int, default=30, help="drop pairs longer than this (words)"
    )
    group.add_argument(
        "--max-examples",
        type=int,
        default=None,
        metavar="N",
        help="train on a seeded subset of N training pairs (quick runs)",
    )
    group.add_argument("--validation-size", type=int, default=1000)
    group.add_argument("--test-size", type=int, default=1000)


def add_training_flags(parser, settings_class, add_data_flags, run_dir):
    """The flags of a training app: its data, one per setting of `settings_class`, and
    those of the run (`add_run_flags`) and of where it computes (`--distribute`).

    Returns:
        The groups by name (`SETTING_GROUPS`), for the app's own flags.
    """
    groups = {name: parser.add_argument_group(name) for name in SETTING_GROUPS}
    add_data_flags(groups["data"])
    add_settings_flags(groups, settings_class)
    add_run_flags(groups["training"], run_dir)
    add_distribute_flag(groups["hardware"])
    return groups


def classification_data_from_flags(args):
    """The raw `ClassificationData` that `add_classifier_data_flags`' flags name."""
    return load_classification_data(
        args.data,
        text_column=args.text_column,
        label_column=args.label_column,
        seed=args.seed,
        max_examples=args.max_examples,
    )


def translation_data_from_flags(args):
    """The raw `TranslationData` that `add_translator_data_flags`' flags name."""
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
                f"(or give it to keras-transformer tokenize)."
            )
    tokens = read_token_folder(folder, task, name=args.data)
    try:
        return tokens, settings_from_tokens(settings, tokens, given)
    except TokenSettingConflict as conflict:
        raise ValueError(
            conflict.message(lambda name: setting_flag(type(settings), name))
        ) from None


def add_run_flags(training_group, run_dir):
    """`--time-budget`, `--resume`, `--run-dir`, `--verbose`: how this process runs the training."""
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


def add_distribute_flag(hardware_group):
    """`--distribute` (docs: "GPUs and clusters")."""
    hardware_group.add_argument(
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
        args: its parsed flags (those of `add_training_flags`).
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
