"""`keras-transformer train-classifier --pretrained PATH`: a BERT-family checkpoint
(random weights, small, written here by Hugging Face's own `save_pretrained`)
fine-tuned on the keyword corpus, exported, and answering raw strings.

The export is checked against an independent path: Hugging Face's
`BertTokenizer` on the same vocabulary encodes the texts, and the trained
`model.keras` classifies those ids.
"""

import csv
import json
import os
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.cli import train_classifier
from keras_transformer.cli.training_flags import flags_given
from keras_transformer.data.tokens import CLASSIFIER_VOCABULARY
from keras_transformer.models import PretrainedClassifier
from keras_transformer.models.pretrained import read_checkpoint_weights
from tests.classifier_fixtures import CLASS_NAMES, FILLER, KEYWORDS, write_keyword_csv

transformers = pytest.importorskip("transformers")
pytest.importorskip("torch")

from tests.models.test_pretrained import write_checkpoint  # noqa: E402  needs torch

VOCABULARY = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    *sorted({word for words in KEYWORDS.values() for word in words} | set(FILLER)),
    "##s",
    "##ing",
    ",",
    ".",
]
POSITIONS = 24
TEXTS = ["The TEAM scored a goal in the match.", "stocks fell", "zebra film, actors"]
FIT_FLAGS = ["--epochs", "3", "--batch-size", "16", "--verbose", "0"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("checkpoint")
    write_checkpoint(folder, vocab_size=len(VOCABULARY), max_position_embeddings=POSITIONS)
    (folder / "vocab.txt").write_text("".join(f"{token}\n" for token in VOCABULARY))
    return folder


@pytest.fixture(scope="module")
def keyword_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "keywords.csv"
    write_keyword_csv(path)
    return path


def train(checkpoint, keyword_csv, folder, *flags, export=True):
    argv = [
        "--data",
        f"csv:{keyword_csv}",
        "--pretrained",
        str(checkpoint),
        *FIT_FLAGS,
        *flags,
        "--run-dir",
        str(folder / "run"),
    ]
    argv += ["--export-dir", str(folder / "export")] if export else ["--no-export"]
    assert train_classifier.main(argv) == 0
    with open(folder / "run" / "settings.json") as settings_file:
        return json.load(settings_file)


@pytest.fixture(scope="module")
def fine_tuned(checkpoint, keyword_csv, tmp_path_factory):
    from keras_transformer.training.classifier import pipeline

    made = []

    class RecordedBatches(pipeline.ArrayBatches):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    folder = tmp_path_factory.mktemp("fine_tuned")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "ArrayBatches", RecordedBatches)
        # A random checkpoint has nothing to keep: a from-scratch learning rate learns in 3
        # epochs.
        saved = train(checkpoint, keyword_csv, folder, "--learning-rate", "0.003")
    return folder, saved, [batches for batches in made if batches.seed is not None]


def test_fine_tuning_batches_texts_of_like_lengths(fine_tuned):
    _, saved, (training_batches,) = fine_tuned
    assert saved["settings"]["bucket_width"] == training_batches.bucket_width == 8
    lengths = training_batches.row_lengths()
    full = [rows for rows in training_batches.batch_rows(0) if len(rows) == 16]
    assert full and all(
        (lengths[rows] - 1).max() // 8 == (lengths[rows] - 1).min() // 8 for rows in full
    )


def test_the_run_takes_the_checkpoints_vocabulary_and_sizes(checkpoint, fine_tuned):
    folder, saved, _ = fine_tuned
    settings, chosen = saved["settings"], saved["chosen_from_data"]
    assert settings["pretrained"] == str(checkpoint)
    with open(checkpoint / "config.json") as config_file:
        config = json.load(config_file)
    for name, key in [
        ("vocabulary_size", "vocab_size"),
        ("num_layers", "num_hidden_layers"),
        ("d_model", "hidden_size"),
        ("num_heads", "num_attention_heads"),
        ("intermediate_dim", "intermediate_size"),
    ]:
        assert settings[name] == config[key] == chosen[name]["value"], name
    assert settings["max_length"] == POSITIONS
    assert settings["sequence_length"] <= POSITIONS
    assert "[CLS] and [SEP]" in chosen["sequence_length"]["reason"]
    # The fine-tuning defaults where no flag was given; the flag where one was.
    assert settings["pooling"] == "mean"
    assert settings["bag_of_ngrams"] is True
    assert settings["learning_rate"] == 0.003
    assert (folder / "run" / CLASSIFIER_VOCABULARY).read_text().split("\n")[:-1] == VOCABULARY


