"""The flags of where training computes, shared by `train_classifier` and `train_translator`."""

from keras_transformer.training.distribute import DISTRIBUTE_CHOICES
from keras_transformer.training.distribute import MIXED_PRECISION_POLICIES


def add_hardware_flags(parser):
    """`--mixed-precision`, `--jit-compile`, `--distribute` (README: "GPUs and several machines")."""
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
             "each with the same flags. --batch-size is the global batch, split over all replicas",
    )
