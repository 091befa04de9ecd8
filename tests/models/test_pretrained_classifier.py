"""`PretrainedClassifier`: a checkpoint's encoder with a new head, fine-tuned
whole or through low-rank adapters, saved and reloaded."""

import keras
import numpy as np
import pytest

from keras_transformer.models import PretrainedClassifier
from tests.models.test_pretrained import TOKEN_IDS, reference_states, write_checkpoint

pytest.importorskip("transformers")


def as_numpy(tensor):
    return np.asarray(keras.ops.convert_to_numpy(tensor))


def keyword_task(rows=32, length=10, seed=0):
    """Random ids, one keyword per row: 20 for class 0, 40 for class 1; [CLS] = 2 first."""
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(5, 15, size=(rows, length)).astype("int32")
    labels = np.arange(rows) % 2
    token_ids[:, 0] = 2
    token_ids[np.arange(rows), rng.integers(1, length - 2, rows)] = np.where(labels == 0, 20, 40)
    token_ids[rows // 2 :, length - 2 :] = 0  # some rows padded
    return token_ids, labels


@pytest.mark.parametrize("lora_rank", [None, 4], ids=["whole", "lora"])
def test_fine_tuning_learns_a_keyword_task(tmp_path, lora_rank):
    write_checkpoint(tmp_path)
    keras.utils.set_random_seed(3)
    classifier = PretrainedClassifier.from_pretrained(
        tmp_path, num_classes=2, dropout=0.0, lora_rank=lora_rank
    )
    token_ids, labels = keyword_task()
    frozen = {v.path: as_numpy(v) for v in classifier.weights if not v.trainable}
    trainable = [variable.path for variable in classifier.trainable_variables]
    if lora_rank is None:  # all but BERT's pooler, which mean pooling leaves out
        assert sorted(path.split("/")[-2:][0] for path in frozen) == ["pooler", "pooler"]
    else:  # the adapters, their projections' biases and the head
        assert len(frozen) > len(trainable)
        assert all("lora_kernel" in path or "bias" in path or "head" in path for path in trainable)
    classifier.compile(
        # Adapters and a head only learn more slowly from random features.
        optimizer=keras.optimizers.Adam(3e-3 if lora_rank is None else 2e-2),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    history = classifier.fit(token_ids, labels, epochs=25, batch_size=8, verbose=0).history
    assert history["accuracy"][-1] == 1.0, history["accuracy"]
    for variable in classifier.weights:
        if variable.path in frozen:
            np.testing.assert_array_equal(as_numpy(variable), frozen[variable.path], variable.path)

    path = str(tmp_path / "classifier.keras")
    classifier.save(path)
    reloaded = keras.models.load_model(path)
    np.testing.assert_allclose(
        as_numpy(reloaded(token_ids)), as_numpy(classifier(token_ids)), atol=1e-5
    )


def test_cls_pooling_is_berts_pooler_under_the_head(tmp_path):
    reference = write_checkpoint(tmp_path)
    _, pooled = reference_states(reference, token_types=np.zeros_like(TOKEN_IDS))
    classifier = PretrainedClassifier.from_pretrained(tmp_path, num_classes=3, pooling="cls")
    probabilities = as_numpy(classifier(TOKEN_IDS))
    kernel, bias = (as_numpy(w) for w in classifier.head.weights)
    logits = pooled @ kernel + bias
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)


@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_pooling_over_real_tokens_is_the_reference_states_pooled(tmp_path, pooling):
    reference = write_checkpoint(tmp_path)
    states, _ = reference_states(reference, token_types=np.zeros_like(TOKEN_IDS))
    classifier = PretrainedClassifier.from_pretrained(tmp_path, num_classes=3, pooling=pooling)
    classifier(TOKEN_IDS)  # builds the head
    kernel, bias = (as_numpy(w) for w in classifier.head.weights)
    for row, token_ids in enumerate(TOKEN_IDS):
        real = states[row][token_ids != 0]
        logits = (real.mean(0) if pooling == "mean" else real.max(0)) @ kernel + bias
        expected = np.exp(logits - logits.max())
        np.testing.assert_allclose(
            as_numpy(classifier(TOKEN_IDS[row : row + 1]))[0],
            expected / expected.sum(),
            atol=1e-5,
        )


@pytest.mark.parametrize("pooling", ["mean", "max"])
def test_pooling_ignores_padding(tmp_path, pooling):
    write_checkpoint(tmp_path)
    classifier = PretrainedClassifier.from_pretrained(tmp_path, num_classes=2, pooling=pooling)
    token_ids = np.array([[2, 7, 9, 3]], dtype="int32")
    padded = np.concatenate([token_ids, np.zeros((1, 5), "int32")], axis=1)
    np.testing.assert_allclose(
        as_numpy(classifier(padded)), as_numpy(classifier(token_ids)), atol=1e-5
    )


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"num_classes": 2, "pooling": "sum"}, "`pooling` must be one of"),
        ({"num_classes": 2, "sequence_length": 17}, "`sequence_length` must be an integer from"),
        ({"num_classes": 1}, "`num_classes` must be an integer of at least 2"),
    ],
)
def test_bad_arguments_are_named(tmp_path, arguments, message):
    write_checkpoint(tmp_path)
    with pytest.raises(ValueError, match=message):
        PretrainedClassifier.from_pretrained(tmp_path, **arguments)