def test_fine_tuning_learns_the_keywords(fine_tuned):
    folder, _, _ = fine_tuned
    with open(folder / "run" / "metrics.json") as metrics_file:
        metrics = json.load(metrics_file)
    assert metrics["accuracy"] >= 0.9, metrics


def test_the_export_answers_raw_strings_as_the_model_does_on_bert_tokenizers_ids(fine_tuned):
    folder, saved, _ = fine_tuned
    length = saved["settings"]["sequence_length"]
    tokens = (folder / "run" / CLASSIFIER_VOCABULARY).read_text().splitlines()
    reference = transformers.BertTokenizer(
        vocab={token: index for index, token in enumerate(tokens)}, do_lower_case=True
    )
    token_ids = reference(
        TEXTS, padding="max_length", truncation=True, max_length=length, return_tensors="np"
    )["input_ids"].astype("int32")
    model = keras.models.load_model(folder / "run" / "model.keras", compile=False)
    assert isinstance(model, PretrainedClassifier)
    expected = keras.ops.convert_to_numpy(model(token_ids, training=False))

    import tensorflow_text  # noqa: F401  registers the tokenizer's ops

    versions = sorted(os.listdir(folder / "export"))
    export = tf.saved_model.load(str(folder / "export" / versions[-1]))
    answers = export.signatures["serving_default"](text=tf.constant(TEXTS))
    np.testing.assert_allclose(answers["probabilities"].numpy(), expected, atol=1e-5)
    assert [label.decode() for label in answers["label"].numpy()] == [
        CLASS_NAMES[index] for index in expected.argmax(-1)
    ]
    attention = export.signatures["attention"](text=tf.constant(TEXTS))
    tokens = attention["tokens"].numpy()
    assert tokens[0][0] == b"[CLS]" and b"[SEP]" in tokens[0].tolist()


def test_lora_moves_the_adapters_and_the_head_only(checkpoint, keyword_csv, tmp_path):
    saved = train(checkpoint, keyword_csv, tmp_path, "--lora-rank", "2", export=False)
    assert saved["settings"]["lora_rank"] == 2
    assert saved["settings"]["learning_rate"] == 5e-4  # the adapters' default
    model = keras.models.load_model(tmp_path / "run" / "model.keras", compile=False)
    original = read_checkpoint_weights(checkpoint)
    block = model.encoder.encoder_blocks[0]

    def moved(dense, name):
        kernel = keras.ops.convert_to_numpy(dense.kernel)
        return kernel.reshape(kernel.shape[0], -1) - original[name].T

    # Keras folds the adapters into the kernels it saves: the key projection and the
    # feed-forward network are the checkpoint's; the query moved by a low-rank matrix: Keras'
    # adapter on the `[d_model, heads, head_size]` kernel has rank 2 per head.
    assert not moved(
        block.self_attention.key_dense, "encoder.layer.0.attention.self.key.weight"
    ).any()
    query = moved(block.self_attention.query_dense, "encoder.layer.0.attention.self.query.weight")
    assert np.abs(query).max() > 1e-4
    rank = np.linalg.matrix_rank(query, tol=1e-6)
    assert rank <= 2 * model.encoder.num_heads < query.shape[1], rank

    # The adapters alone, on the checkpoint, are the model Keras saved with them folded in.
    adapters = tmp_path / "run" / "adapters.npz"
    assert adapters.stat().st_size < (tmp_path / "run" / "model.keras").stat().st_size / 2
    rebuilt = PretrainedClassifier.from_adapters(checkpoint, adapters)
    token_ids = np.array([[2, 7, 9, 12, 3, 0], [2, 11, 3, 0, 0, 0]], "int32")
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(rebuilt(token_ids)),
        keras.ops.convert_to_numpy(model(token_ids)),
        atol=1e-5,
    )


