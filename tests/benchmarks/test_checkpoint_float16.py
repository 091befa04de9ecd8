"""benchmarks/checkpoint_float16.py: the float16 copy of a checkpoint a device call carries.

The copy must load where the original does, into float32 variables, with
each weight the original's rounded to float16 (NumPy's rounding, the
reference here), and keep what decides the token ids: config and tokenizer
files byte for byte.
"""

import json

import checkpoint_float16
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from keras_transformer.models import PretrainedEncoder
from keras_transformer.models.pretrained import read_checkpoint_weights

# Skips this file where transformers or torch, which write the checkpoint, are missing.
from tests.models.test_pretrained import TOKEN_IDS, our_states, write_checkpoint

VOCABULARY = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    *(f"word{index}" for index in range(55)),
]
CASING = {"do_lower_case": True, "strip_accents": False}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A small random BERT checkpoint, with the tokenizer files, a file the copy leaves
    out, and an integer tensor (as older checkpoints hold position ids)."""
    folder = tmp_path_factory.mktemp("checkpoint")
    write_checkpoint(folder, vocab_size=len(VOCABULARY))
    (folder / "vocab.txt").write_text("".join(f"{token}\n" for token in VOCABULARY))
    (folder / "tokenizer_config.json").write_text(json.dumps(CASING))
    (folder / "README.md").write_text("not needed to load the checkpoint")
    weights = load_file(folder / "model.safetensors")
    weights["embeddings.position_ids"] = np.arange(16, dtype=np.int64)[None]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def copied(checkpoint, tmp_path_factory):
    target = tmp_path_factory.mktemp("copies") / "float16"
    assert checkpoint_float16.main([str(checkpoint), str(target)]) == 0
    return target


def test_the_copy_holds_the_originals_weights_rounded_to_float16(checkpoint, copied):
    original = load_file(checkpoint / "model.safetensors")
    half = load_file(copied / "model.safetensors")
    assert sorted(half) == sorted(original)
    for name, value in original.items():
        expected = value.astype(np.float16) if value.dtype == np.float32 else value
        assert half[name].dtype == expected.dtype, name
        np.testing.assert_array_equal(half[name], expected, err_msg=name)
    # What the encoder reads back: float32 arrays of the rounded values.
    read = read_checkpoint_weights(copied)
    for name, value in read_checkpoint_weights(checkpoint).items():
        assert read[name].dtype == np.float32
        np.testing.assert_array_equal(read[name], value.astype(np.float16).astype(np.float32))
    # Half the float32 bytes saved (the tensor names' header stays as it was).
    float32_bytes = sum(value.nbytes for value in original.values() if value.dtype == np.float32)
    saved = (checkpoint / "model.safetensors").stat().st_size - (
        copied / "model.safetensors"
    ).stat().st_size
    assert saved >= 0.49 * float32_bytes, (saved, float32_bytes)


def test_the_copy_keeps_config_and_tokenizer_files_and_nothing_else(checkpoint, copied):
    assert sorted(path.name for path in copied.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    for name in ("config.json", "tokenizer_config.json", "vocab.txt"):
        assert (copied / name).read_bytes() == (checkpoint / name).read_bytes(), name


def test_the_copys_encoder_has_float32_variables_and_the_originals_states(checkpoint, copied):
    encoder = PretrainedEncoder.from_pretrained(copied)
    assert {variable.dtype for variable in encoder.weights} == {"float32"}
    states = our_states(encoder)
    expected = our_states(PretrainedEncoder.from_pretrained(checkpoint))
    real = TOKEN_IDS != 0
    difference = np.abs(states[real] - expected[real]).max()
    # float16 keeps 11 significant bits: relative rounding up to 2 ** -11 per weight, on
    # layer-normalized states of size ~1.
    assert 0 < difference < 1e-2, difference


def test_weights_beyond_float16s_range_are_an_error_naming_the_tensor(checkpoint, tmp_path):
    source = tmp_path / "large"
    source.mkdir()
    for name in ("config.json", "vocab.txt"):
        (source / name).write_bytes((checkpoint / name).read_bytes())
    weights = load_file(checkpoint / "model.safetensors")
    weights["pooler.dense.bias"][0] = 1e5
    save_file(weights, source / "model.safetensors")
    with pytest.raises(ValueError, match=r"pooler\.dense\.bias holds values beyond float16"):
        checkpoint_float16.copy_checkpoint_float16(source, tmp_path / "copy")
    assert not (tmp_path / "copy").exists()


@pytest.mark.parametrize(
    "case, message",
    [
        ("into itself", "is the checkpoint folder itself"),
        ("no weights", "model.safetensors is missing"),
        ("into a file", "is a file: give the folder"),
    ],
)
def test_bad_folders_are_usage_errors_naming_what_is_wrong(
    checkpoint, tmp_path, capsys, case, message
):
    source, target = checkpoint, tmp_path / "copy"
    if case == "into itself":
        target = checkpoint
    elif case == "no weights":
        source = tmp_path / "no_weights"
        source.mkdir()
        (source / "config.json").write_bytes((checkpoint / "config.json").read_bytes())
        (source / "vocab.txt").write_bytes((checkpoint / "vocab.txt").read_bytes())
    else:
        target.write_text("a file")
    with pytest.raises(SystemExit) as exit_info:
        checkpoint_float16.main([str(source), str(target)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
