"""A tiny pretrained classifier's export with an `embed` signature, shared by
tests/export/test_embed_export.py, tests/serving/test_embed_serving.py and
tests/apps/test_embed_app.py, and the independent answers they are checked
against: Hugging Face's `BertTokenizer` and `BertModel` on the same checkpoint
folder, mean-pooled over the attention mask and L2-normalized as
sentence-transformers pools.

The checkpoint is written by Hugging Face's own `save_pretrained` (random
weights, width 24, one block; `tests/models/test_pretrained.py`), so the
export (tracing four signatures) costs seconds, once per session.
"""

import dataclasses

import numpy as np
import pytest

VOCABULARY = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    *"the a of cat sat on mat stocks rose fell team won final market report new phone".split(),
    "##s",
    "##ing",
    ",",
    ".",
    "!",
]
POSITIONS = 24
SEQUENCE_LENGTH = 12  # the classifier's, below the checkpoint's positions: long texts are cut
# Varied lengths (the empty text is [CLS] [SEP]; the last is cut at SEQUENCE_LENGTH), cases,
# punctuation, words outside the vocabulary and accents.
TEXTS = [
    "the cat sat on the mat",
    "",
    "Stocks rose!",
    "the team won the final, the market fell.",
    "zebra quantum",
    "Café crème cats",
    "new phone",
    "the report " * 10,
]


@dataclasses.dataclass
class EmbeddingExport:
    checkpoint: str  # the Hugging Face checkpoint folder
    base_dir: str  # the export's base path
    version_dir: str  # base_dir/1
    model: object  # the exported `PretrainedClassifier`


# Built once per process: each test module importing a fixture registers a fixture of its own,
# so session scope alone would build one per module.
_CACHE = {}


@pytest.fixture(scope="session")
def embedding_export(tmp_path_factory):
    """`EmbeddingExport`: the tiny checkpoint, its classifier and the classifier's export."""
    if "export" not in _CACHE:
        _CACHE["export"] = build_embedding_export(tmp_path_factory)
    return _CACHE["export"]


@pytest.fixture(scope="session")
def embedding_saved_model(embedding_export):
    """The export's SavedModel, loaded once (each load costs seconds of restoring functions)."""
    from tests.serving.serving_helpers import load_direct

    if "saved_model" not in _CACHE:
        _CACHE["saved_model"] = load_direct(embedding_export.version_dir)
    return _CACHE["saved_model"]


def build_embedding_export(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from keras_transformer.export.classifier import export_classifier
    from keras_transformer.models import PretrainedClassifier
    from keras_transformer.text import PretrainedTokenizer
    from tests.models.test_pretrained import write_checkpoint

    root = tmp_path_factory.mktemp("embedding_export")
    checkpoint = root / "checkpoint"
    # One block: the export traces every signature through each of them.
    write_checkpoint(
        checkpoint,
        vocab_size=len(VOCABULARY),
        max_position_embeddings=POSITIONS,
        num_hidden_layers=1,
    )
    (checkpoint / "vocab.txt").write_text("".join(f"{token}\n" for token in VOCABULARY))
    model = PretrainedClassifier.from_pretrained(
        checkpoint, num_classes=2, dropout=0.0, sequence_length=SEQUENCE_LENGTH
    )
    model.build((None, SEQUENCE_LENGTH))
    tokenizer = PretrainedTokenizer.from_pretrained(checkpoint)
    base_dir = str(root / "export")
    # As a fine-tuning run exports a checkpoint's classifier: `[CLS] text [SEP]`.
    version_dir = export_classifier(
        model, tokenizer, ["no", "yes"], base_dir, add_cls=True, add_sep=True
    )
    return EmbeddingExport(str(checkpoint), base_dir, version_dir, model)


def hugging_face_ids(checkpoint, texts, length):
    """`(input_ids, attention_mask)` of Hugging Face's `BertTokenizer` on the checkpoint's
    vocabulary: `[CLS] text [SEP]`, cut at `length`, padded to the longest."""
    import transformers

    with open(f"{checkpoint}/vocab.txt", encoding="utf-8") as vocabulary_file:
        tokens = vocabulary_file.read().splitlines()
    tokenizer = transformers.BertTokenizer(
        vocab={token: index for index, token in enumerate(tokens)}, do_lower_case=True
    )
    encoded = tokenizer(
        list(texts), padding=True, truncation=True, max_length=length, return_tensors="np"
    )
    return encoded["input_ids"].astype("int32"), encoded["attention_mask"].astype(bool)


def hugging_face_embeddings(checkpoint, texts, length):
    """sentence-transformers' embeddings, computed from Hugging Face's `BertModel`: its last
    hidden states' mean over the attention mask, L2-normalized."""
    import torch
    import transformers

    input_ids, attention_mask = hugging_face_ids(checkpoint, texts, length)
    model = transformers.BertModel.from_pretrained(checkpoint).eval()
    with torch.no_grad():
        states = model(
            input_ids=torch.tensor(input_ids, dtype=torch.long),
            attention_mask=torch.tensor(attention_mask, dtype=torch.long),
        ).last_hidden_state.numpy()
    return normalized_mean(states, attention_mask)


def normalized_mean(states, mask):
    """NumPy: the mean of `states` `[B, T, d]` where `mask` `[B, T]`, divided by its norm."""
    weights = mask[..., None].astype(np.float64)
    mean = (states * weights).sum(axis=1) / weights.sum(axis=1)
    return mean / np.linalg.norm(mean, axis=-1, keepdims=True)


def cosines(first, second):
    """Row-wise cosine similarity of two `[B, d]` arrays, in float64."""
    first, second = np.asarray(first, np.float64), np.asarray(second, np.float64)
    return (first * second).sum(-1) / (
        np.linalg.norm(first, axis=-1) * np.linalg.norm(second, axis=-1)
    )