def test_a_bag_of_ngrams_beside_the_checkpoint_reads_past_it_and_travels_with_the_export(
    checkpoint, keyword_csv, tmp_path
):
    saved = train(
        checkpoint,
        keyword_csv,
        tmp_path,
        "--learning-rate",
        "0.003",
        "--sequence-length",
        "6",
        "--ngram-length",
        "16",
    )
    assert (saved["settings"]["sequence_length"], saved["settings"]["ngram_length"]) == (6, 16)
    with open(tmp_path / "run" / "metrics.json") as metrics_file:
        metrics = json.load(metrics_file)
    parts = metrics["bag_of_ngrams"]["parts"]
    assert set(parts) == {"transformer", "bag_of_ngrams", "mix"}
    # The keywords lie anywhere in a text: the bag reads all of it, the encoder 6 tokens.
    assert parts["bag_of_ngrams"]["test"]["accuracy"] >= 0.9, parts
    assert metrics["accuracy"] == pytest.approx(parts["mix"]["test"]["accuracy"])
    tokens = (tmp_path / "run" / CLASSIFIER_VOCABULARY).read_text().splitlines()
    reference = transformers.BertTokenizer(
        vocab={token: index for index, token in enumerate(tokens)}, do_lower_case=True
    )
    long_texts = [" ".join([TEXTS[0]] * 3), *TEXTS[1:]]
    token_ids = reference(
        long_texts, padding="max_length", truncation=True, max_length=16, return_tensors="np"
    )["input_ids"].astype("int32")
    model = keras.models.load_model(tmp_path / "run" / "model.keras", compile=False)
    assert model.input_length == 16 and model.ngrams is not None
    expected = keras.ops.convert_to_numpy(model(token_ids, training=False))

    import tensorflow_text  # noqa: F401  registers the tokenizer's ops

    versions = sorted(os.listdir(tmp_path / "export"))
    export = tf.saved_model.load(str(tmp_path / "export" / versions[-1]))
    answers = export.signatures["serving_default"](text=tf.constant(long_texts))
    np.testing.assert_allclose(answers["probabilities"].numpy(), expected, atol=1e-5)
    mix = metrics["bag_of_ngrams"]
    with open(tmp_path / "export" / versions[-1] / "assets.extra" / "classifier.json") as file:
        shipped = json.load(file)
    assert (shipped["transformer_weight"], shipped["bag_weight"], shipped["bag_tokens"]) == (
        mix["transformer_weight"],
        mix["bag_weight"],
        16,
    )


def test_a_search_from_a_checkpoint_tries_peak_rates_and_keeps_the_best_transformer(
    checkpoint, keyword_csv, tmp_path
):
    saved = train(
        checkpoint,
        keyword_csv,
        tmp_path,
        *("--search", "2", "--epochs", "1", "--no-bag-of-ngrams"),
        export=False,
    )
    with open(tmp_path / "run" / "search.json") as search_file:
        search = json.load(search_file)
    # The fine-tuning default first, then four times it; nothing else varies.
    assert [trial["values"] for trial in search["trials"]] == [
        {"learning_rate": 5e-5},
        {"learning_rate": 2e-4},
    ]
    scores = []
    for trial in search["trials"]:
        trial_run = tmp_path / "run" / "search" / f"trial_{trial['trial_id']}" / "run"
        with open(trial_run / "history.csv") as history_file:
            rows = list(csv.DictReader(history_file))
        # Ranked by the Transformer's own best validation epoch, not by the mix with the bag.
        best_row = max(rows, key=lambda row: float(row["val_accuracy"]))
        assert trial["score"] == pytest.approx(float(best_row["val_accuracy"]))
        scores.append((trial["score"], -trial["loss"]))
    kept = search["trials"][scores.index(max(scores))]
    assert search["kept"] == kept["trial_id"]
    assert saved["settings"]["learning_rate"] == kept["values"]["learning_rate"]
    assert saved["settings"]["pretrained"] == str(checkpoint)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--lora-rank", "4"], "give `pretrained` too"),
        (["--pretrained", "{checkpoint}", "--d-model", "32"], "--d-model: the checkpoint"),
        (["--pretrained", "{checkpoint}", "--search", "4"], "tries at most 3 peak learning rates"),
        (
            ["--pretrained", "{checkpoint}", "--search", "2", "--learning-rate", "1e-4"],
            "--search varies --learning-rate, and every one is given",
        ),
        (["--pretrained", "{missing}"], "is not a folder"),
        (["--layer-decay", "0.9"], "--layer-decay) lowers the learning rates"),
        (
            ["--pretrained", "{checkpoint}", "--layer-decay", "0"],
            "--layer-decay) must be in (0, 1]",
        ),
        (["--pretrained", "{checkpoint}", "--layer-decay", "1.5"], "must be in (0, 1], got 1.5"),
    ],
)
def test_flags_that_do_not_fit_a_checkpoint_are_named(
    checkpoint, keyword_csv, tmp_path, capsys, flags, message
):
    flags = [flag.format(checkpoint=checkpoint, missing=tmp_path / "missing") for flag in flags]
    with pytest.raises(SystemExit) as exit_info:
        train_classifier.main(
            ["--data", f"csv:{keyword_csv}", *flags, "--run-dir", str(tmp_path / "run")]
        )
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_fine_tuning_defaults_apply_where_no_flag_was_given(checkpoint, capsys):
    parser = train_classifier.build_parser()

    def settings(*argv):
        return train_classifier.settings_from(
            parser.parse_args(argv), given=flags_given(parser, list(argv))
        )

    def shown(values):
        return (
            values.pooling,
            values.learning_rate,
            values.bag_of_ngrams,
            values.dropout,
            values.epochs,
            values.weight_decay,
            values.layer_decay,
            values.bucket_width,
        )

    assert shown(settings()) == ("max", 1e-3, True, 0.3, 12, 0.01, 1.0, None)
    fine_tuning = ("mean", 5e-5, True, 0.1, 5, 0.01, 1.0, 8)
    assert shown(settings("--pretrained", str(checkpoint))) == fine_tuning
    assert settings("--pretrained", str(checkpoint), "--lora-rank", "8").learning_rate == 5e-4
    given = settings("--pretrained", str(checkpoint), "--pooling", "cls", "--learning-rate", "1e-4")
    assert (given.pooling, given.learning_rate) == ("cls", 1e-4)
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "default 0.001; 5e-05 with --pretrained; 0.0005 with --lora-rank" in help_text
    assert "--layer-decay FACTOR with --pretrained: the head and pooler learn" in help_text
    assert "in (0, 1], 0.9 is the usual recipe (default 1.0: off)" in help_text
    assert "not on the layer norms and biases" in help_text


