"""How many batch shapes an epoch of training gives, and what rounding widths costs.

JAX compiles the train step once for every new batch shape; on a GPU one
compile of a classifier or translator step costs seconds, as much as hundreds
of its steps. This counts the distinct shapes of one epoch of the training
batches a run builds from a token folder, with each way of rounding the
trimmed width up, and the positions computed relative to trimming to the
longest row exactly (1.00: no padding added).

    .venv/bin/python benchmarks/batch_widths.py tokens/bbc
    .venv/bin/python benchmarks/batch_widths.py tokens/bible-es-en --batch-size 256
"""

import argparse
import json
import os

import numpy as np

from keras_transformer.data.tokens import read_token_folder
from keras_transformer.training import batching
from keras_transformer.training.batching import ArrayBatches, octave_step_width
from keras_transformer.training.translator import pipeline as translator_pipeline

ROUNDINGS = {
    "longest row": None,
    "multiple of 8": lambda length: -(-length // 8) * 8,
    "power of two": lambda length: max(8, 1 << (max(length, 1) - 1).bit_length()),
    "4 an octave": octave_step_width,
}


def epoch_batches(folder, batch_size, seed):
    """The training batches (`ArrayBatches`) of a run from the token folder `folder`."""
    with open(os.path.join(folder, "tokens.json")) as description:
        task = json.load(description)["task"]
    tokens = read_token_folder(folder, task)
    if task == "classifier":
        return ArrayBatches(
            (tokens.train.token_ids, tokens.train.labels), batch_size or 32, seed=seed
        )
    settings = type("Settings", (), {"batch_size": batch_size or 64, "seed": seed})
    return translator_pipeline._translation_batches(
        tokens.train.source_ids, tokens.train.target_ids, settings, shuffle=True
    )


def batch_shapes(batches, round_up):
    """The shapes of each batch of epoch 0, every array of each batch, with `round_up`."""
    original = batching.batch_width_rounding
    batching.batch_width_rounding = translator_pipeline.batch_width_rounding = lambda: round_up
    try:
        batches.epoch = 0
        shapes = []
        for index in range(len(batches)):
            inputs, labels = batches[index]
            arrays = list(inputs.values()) if isinstance(inputs, dict) else [inputs]
            shapes.append(tuple(np.shape(array) for array in [*arrays, labels]))
        return shapes
    finally:
        batching.batch_width_rounding = original
        translator_pipeline.batch_width_rounding = original


def positions(shapes):
    return sum(int(np.prod(shape)) for batch in shapes for shape in batch if len(shape) == 2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a token folder from python -m apps.tokenize")
    parser.add_argument("--batch-size", type=int, default=None, help="default: the app's")
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args(argv)
    batches = epoch_batches(args.folder, args.batch_size, args.seed)
    exact = positions(batch_shapes(batches, None))
    print(f"{args.folder}: {len(batches)} batches an epoch")
    print(f"{'rounding':<16} {'shapes':>6} {'positions / longest row':>24}")
    for name, round_up in ROUNDINGS.items():
        shapes = batch_shapes(batches, round_up)
        print(f"{name:<16} {len(set(shapes)):>6} {positions(shapes) / exact:>24.3f}")


if __name__ == "__main__":
    main()
