"""`keras-transformer embed`: a file of texts to a `.npy` array or JSON lines of
embeddings, from a pretrained classifier's export (its `embed` signature, called
directly, is the reference) or from a checkpoint folder (sentence-transformers'
pooling of Hugging Face's `BertModel` is); every bad input one `error:` line."""

import io
import json
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.cli import embed
from tests.embedding_fixtures import (  # noqa: F401  embedding_export, embedding_saved_model: fixtures
    TEXTS,
    cosines,
    embedding_export,
    embedding_saved_model,
    hugging_face_embeddings,
)
from tests.serving.serving_helpers import call_direct

# A text holding a line separator that is not "\n" stays one text; a blank line is a row.
FILE_TEXTS = [*TEXTS, "the cat\u2028sat", "", "Stocks rose!"]


@pytest.fixture(scope="module")
def expected(embedding_saved_model):  # noqa: F811  the fixture imported above
    """The export's `embed` signature called directly on `FILE_TEXTS`, one batch."""
    return call_direct(embedding_saved_model, FILE_TEXTS, "embed")["embedding"]


@pytest.fixture
def texts_file(tmp_path):
    path = tmp_path / "texts.txt"
    # CRLF line ends, as a file written on Windows has.
    path.write_bytes("\r\n".join(FILE_TEXTS).encode("utf-8") + b"\r\n")
    return path


def run(*argv):
    return embed.main([str(arg) for arg in argv])


def test_an_export_writes_npy_rows_in_line_order(
    embedding_export,  # noqa: F811
    expected,
    texts_file,
    tmp_path,
    capsys,
):
    out = tmp_path / "vectors.npy"
    # Batches of 3: the rows of several calls, each trimmed to its own longest text.
    assert run(embedding_export.base_dir, texts_file, "--out", out, "--batch-size", "3") == 0
    written = np.load(out)
    assert written.dtype == np.float32 and written.shape == (len(FILE_TEXTS), 24)
    np.testing.assert_allclose(written, expected, atol=1e-6, rtol=0)
    assert f"Wrote {len(FILE_TEXTS)} embeddings of dimension 24 to {out}" in capsys.readouterr().out
    assert sorted(path.name for path in tmp_path.iterdir()) == ["texts.txt", "vectors.npy"]


def test_stdin_to_json_lines(
    embedding_export,  # noqa: F811
    embedding_saved_model,  # noqa: F811
    expected,
    texts_file,
    tmp_path,
    monkeypatch,
):
    out = tmp_path / "vectors.jsonl"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(texts_file.read_bytes())))
    # The SavedModel already loaded (the test above loads it from its folder).
    monkeypatch.setattr(
        embed,
        "load_export",
        lambda path: (str(path), embedding_saved_model),
    )
    assert run(embedding_export.version_dir, "-", "--out", out) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").split("\n")[:-1]]
    assert [record["text"] for record in records] == FILE_TEXTS
    embeddings = np.array([record["embedding"] for record in records])
    # float32 values written exactly (JSON holds them as doubles).
    np.testing.assert_array_equal(embeddings.astype(np.float32), embeddings)
    np.testing.assert_allclose(embeddings, expected, atol=1e-6, rtol=0)


def test_a_checkpoint_folder_reads_as_far_as_sentence_transformers_does(
    embedding_export,  # noqa: F811
    tmp_path,
):
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(embedding_export.checkpoint, checkpoint)
    # sentence-transformers' own files: mean pooling, 8 word pieces at most.
    (checkpoint / "sentence_bert_config.json").write_text('{"max_seq_length": 8}')
    (checkpoint / "1_Pooling").mkdir()
    (checkpoint / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "vectors.npy"
    assert run(checkpoint, texts, "--out", out) == 0
    reference = hugging_face_embeddings(embedding_export.checkpoint, TEXTS, 8)
    assert cosines(np.load(out), reference).min() >= 0.99999
    # Read further, the long last text's embedding is another.
    assert run(checkpoint, texts, "--out", out, "--sequence-length", "16") == 0
    reference = hugging_face_embeddings(embedding_export.checkpoint, TEXTS, 16)
    assert cosines(np.load(out), reference).min() >= 0.99999


def saved_model_without_embed(folder):
    """A SavedModel with a `serving_default` alone (as a translator's or a TransformerClassifier's
    export has no `embed`)."""
    module = tf.Module()
    module.serve = tf.function(
        lambda text: {"length": tf.strings.length(text)},
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    tf.saved_model.save(module, str(folder / "1"), signatures={"serving_default": module.serve})
    return folder


@pytest.mark.parametrize(
    "case, message",
    [
        ("bad_extension", "--out {tmp}/vectors.csv must end in .npy or .jsonl"),
        ("no_out_folder", "--out {tmp}/nowhere/v.npy: the folder {tmp}/nowhere does not exist."),
        ("no_texts_file", "cannot read the texts {tmp}/missing.txt: No such file or directory."),
        ("not_utf8", "{tmp}/texts.txt is not UTF-8 text (line 2)."),
        ("empty", "{tmp}/texts.txt holds no texts: give one per line."),
        ("no_model", "No exported model at {tmp}/nothing"),
        ("no_embed", "{tmp}/other/1 has no `embed` signature (it has serving_default)"),
        ("length_with_export", "--sequence-length is for a checkpoint folder"),
        ("cls_pooling", "pools with pooling_mode_cls_token, not the mean over tokens"),
        ("bad_length", "--sequence-length must be from 3 to the checkpoint's 24 positions, got 2."),
        ("bad_batch", "--batch-size must be at least 1, got 0"),
    ],
)
def test_bad_input_is_one_error_line(
    embedding_export,  # noqa: F811
    tmp_path,
    capsys,
    case,
    message,
):
    texts = tmp_path / "texts.txt"
    texts.write_bytes({"not_utf8": b"fine\ncaf\xe9\n", "empty": b""}.get(case, b"a text\n"))
    model, out, extra = embedding_export.base_dir, tmp_path / "v.npy", []
    if case == "bad_extension":
        out = tmp_path / "vectors.csv"
    elif case == "no_out_folder":
        out = tmp_path / "nowhere" / "v.npy"
    elif case == "no_texts_file":
        texts = tmp_path / "missing.txt"
    elif case == "no_model":
        model = tmp_path / "nothing"
    elif case == "no_embed":
        model = saved_model_without_embed(tmp_path / "other")
    elif case == "length_with_export":
        extra = ["--sequence-length", "8"]
    elif case in ("cls_pooling", "bad_length"):
        model = tmp_path / "checkpoint"
        shutil.copytree(embedding_export.checkpoint, model)
        if case == "cls_pooling":
            (model / "1_Pooling").mkdir()
            (model / "1_Pooling" / "config.json").write_text(
                '{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}'
            )
        else:
            extra = ["--sequence-length", "2"]
    elif case == "bad_batch":
        extra = ["--batch-size", "0"]
    with pytest.raises(SystemExit) as exited:
        run(model, texts, "--out", out, *extra)
    assert exited.value.code == 2
    stderr = capsys.readouterr().err
    assert stderr.count("\n") == 1 and stderr.startswith("error: "), stderr
    assert message.format(tmp=tmp_path) in stderr, stderr
    assert not (tmp_path / "v.npy").exists()