def test_resume_continues_a_stopped_fine_tuning(checkpoint, keyword_csv, tmp_path, monkeypatch):
    from keras_transformer.training.classifier import pipeline

    class StopAfterTheSecondEpoch(pipeline.FitScheduleToBudget):
        def on_epoch_end(self, epoch, logs=None):
            super().on_epoch_end(epoch, logs)
            if epoch == 1:
                raise KeyboardInterrupt  # as Ctrl-C would stop it

    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "FitScheduleToBudget", StopAfterTheSecondEpoch)
        with pytest.raises(KeyboardInterrupt):
            train(
                checkpoint,
                keyword_csv,
                tmp_path,
                "--epochs",
                "4",
                "--layer-decay",
                "0.8",
                export=False,
            )
    assert not (tmp_path / "run" / "metrics.json").exists()
    before = (tmp_path / "run" / "history.csv").read_text().splitlines()
    argv = ["--data", f"csv:{keyword_csv}", "--pretrained", str(checkpoint), "--epochs", "4"]
    argv += ["--verbose", "0", "--run-dir", str(tmp_path / "run"), "--no-export", "--resume"]
    assert train_classifier.main(argv) == 0
    history = (tmp_path / "run" / "history.csv").read_text().splitlines()
    epochs = [int(row.split(",")[0]) for row in history[1:]]
    assert history[: len(before)] == before
    assert sorted(set(epochs)) == [0, 1, 2, 3] and len(epochs) <= 5, history
    with open(tmp_path / "run" / "metrics.json") as metrics_file:
        assert json.load(metrics_file)["epochs_completed"] == 4
    # The resumed run kept the saved --layer-decay, and its optimizer saved the factors.
    with open(tmp_path / "run" / "settings.json") as settings_file:
        assert json.load(settings_file)["settings"]["layer_decay"] == 0.8
    with zipfile.ZipFile(tmp_path / "run" / "model.keras") as saved:
        optimizer = json.loads(saved.read("config.json"))["compile_config"]["optimizer"]
    assert optimizer["class_name"] == "FineTuningAdamW"
    assert optimizer["registered_name"] == "keras_transformer>FineTuningAdamW"
    factors = optimizer["config"]["learning_rate_factors"]
    assert factors["encoder_block_1"] == pytest.approx(0.8)
    assert factors["encoder_block_0"] == pytest.approx(0.8**2)
    assert factors["embedding_norm"] == pytest.approx(0.8**3)
