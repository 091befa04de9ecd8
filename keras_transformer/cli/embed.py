"""Write the sentence embeddings of a file of texts, one per line.

    keras-transformer embed exported_models/classifier texts.txt --out vectors.npy
    keras-transformer embed exported_models/classifier/3 - --out vectors.jsonl < texts.txt
    keras-transformer embed path/to/all-MiniLM-L6-v2 texts.txt --out vectors.npy

MODEL is the export of a classifier fine-tuned from a checkpoint (its `embed`
signature; a base folder's newest version, or a version folder), or a Hugging
Face BERT-family checkpoint folder itself (config.json, model.safetensors,
vocab.txt), read as sentence-transformers reads it: at most its
sentence_bert_config.json's `max_seq_length` word pieces (or
`--sequence-length`). An embedding is the encoder's hidden states' mean over
the text's tokens, L2-normalized (float32).

TEXTS is a UTF-8 file, one text per line, or `-` for stdin; row i of the
output is line i + 1, blank lines included. `--out` ends in `.npy` (a float32
array [texts, dimension]) or `.jsonl` (one {"text": ..., "embedding": [...]}
per line); it is written whole or not at all.
"""

import argparse
import json
import os
import sys
import tempfile

import numpy as np

from keras_transformer.cli.common import load_export

OUTPUT_FORMATS = (".npy", ".jsonl")
CHECKPOINT_CONFIG = "config.json"
# sentence-transformers' files in a checkpoint folder: how far it reads and how it pools.
SENTENCE_TRANSFORMERS_CONFIG = "sentence_bert_config.json"
POOLING_CONFIG = os.path.join("1_Pooling", "config.json")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-transformer embed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "model",
        help="a pretrained classifier's export (base or version folder), or a checkpoint folder",
    )
    parser.add_argument("texts", help="file of texts, one per line; - reads stdin")
    parser.add_argument(
        "--out", required=True, help="where to write: FILE.npy or FILE.jsonl (replaced if there)"
    )
    parser.add_argument("--batch-size", type=int, default=64, help="texts per model call (64)")
    parser.add_argument(
        "--sequence-length",
        type=int,
        default=None,
        help="with a checkpoint folder: the most word pieces read, [CLS] and [SEP] included "
        "(default: its sentence_bert_config.json's max_seq_length, else all its positions); "
        "an export reads as far as its classifier",
    )
    return parser


def read_texts(path):
    """The lines of the UTF-8 file `path` (`-`: stdin), without their line ends.

    Raises:
        ValueError: the file is missing, not UTF-8, or holds no text.
    """
    name = "stdin" if path == "-" else path
    try:
        if path == "-":
            content = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as texts_file:
                content = texts_file.read()
    except OSError as error:
        raise ValueError(f"cannot read the texts {name}: {error.strerror}.") from None
    try:
        content = content.decode("utf-8")
    except UnicodeDecodeError as error:
        line = content[: error.start].count(b"\n") + 1
        raise ValueError(f"{name} is not UTF-8 text (line {line}).") from None
    # Lines end at "\n" only: a text may hold other line separators (U+2028, form feeds).
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    if not lines:
        raise ValueError(f"{name} holds no texts: give one per line.")
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def check_output_path(path):
    """ValueError unless `path` ends in a known format and its folder exists."""
    extension = os.path.splitext(path)[1].lower()
    if extension not in OUTPUT_FORMATS:
        raise ValueError(
            f"--out {path} must end in {' or '.join(OUTPUT_FORMATS)} (a NumPy array or JSON lines)."
        )
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"--out {path}: the folder {folder} does not exist.")


class ExportEmbedder:
    """The `embed` signature of a pretrained classifier's export, on batches of texts."""

    def __init__(self, path):
        self.version_dir, loaded = load_export(path)
        if "embed" not in loaded.signatures:
            raise ValueError(
                f"{self.version_dir} has no `embed` signature (it has "
                f"{', '.join(sorted(loaded.signatures))}): embeddings come from the export of a "
                "classifier fine-tuned from a checkpoint (train-classifier --pretrained), or "
                "from the checkpoint folder itself."
            )
        self._signature = loaded.signatures["embed"]
        self._loaded = loaded  # the signature's variables live as long as the loaded object
        self.dimension = int(self._signature.structured_outputs["embedding"].shape[-1])
        self.description = self.version_dir

    def __call__(self, texts):
        import tensorflow as tf

        return self._signature(text=tf.constant(texts, tf.string))["embedding"].numpy()


