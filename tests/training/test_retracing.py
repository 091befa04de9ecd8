"""The applications' `fit` traces the train step once for batches of one shape.

A retrace costs seconds of graph building (more for a deep model), and one
that happens on every new batch would make training crawl. The train step's
Python body runs only while TensorFlow traces it, so counting its executions
counts traces. Every batch here has one shape: each text is longer than
`sequence_length`, so every row is truncated to it and no padding is trimmed,
and the number of examples is a multiple of the batch size.

The test runs the real training function of the classifier app
(`train_classifier`), callbacks and all, for two epochs. The translator's
(`train_translator`) is checked the same way on the interrupted and resumed
run of tests/training/test_translation_selection.py, which counts with
`count_train_step_traces` and `long_texts`.
"""

import keras
import numpy as np
import pytest

from keras_transformer.data.classification import ClassificationData, TextSplit
from keras_transformer.models import TransformerClassifier
from keras_transformer.training.classifier.pipeline import train_classifier
from keras_transformer.training.classifier.settings import ClassifierSettings

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
SEQUENCE_LENGTH = 8
BATCH_SIZE = 8
EPOCHS = 2


def long_texts(count, seed, words=12):
    """`count` texts of `words` words each (12: longer than `SEQUENCE_LENGTH` tokens)."""
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=words)) for _ in range(count)]


def count_train_step_traces(monkeypatch, model_class):
    """Wraps `model_class.train_step`; returns a list that grows by one per
    trace, with the shapes of the batch it was traced for."""
    traces = []
    original = model_class.train_step

    def counting_train_step(self, data):
        # Python side: runs once per trace, not per batch.
        traces.append(keras.tree.map_structure(lambda tensor: tuple(tensor.shape), data))
        return original(self, data)

    monkeypatch.setattr(model_class, "train_step", counting_train_step)
    return traces


def test_classifier_fit_traces_its_train_step_once(tmp_path, monkeypatch):
    traces = count_train_step_traces(monkeypatch, TransformerClassifier)

    def split(count, seed):
        return TextSplit(long_texts(count, seed), np.arange(count) % 2)

    data = ClassificationData(
        "synthetic",
        split(4 * BATCH_SIZE, 0),
        split(BATCH_SIZE, 1),
        split(BATCH_SIZE, 2),
        ["even", "odd"],
    )
    settings = ClassifierSettings(
        epochs=EPOCHS,
        batch_size=BATCH_SIZE,
        sequence_length=SEQUENCE_LENGTH,
        vocabulary_size=100,
        num_layers=1,
        d_model=16,
        num_heads=2,
        intermediate_dim=32,
        patience=0,
    )
    run = train_classifier(data, settings, tmp_path / "run", verbose=0)

    assert run.epochs_completed == EPOCHS
    assert len(traces) == 1, f"the train step was traced {len(traces)} times: {traces}"


@pytest.fixture(autouse=True)
def _tensorflow_only():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the training applications run on the TensorFlow backend")
