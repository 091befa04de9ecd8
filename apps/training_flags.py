"""What `train_classifier` and `train_translator` share: the flags of a model's
size, of a run and of where training computes, and the flow from flags to a
trained run (usage errors exit with status 2 and one `error:` line)."""

import sys

from keras_transformer.data import DataError
from keras_transformer.training.distribute import DISTRIBUTE_CHOICES
from keras_transformer.training.distribute import MIXED_PRECISION_POLICIES
from keras_transformer.training.distribute import check_batch_size
from keras_transformer.training.distribute import check_jit_compile
from keras_transformer.training.distribute import describe_strategy
from keras_transformer.training.distribute import is_chief
from keras_transformer.training.distribute import make_strategy
from keras_transformer.training.distribute import worker_name


def default_help(default, text=None):
    """A flag's help ending with its default; None is "from the data"
    (chosen from the training split before training, see `data_defaults`)."""
    said = "default: from the data" if default is None else f"default {default}"
    return f"{text} ({said})" if text else said


def add_model_size_flags(model_group, defaults, vocabulary_help="WordPiece vocabulary size"):
    """`--vocab-size`, `--d-model`, `--num-heads`, `--intermediate-dim`, `--dropout`."""
    model_group.add_argument("--vocab-size", type=int, default=defaults.vocabulary_size,
                             help=default_help(defaults.vocabulary_size, vocabulary_help))
    model_group.add_argument("--d-model", type=int, default=defaults.d_model,
                             help=default_help(defaults.d_model))
    model_group.add_argument("--num-heads", type=int, default=defaults.num_heads,
                             help=default_help(defaults.num_heads))
    model_group.add_argument("--intermediate-dim", type=int, default=defaults.intermediate_dim,
                             help=default_help(defaults.intermediate_dim, "feed-forward width"))
    model_group.add_argument("--dropout", type=float, default=defaults.dropout,
                             help=default_help(defaults.dropout))


def add_run_flags(training_group, defaults, run_dir):
    """`--patience`, `--seed`, `--time-budget`, `--resume`, `--run-dir`, `--verbose`."""
    training_group.add_argument("--patience", type=int, default=defaults.patience,
                                help="early stopping: epochs without a better monitored metric "
                                     f"(default {defaults.monitor}; 0 = off)")
    training_group.add_argument("--seed", type=int, default=defaults.seed)
    training_group.add_argument("--time-budget", type=float, default=None, metavar="MINUTES",
                                help="stop training after MINUTES, then finish the run and export as usual")
    training_group.add_argument("--resume", action="store_true",
                                help="continue the run in --run-dir from its last epoch")
    training_group.add_argument("--run-dir", default=run_dir)
    training_group.add_argument("--verbose", type=int, choices=(0, 1, 2), default=None,
                                help="Keras verbosity: 1 progress bars, 2 one line per epoch "
                                     "(default: 1 on a terminal, 2 when output goes to a file or pipe)")


def add_monitor_flag(training_group, choices, default):
    """`--monitor`: the validation metric that picks the kept epoch and drives early stopping."""
    training_group.add_argument(
        "--monitor", choices=choices, default=default,
        help=f"validation metric that chooses the epoch kept (best.keras, the exported weights) and "
             f"early stopping; the validation loss breaks ties (default {default})",
    )


def add_hardware_flags(parser):
    """`--mixed-precision`, `--jit-compile`, `--distribute` (docs: "GPUs and clusters")."""
    hardware = parser.add_argument_group("hardware")
    hardware.add_argument(
        "--mixed-precision", choices=tuple(MIXED_PRECISION_POLICIES), default="off",
        help="compute in float16 (loss-scaled) or bfloat16 with float32 weights (default off); "
             "saved with the run, which --resume keeps",
    )
    hardware.add_argument("--jit-compile", action="store_true",
                          help="compile the training step with XLA; saved with the run")
    hardware.add_argument(
        "--distribute", choices=DISTRIBUTE_CHOICES, default="none",
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
        load_data: `() -> data`; may raise `DataError` or `ValueError`.
        check_flags: `(args) -> None` raising `ValueError` for the app's own flags.

    Returns:
        `(strategy, data)`; the strategy is None without `--distribute`.
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
        data = load_data()
    except (DataError, ValueError) as error:
        parser.exit(2, f"error: {error}\n")
    return strategy, data


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
        run = train(data, settings, args.run_dir, resume=args.resume, time_budget_minutes=args.time_budget,
                    verbose=keras_verbosity(args.verbose), strategy=strategy)
    except ValueError as error:
        parser.exit(2, f"error: {error}\n")
    if not is_chief(strategy):
        print(f"{worker_name(strategy)} done; the chief writes the run folder and the export.")
        return None
    return run
