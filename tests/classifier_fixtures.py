"""One small classifier trained by `apps.train_classifier` and exported, shared by
tests/apps and tests/export, a second run beside it that its time budget stops, and the
first run's export as if validation had given its Transformer weight 0.

The corpus is synthetic: each class has its own three keywords, mixed with
filler words every class uses, so a one-block model learns it in three
epochs. Training runs once per session (`trained_classifier`, `budget_classifier`),
however many conftest files expose the fixtures. Each app run costs tens of seconds
of graph tracing, so the tests share these two rather than train their own; the
SavedModels and Keras files they read are loaded once per session too
(`load_export`, `load_keras_model`).
"""

import contextlib
import csv
import dataclasses
import io
import json
import os
import random
import shutil

import pytest

# Class name -> its keywords. The app sorts class names, so the model's class
# order is `CLASS_NAMES`.
KEYWORDS = {
    "sport": ("goal", "match", "team"),
    "business": ("stocks", "market", "shares"),
    "culture": ("film", "music", "actor"),
}
CLASS_NAMES = sorted(KEYWORDS)
FILLER = (
    "the a of and to in is was on for with as by at from this that it "
    "today yesterday people city news report week year new old big small"
).split()

# One Transformer block of width 16: trains in seconds on two CPU cores.
TINY_ENCODER_FLAGS = [
    "--num-layers",
    "1",
    "--d-model",
    "16",
    "--num-heads",
    "2",
    "--intermediate-dim",
    "32",
]
# Small enough to train, evaluate and export in seconds on two CPU cores.
MODEL_FLAGS = [
    "--sequence-length",
    "32",
    "--vocab-size",
    "200",
    *TINY_ENCODER_FLAGS,
    # Pinned rather than the app's defaults (tuned for BBC), so the tiny
    # keyword task stays learnable in three epochs whatever the defaults become.
    "--pooling",
    "mean",
    "--dropout",
    "0.1",
]
TRAIN_FLAGS = [
    *MODEL_FLAGS,
    "--epochs",
    "3",
    "--batch-size",
    "16",
    "--learning-rate",
    "0.005",
    "--verbose",
    "0",
]


def keyword_text(label, rng, filler_words=4, fillers=FILLER):
    words = list(KEYWORDS[label]) + rng.sample(fillers, filler_words)
    rng.shuffle(words)
    return " ".join(words)


def write_keyword_csv(path, num_examples=120, seed=0, classes=None, fillers=FILLER):
    """Writes a `text,label` CSV of `num_examples` keyword texts, classes in turn, their
    filler words drawn from `fillers`."""
    rng = random.Random(seed)
    classes = list(classes or KEYWORDS)
    with open(path, "w", newline="", encoding="utf-8") as csv_file:
        writer = csv.writer(csv_file)
        writer.writerow(["text", "label"])
        for index in range(num_examples):
            label = classes[index % len(classes)]
            writer.writerow([keyword_text(label, rng, fillers=fillers), label])
    return str(path)


@dataclasses.dataclass(frozen=True)
class TrainedClassifier:
    csv_path: str
    run_dir: str
    export_dir: str  # the base folder
    version_dir: str  # export_dir/1
    exit_status: int
    stdout: str
    class_names: list


_CACHE = {}


def train_and_export(tmp_path_factory):
    """Runs `apps.train_classifier.main` once per session; later calls reuse it."""
    if "trained" not in _CACHE:
        from keras_transformer.cli import train_classifier

        folder = tmp_path_factory.mktemp("trained_classifier")
        csv_path = write_keyword_csv(folder / "keywords.csv")
        run_dir = str(folder / "run")
        export_dir = str(folder / "export")
        # Keep what main prints out of whichever test asked first.
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            status = train_classifier.main(
                [
                    "--data",
                    f"csv:{csv_path}",
                    *TRAIN_FLAGS,
                    "--run-dir",
                    run_dir,
                    "--export-dir",
                    export_dir,
                ]
            )
        _CACHE["trained"] = TrainedClassifier(
            csv_path=csv_path,
            run_dir=run_dir,
            export_dir=export_dir,
            version_dir=os.path.join(export_dir, "1"),
            exit_status=status,
            stdout=printed.getvalue(),
            class_names=list(CLASS_NAMES),
        )
    return _CACHE["trained"]


@pytest.fixture(scope="session")
def trained_classifier(tmp_path_factory):
    """`TrainedClassifier`: a run folder and `export/1` from `apps.train_classifier`."""
    return train_and_export(tmp_path_factory)


@dataclasses.dataclass(frozen=True)
class BudgetClassifier:
    run_dir: str
    export_dir: str  # a copy of the trained classifier's, holding version 1
    version_dir: str  # export_dir/2, this run's export
    exit_status: int
    version_1_before: dict  # `snapshot` of export_dir/1 before this run exported
    batches: list  # the batches after which the time budget was checked


