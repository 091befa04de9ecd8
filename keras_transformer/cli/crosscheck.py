"""Print how closely our MultiHeadAttention matches keras.layers.MultiHeadAttention.

    keras-transformer crosscheck [--configurations 60] [--seed 0]

For each seeded configuration, weights are copied both ways (Keras -> ours and
ours -> Keras) and the table shows the largest absolute difference of outputs,
attention scores and gradients. Exits with status 1 if any exceeds the
tolerance (outputs and scores 1e-5, gradients 1e-4).
"""

import argparse
import sys
import time
import warnings

import keras

from keras_transformer import crosscheck

# Keras warns about softmax over a length-1 axis, which some configurations have on purpose.
warnings.filterwarnings("ignore", message="You are using a softmax over axis")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-transformer crosscheck",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--configurations", type=int, default=60, help="how many configurations (default 60)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random configurations")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.configurations < 1:
        parser.error("--configurations must be at least 1")

    configurations = crosscheck.random_configurations(args.configurations, args.seed)
    print(
        f"keras_transformer.layers.MultiHeadAttention vs keras.layers.MultiHeadAttention "
        f"(Keras {keras.__version__}, backend {keras.backend.backend()})"
    )
    print(
        f"tolerances: outputs and scores {crosscheck.OUTPUT_TOLERANCE:g}, "
        f"gradients {crosscheck.GRADIENT_TOLERANCE:g}\n"
    )
    header = (
        f"{'#':>3}  {'configuration':<58} {'direction':<12} "
        f"{'output':>9} {'scores':>9} {'grads':>9}  ok"
    )
    print(header)
    print("-" * len(header))
    failures = 0
    started = time.perf_counter()
    for number, config in enumerate(configurations, 1):
        for direction in ("keras->ours", "ours->keras"):
            result = crosscheck.check_configuration(config, direction)
            failures += not result.passed
            output = max(result.output, result.output_with_scores)
            print(
                f"{number:>3}  {config.describe():<58} {direction:<12} "
                f"{output:>9.2e} {result.scores:>9.2e} {result.gradients:>9.2e}  "
                f"{'yes' if result.passed else 'NO'}",
                flush=True,
            )
    checks = 2 * len(configurations)
    elapsed = time.perf_counter() - started
    print(f"\n{checks - failures} of {checks} checks within tolerance ({elapsed:.0f} s).")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