class CheckpointEmbedder:
    """A Hugging Face checkpoint folder's encoder and tokenizer, on batches of texts."""

    def __init__(self, path, sequence_length=None):
        from keras_transformer.data.checkpoint_files import read_json
        from keras_transformer.models import PretrainedEncoder
        from keras_transformer.text import PretrainedTokenizer

        pooling = read_json(os.path.join(path, POOLING_CONFIG)) or {}
        if pooling and not pooling.get("pooling_mode_mean_tokens", False):
            modes = sorted(mode for mode, used in pooling.items() if used is True)
            raise ValueError(
                f"{os.path.join(path, POOLING_CONFIG)} pools with {', '.join(modes) or 'nothing'}"
                ", not the mean over tokens: these embeddings would not be the checkpoint's."
            )
        self.encoder = PretrainedEncoder.from_pretrained(path)
        self.tokenizer = PretrainedTokenizer.from_pretrained(path)
        positions = self.encoder.sequence_length
        if sequence_length is None:
            settings = read_json(os.path.join(path, SENTENCE_TRANSFORMERS_CONFIG)) or {}
            sequence_length = min(settings.get("max_seq_length") or positions, positions)
        elif not 3 <= sequence_length <= positions:
            # [CLS], [SEP] and at least one word piece.
            raise ValueError(
                f"--sequence-length must be from 3 to the checkpoint's {positions} positions, "
                f"got {sequence_length}."
            )
        self.sequence_length = sequence_length
        self.dimension = self.encoder.d_model
        self.description = f"{path} (at most {self.sequence_length} word pieces)"

    def __call__(self, texts):
        import keras
        import tensorflow as tf

        from keras_transformer.text.padding import trim_shared_padding_array

        token_ids = self.tokenizer.encode(
            tf.constant(texts, tf.string), self.sequence_length, add_cls=True, add_sep=True
        ).numpy()
        embeddings = self.encoder.embed(trim_shared_padding_array(token_ids))
        return np.asarray(keras.ops.convert_to_numpy(embeddings), dtype=np.float32)


def load_embedder(path, sequence_length=None):
    """A `CheckpointEmbedder` where `path` holds a checkpoint's config.json, else an
    `ExportEmbedder`.

    Raises:
        ValueError: `path` is neither, or cannot give embeddings.
    """
    if os.path.isfile(os.path.join(path, CHECKPOINT_CONFIG)):
        return CheckpointEmbedder(path, sequence_length)
    if sequence_length is not None:
        raise ValueError(
            "--sequence-length is for a checkpoint folder: an export reads as far as its "
            "classifier was trained to."
        )
    try:
        return ExportEmbedder(path)
    except FileNotFoundError as error:
        raise ValueError(
            f"{error} Or give a checkpoint folder (with {CHECKPOINT_CONFIG})."
        ) from None
    except OSError as error:
        raise ValueError(f"cannot load the export {path}: {error}") from None


def write_embeddings(embedder, texts, out_path, batch_size, progress=True):
    """Embeds `texts` in batches and writes them to `out_path` (`.npy` or `.jsonl`), through a
    temporary file beside it renamed into place once complete.

    Args:
        embedder: `(list of str) -> float32 [len, dimension]`, with a `dimension`.
        texts: the texts, in the output's row order.
        out_path: ends in `.npy` or `.jsonl`.
        batch_size: texts per call of `embedder`.
        progress: draw a progress bar (`keras.utils.Progbar`).
    """
    import keras

    as_array = out_path.lower().endswith(".npy")
    folder = os.path.dirname(os.path.abspath(out_path))
    handle, partial = tempfile.mkstemp(prefix=".embed-", suffix=".partial", dir=folder)
    os.close(handle)
    bar = keras.utils.Progbar(len(texts), unit_name="text") if progress else None
    try:
        if as_array:
            array = np.lib.format.open_memmap(
                partial, mode="w+", dtype=np.float32, shape=(len(texts), embedder.dimension)
            )
            for start, embeddings in _batches(embedder, texts, batch_size, bar):
                array[start : start + len(embeddings)] = embeddings
            array.flush()
            del array
        else:
            with open(partial, "w", encoding="utf-8") as lines_file:
                for start, embeddings in _batches(embedder, texts, batch_size, bar):
                    for text, embedding in zip(texts[start:], embeddings):
                        record = {"text": text, "embedding": embedding.tolist()}
                        lines_file.write(json.dumps(record, ensure_ascii=False) + "\n")
        # mkstemp makes the file private; the output is an ordinary file.
        os.chmod(partial, 0o644)
        os.replace(partial, out_path)
    except BaseException:
        os.remove(partial)
        raise


def _batches(embedder, texts, batch_size, bar):
    """`(start, embeddings)` of each batch of `texts`."""
    for start in range(0, len(texts), batch_size):
        embeddings = embedder(texts[start : start + batch_size])
        yield start, embeddings
        if bar is not None:
            bar.add(len(embeddings))


def main(argv=None):
    """Runs the command; bad input exits 2 with one `error:` line.

    Returns:
        0 once the embeddings are written.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.batch_size < 1:
        parser.exit(2, f"error: --batch-size must be at least 1, got {args.batch_size}\n")
    try:
        check_output_path(args.out)
        texts = read_texts(args.texts)
        embedder = load_embedder(args.model, args.sequence_length)
        # The bar where someone watches: a log would get a line per update.
        progress = sys.stdout.isatty() and len(texts) > args.batch_size
        write_embeddings(embedder, texts, args.out, args.batch_size, progress)
    except ValueError as error:
        parser.exit(2, f"error: {error}\n")
    print(
        f"Wrote {len(texts)} embeddings of dimension {embedder.dimension} to {args.out} "
        f"(model: {embedder.description})."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