def train_until_the_budget(tmp_path_factory):
    """Runs `apps.train_classifier.main` for 50 epochs with a 0.001-minute budget, once per
    session, exporting into a copy of the trained classifier's export folder.

    Without the bag of n-grams: a run folder of the other kind than the trained classifier's,
    and the cheapest to train and export (the bag's graph dominates a tiny model's tracing).
    """
    if "budget" not in _CACHE:
        from keras_transformer.cli import train_classifier
        from keras_transformer.training import callbacks as training_callbacks

        trained = train_and_export(tmp_path_factory)
        folder = tmp_path_factory.mktemp("budget_classifier")
        export_dir = str(folder / "export")
        shutil.copytree(trained.export_dir, export_dir)  # copy2: keeps mtimes
        before = snapshot(os.path.join(export_dir, "1"))
        run_dir = str(folder / "run")
        batches = []
        original = training_callbacks.TimeBudget.on_train_batch_end

        def counting(self, batch, logs=None):
            batches.append(batch)
            return original(self, batch, logs)

        printed = io.StringIO()
        with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
            patch.setattr(training_callbacks.TimeBudget, "on_train_batch_end", counting)
            status = train_classifier.main(
                [
                    "--data",
                    f"csv:{trained.csv_path}",
                    *TRAIN_FLAGS,
                    "--epochs",
                    "50",
                    "--time-budget",
                    "0.001",
                    "--no-bag-of-ngrams",
                    "--run-dir",
                    run_dir,
                    "--export-dir",
                    export_dir,
                ]
            )
        _CACHE["budget"] = BudgetClassifier(
            run_dir=run_dir,
            export_dir=export_dir,
            version_dir=os.path.join(export_dir, "2"),
            exit_status=status,
            version_1_before=before,
            batches=batches,
        )
    return _CACHE["budget"]


@pytest.fixture(scope="session")
def budget_classifier(tmp_path_factory):
    """`BudgetClassifier`: a run stopped by `--time-budget` after its first batch."""
    return train_until_the_budget(tmp_path_factory)


@dataclasses.dataclass(frozen=True)
class BagAloneClassifier:
    run_dir: str  # the trained run's files, its model's head zeroed, its record at weight 0
    export_dir: str
    version_dir: str  # export_dir/1, exported by `export_run`


# The files of a run folder that exporting reads.
RUN_FILES = ("settings.json", "vocabulary.txt", "metrics.json", "model.keras")


def export_the_bag_alone(tmp_path_factory):
    """The trained classifier's run as if validation had given the Transformer weight 0
    (`add_bag_of_ngrams` then zeroes the head and keeps the bag's weights), exported by
    `export_run` once per session. Training again until validation chose weight 0 would
    cost a run; the choice, not the training, is what the export reads."""
    if "bag_alone" not in _CACHE:
        import keras
        import numpy as np

        from keras_transformer.training.classifier.bag_of_ngrams import mix_name
        from keras_transformer.training.run_export import export_run

        trained = train_and_export(tmp_path_factory)
        folder = tmp_path_factory.mktemp("bag_alone_classifier")
        run_dir = folder / "run"
        run_dir.mkdir()
        for name in RUN_FILES:
            shutil.copy2(os.path.join(trained.run_dir, name), run_dir / name)
        model = keras.models.load_model(run_dir / "model.keras", compile=False)
        for weight in (model.head.kernel, model.head.bias):
            weight.assign(np.zeros(weight.shape, weight.dtype))
        model.save(run_dir / "model.keras")
        metrics = json.loads((run_dir / "metrics.json").read_text())
        combination = metrics["bag_of_ngrams"]
        combination["transformer_weight"] = 0.0
        combination["mix"] = mix_name((0.0, combination["bag_weight"]))
        (run_dir / "metrics.json").write_text(json.dumps(metrics))
        export_dir = str(folder / "export")
        exported = export_run(str(run_dir), export_dir)
        _CACHE["bag_alone"] = BagAloneClassifier(str(run_dir), export_dir, exported.version_dir)
    return _CACHE["bag_alone"]


@pytest.fixture(scope="session")
def bag_alone_classifier(tmp_path_factory):
    """`BagAloneClassifier`: the trained run at Transformer weight 0, exported."""
    return export_the_bag_alone(tmp_path_factory)


def load_export(path):
    """`tf.saved_model.load(path)`, once per session for each path."""
    key = ("export", os.path.abspath(path))
    if key not in _CACHE:
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  registers the tokenizer ops of the export

        _CACHE[key] = tf.saved_model.load(path)
    return _CACHE[key]


def load_keras_model(path):
    """`keras.models.load_model(path)`, once per session for each path: only for tests that
    call the model, never change it."""
    key = ("keras", os.path.abspath(path))
    if key not in _CACHE:
        import keras

        _CACHE[key] = keras.models.load_model(path)
    return _CACHE[key]


def expect_usage_error(main, argv, capsys):
    """Runs an app's `main(argv)`, expecting exit status 2 and one `error: ...` line."""
    with pytest.raises(SystemExit) as raised:
        main(argv)
    assert raised.value.code == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return lines[0]


def snapshot(folder):
    """{relative path: (bytes, mtime_ns)} of every file under `folder`."""
    files = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as file:
                files[os.path.relpath(path, folder)] = (file.read(), os.stat(path).st_mtime_ns)
    return files


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def is_png(path):
    with open(path, "rb") as file:
        return file.read(8) == PNG_SIGNATURE
