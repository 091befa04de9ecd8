"""TransformerClassifier: probabilities, padding-aware pooling, scores, saving, training."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.models import TransformerClassifier
from keras_transformer.training.compiling import build_optimizer

VOCAB, CLASSES, LENGTH = 30, 3, 16
D_MODEL, HEADS, FF, LAYERS = 16, 2, 32, 2
CLS_ID = 2  # [CLS] in keras_transformer.text.RESERVED_TOKENS
POOLINGS = ["mean", "max", "cls"]
ATOL = 1e-5


def as_numpy(tensor):
    return np.asarray(ops.convert_to_numpy(tensor), dtype=np.float64)


def make_model(pooling="mean", normalize_first=False, positional="learned", dropout=0.2, **kwargs):
    return TransformerClassifier(
        VOCAB,
        CLASSES,
        sequence_length=LENGTH,
        num_layers=kwargs.pop("num_layers", LAYERS),
        d_model=D_MODEL,
        num_heads=HEADS,
        intermediate_dim=FF,
        dropout=dropout,
        pooling=pooling,
        positional=positional,
        normalize_first=normalize_first,
        **kwargs,
    )


MODEL_VARIANTS = [
    (pooling, normalize_first, "learned")
    for pooling in POOLINGS
    for normalize_first in (False, True)
] + [("mean", False, "sinusoidal")]


@pytest.fixture(scope="module")
def built_models(randomize):
    """(pooling, normalize_first, positional) -> a built model with random weights (dropout 0.2)."""
    cache = {}

    def get(pooling="mean", normalize_first=False, positional="learned"):
        key = (pooling, normalize_first, positional)
        if key not in cache:
            keras.utils.set_random_seed(3)
            model = make_model(pooling, normalize_first, positional)
            model(np.ones((1, LENGTH), "int32"))
            randomize(model, seed=len(cache) + 1)
            cache[key] = model
        return cache[key]

    return get


def token_batch(lengths, total=LENGTH, seed=0, cls=False):
    """Rows of random real ids (>= 3, so never [CLS] or padding) with the given lengths,
    0-padded."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), total), "int32")
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(3, VOCAB, size=length)
        if cls:
            ids[row, 0] = CLS_ID
    return ids


def pre_pool_sequence(model, ids):
    """The encoder stack's output, computed layer by layer (dropout off)."""
    mask = ids != 0
    x = model.embedding(ids)
    for block in model.encoder_blocks:
        x = block(x, padding_mask=mask, training=False)
    if model.final_norm is not None:
        x = model.final_norm(x)
    return as_numpy(x)


def numpy_head(model, pooled):
    logits = pooled @ as_numpy(model.head.kernel) + as_numpy(model.head.bias)
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    return exp / exp.sum(-1, keepdims=True)


# --- outputs -----------------------------------------------------------------


@pytest.mark.parametrize("pooling", POOLINGS)
def test_output_is_a_probability_per_class(built_models, pooling):
    model = built_models(pooling)
    ids = token_batch([16, 9, 4], cls=pooling == "cls")
    probabilities = model(ids, training=False)
    assert tuple(probabilities.shape) == (3, CLASSES)
    assert keras.backend.standardize_dtype(probabilities.dtype) == "float32"
    probabilities = as_numpy(probabilities)
    assert np.all(probabilities >= 0)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-6)
    # Different inputs, different answers (the head is not constant).
    assert np.abs(probabilities[0] - probabilities[1]).max() > 1e-4


@pytest.mark.parametrize("variant", MODEL_VARIANTS, ids=lambda v: "-".join(map(str, v)))
def test_trailing_padding_does_not_change_probabilities(built_models, variant):
    model = built_models(*variant)
    cls = variant[0] == "cls"
    ids = token_batch([10, 6], total=10, cls=cls)
    short = as_numpy(model(ids, training=False))
    padded = as_numpy(model(np.pad(ids, ((0, 0), (0, LENGTH - 10))), training=False))
    np.testing.assert_allclose(padded, short, atol=ATOL)
    # The padded row alone, without its padding, gives the same answer too.
    alone = as_numpy(model(ids[1:, :6], training=False))
    np.testing.assert_allclose(short[1], alone[0], atol=ATOL)
    # Dropout (0.2) is off at training=False: the same answer twice.
    np.testing.assert_array_equal(as_numpy(model(ids, training=False)), short)


def test_dropout_is_active_when_training(built_models):
    model = built_models("mean")
    ids = token_batch([12, 7])
    a, b = as_numpy(model(ids, training=True)), as_numpy(model(ids, training=True))
    assert np.abs(a - b).max() > 1e-4


@pytest.mark.parametrize("variant", MODEL_VARIANTS[:6], ids=lambda v: "-".join(map(str, v[:2])))
def test_pooling_and_head_match_numpy(built_models, variant):
    pooling = variant[0]
    model = built_models(*variant)
    ids = token_batch([16, 11, 5], cls=pooling == "cls")
    real = (ids != 0)[..., None]
    sequence = pre_pool_sequence(model, ids)
    if pooling == "mean":
        pooled = (sequence * real).sum(1) / real.sum(1)
    elif pooling == "max":
        pooled = np.where(real, sequence, -np.inf).max(1)
    else:
        pooled = sequence[:, 0]
    expected = numpy_head(model, pooled)
    np.testing.assert_allclose(as_numpy(model(ids, training=False)), expected, atol=ATOL)


# --- _pool on hand-made sequences ---------------------------------------------


def random_sequence(seed=0, shape=(3, 6, 4)):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


# full, trailing padding, padding in the middle
POOL_MASK = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 0, 1, 1, 0, 1]], dtype=bool)


def test_mean_pool_is_the_masked_mean():
    model = make_model("mean")
    sequence = random_sequence()
    sequence[~POOL_MASK] = 1e4  # junk at padding must not count
    pooled = as_numpy(
        model._pool(ops.convert_to_tensor(sequence), ops.convert_to_tensor(POOL_MASK))
    )
    expected = np.stack([sequence[b][POOL_MASK[b]].mean(0) for b in range(3)])
    np.testing.assert_allclose(pooled, expected, atol=1e-5)


@pytest.mark.parametrize("dtype, junk", [("float32", 1e6), ("float16", 6e4)])
def test_max_pool_ignores_padding_even_when_huge(dtype, junk):
    model = make_model("max")
    # Every real value negative: a pool that zeroes padding instead of
    # excluding it would answer 0; one that ignores the mask would answer junk.
    sequence = -np.abs(random_sequence(1)) - 0.5
    sequence[~POOL_MASK] = junk
    sequence = sequence.astype(dtype)
    pooled = as_numpy(
        model._pool(ops.convert_to_tensor(sequence), ops.convert_to_tensor(POOL_MASK))
    )
    expected = np.stack([sequence[b][POOL_MASK[b]].max(0) for b in range(3)]).astype(np.float64)
    np.testing.assert_allclose(pooled, expected, rtol=1e-3)
    assert np.all(pooled < 0)


def test_cls_pool_reads_position_zero_only():
    model = make_model("cls")
    sequence = random_sequence(2)
    mask = ops.convert_to_tensor(POOL_MASK)
    pooled = as_numpy(model._pool(ops.convert_to_tensor(sequence), mask))
    np.testing.assert_allclose(pooled, sequence[:, 0], atol=0)
    changed = sequence.copy()
    changed[:, 1:] = random_sequence(3)[:, 1:] * 10
    np.testing.assert_allclose(
        as_numpy(model._pool(ops.convert_to_tensor(changed), mask)), pooled, atol=0
    )


def test_cls_model_sees_later_tokens_through_attention(built_models):
    # [CLS] pooling reads position 0 only, but position 0 attends the whole
    # sequence, so a later token must still change the answer.
    model = built_models("cls")
    ids = token_batch([8], cls=True)
    changed = ids.copy()
    changed[0, 6] = 3 if ids[0, 6] != 3 else 4
    difference = np.abs(
        as_numpy(model(ids, training=False)) - as_numpy(model(changed, training=False))
    )
    assert difference.max() > 1e-4


@pytest.mark.parametrize("pooling", POOLINGS)
def test_all_padding_row_gives_finite_probabilities(built_models, pooling):
    model = built_models(pooling)
    ids = token_batch([9, 0], cls=pooling == "cls")
    ids[1] = 0
    probabilities, scores = model(ids, training=False, return_attention_scores=True)
    probabilities = as_numpy(probabilities)
    assert np.all(np.isfinite(probabilities))
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-6)
    assert all(np.all(np.isfinite(as_numpy(layer_scores))) for layer_scores in scores)
    # The empty row does not disturb its neighbour.
    np.testing.assert_allclose(
        probabilities[0], as_numpy(model(ids[:1], training=False))[0], atol=ATOL
    )


# --- attention scores ----------------------------------------------------------


def test_return_attention_scores(built_models):
    model = built_models("mean")
    ids = token_batch([16, 10, 3])
    probabilities, scores = model(ids, training=False, return_attention_scores=True)
    np.testing.assert_allclose(
        as_numpy(probabilities), as_numpy(model(ids, training=False)), atol=1e-6
    )
    assert isinstance(scores, (list, tuple)) and len(scores) == LAYERS
    real = ids != 0
    for layer_scores in scores:
        layer_scores = as_numpy(layer_scores)
        assert layer_scores.shape == (3, HEADS, LENGTH, LENGTH)
        for b in range(3):
            queries = layer_scores[b][:, real[b]]  # [heads, real queries, keys]
            np.testing.assert_array_equal(queries[..., ~real[b]], 0.0)
            np.testing.assert_allclose(queries.sum(-1), 1.0, atol=1e-5)
    # Layers differ (each block reports its own weights).
    assert np.abs(as_numpy(scores[0]) - as_numpy(scores[1])).max() > 1e-4


# --- config and saving ---------------------------------------------------------


@pytest.mark.parametrize("variant", [("max", True, "learned"), ("cls", False, "sinusoidal")])
def test_config_round_trip(built_models, variant):
    model = built_models(*variant)
    config = model.get_config()
    assert (config["pooling"], config["normalize_first"], config["positional"]) == variant
    assert (config["vocabulary_size"], config["num_classes"], config["d_model"]) == (
        VOCAB,
        CLASSES,
        D_MODEL,
    )
    clone = TransformerClassifier.from_config(config)
    assert clone.get_config() == config
    ids = token_batch([12, 5], cls=variant[0] == "cls")
    clone(ids)
    assert len(clone.weights) == len(model.weights)
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(
        as_numpy(clone(ids, training=False)), as_numpy(model(ids, training=False)), atol=1e-6
    )


@pytest.mark.parametrize("pooling", ["max", "cls"])
def test_save_and_load_give_identical_predictions(built_models, pooling, tmp_path):
    model = built_models(pooling, True)
    ids = token_batch([16, 7], cls=pooling == "cls")
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, TransformerClassifier)
    assert loaded.get_config() == model.get_config()
    np.testing.assert_allclose(
        as_numpy(loaded(ids, training=False)), as_numpy(model(ids, training=False)), atol=1e-6
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {"pooling": "foo"},
        {"d_model": 16, "num_heads": 3},
        {"num_classes": 1},
        {"num_classes": 0},
        {"num_layers": 0},
    ],
    ids=["pooling", "heads", "one_class", "zero_classes", "no_layers"],
)
def test_invalid_arguments_raise(overrides):
    arguments = dict(vocabulary_size=VOCAB, num_classes=CLASSES, d_model=D_MODEL, num_heads=HEADS)
    arguments.update(overrides)
    with pytest.raises(ValueError):
        TransformerClassifier(**arguments)


# --- training and mixed precision --------------------------------------------


def toy_task(rows=256, seed=0):
    """Random ids 3..VOCAB-1 (never 5) of random lengths; the label is whether 5 occurs."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((rows, LENGTH), "int32")
    labels = rng.integers(0, 2, size=rows)
    for row in range(rows):
        length = rng.integers(4, LENGTH + 1)
        tokens = rng.choice([t for t in range(3, VOCAB) if t != 5], size=length)
        if labels[row]:
            tokens[rng.integers(0, length)] = 5
        ids[row, :length] = tokens
    return ids, labels


def test_fit_learns_a_separable_toy_task():
    keras.utils.set_random_seed(5)
    ids, labels = toy_task()
    model = TransformerClassifier(
        VOCAB,
        2,
        sequence_length=LENGTH,
        num_layers=1,
        d_model=D_MODEL,
        num_heads=HEADS,
        intermediate_dim=FF,
        dropout=0.0,
        pooling="mean",
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    model.build((None, LENGTH))
    build_optimizer(model)
    history = model.fit(ids, labels, batch_size=32, epochs=8, verbose=0).history
    assert history["loss"][-1] < 0.3 * history["loss"][0], history["loss"]
    assert history["accuracy"][-1] >= 0.95, history["accuracy"]
    # It generalizes to fresh examples of the same rule.
    test_ids, test_labels = toy_task(seed=1)
    predictions = np.argmax(as_numpy(model(test_ids, training=False)), -1)
    assert np.mean(predictions == test_labels) >= 0.9


@pytest.mark.parametrize("pooling", POOLINGS)
def test_mixed_float16_gives_float32_probabilities(pooling):
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = make_model(pooling)
        ids = token_batch([16, 8], cls=pooling == "cls")
        ids = np.concatenate([ids, np.zeros((1, LENGTH), "int32")])  # and an all-padding row
        probabilities, scores = model(ids, training=False, return_attention_scores=True)
        # The stack really runs in float16...
        assert keras.backend.standardize_dtype(scores[0].dtype) == "float16"
        assert model.embedding.compute_dtype == "float16"
        # ...but the answer is float32 probabilities.
        assert keras.backend.standardize_dtype(probabilities.dtype) == "float32"
        probabilities = as_numpy(probabilities)
        assert np.all(np.isfinite(probabilities))
        np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    finally:
        keras.mixed_precision.set_global_policy("float32")


# --- the bag of n-grams beside the Transformer ----------------------------------


def ngram_model(randomize, **bag_of_ngrams):
    keras.utils.set_random_seed(5)
    model = make_model("max", bag_of_ngrams={"num_buckets": 101, **bag_of_ngrams})
    model(np.ones((1, LENGTH), "int32"))
    model.ngrams.adapt(token_batch([16, 9, 4, 12, 7], seed=4))
    randomize(model, seed=7)
    return model


def test_bag_of_ngrams_logits_add_to_the_head_logits(randomize):
    model = ngram_model(randomize)
    ids = token_batch([16, 11, 5], seed=1)
    sequence = pre_pool_sequence(model, ids)
    pooled = np.where((ids != 0)[..., None], sequence, -np.inf).max(1)
    logits = (
        pooled @ as_numpy(model.head.kernel)
        + as_numpy(model.head.bias)
        + as_numpy(model.ngrams(ids))
    )
    assert np.abs(as_numpy(model.ngrams(ids))).max() > 0.1  # the branch does contribute
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(
        as_numpy(model(ids, training=False)), expected / expected.sum(-1, keepdims=True), atol=ATOL
    )


def test_bag_of_ngrams_saves_and_loads_with_the_model(randomize, tmp_path):
    model = ngram_model(randomize, l2=1e-4, learning_rate_multiplier=10.0)
    assert model.get_config()["bag_of_ngrams"] == {
        "num_buckets": 101,
        "l2": 1e-4,
        "learning_rate_multiplier": 10.0,
    }
    path = str(tmp_path / "ngrams.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    ids = token_batch([16, 3], seed=2)
    np.testing.assert_allclose(as_numpy(loaded(ids)), as_numpy(model(ids)), atol=1e-6)
    np.testing.assert_array_equal(as_numpy(loaded.ngrams.idf), as_numpy(model.ngrams.idf))
    probabilities, scores = loaded(ids, return_attention_scores=True)
    assert len(scores) == LAYERS and tuple(probabilities.shape) == (2, CLASSES)


def test_bag_of_ngrams_must_be_a_dict():
    with pytest.raises(ValueError, match="bag_of_ngrams"):
        make_model(bag_of_ngrams=True)


def test_a_bag_that_reads_further_sees_the_whole_input_and_the_transformer_its_start(
    randomize, tmp_path
):
    keras.utils.set_random_seed(5)
    model = make_model("max", bag_of_ngrams={"num_buckets": 101}, ngram_length=3 * LENGTH)
    assert model.input_length == 3 * LENGTH
    long_ids = token_batch([40, 3 * LENGTH, 5], total=3 * LENGTH, seed=3)
    model(long_ids)
    model.ngrams.adapt(long_ids)
    randomize(model, seed=7)
    sequence = pre_pool_sequence(model, long_ids[:, :LENGTH])
    pooled = np.where((long_ids[:, :LENGTH] != 0)[..., None], sequence, -np.inf).max(1)
    bag = as_numpy(model.ngrams(long_ids))
    # What lies past the Transformer's reach moves the bag's logits.
    assert np.abs(bag - as_numpy(model.ngrams(long_ids[:, :LENGTH]))).max() > 0.05
    logits = pooled @ as_numpy(model.head.kernel) + as_numpy(model.head.bias) + bag
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(
        as_numpy(model(long_ids, training=False)),
        expected / expected.sum(-1, keepdims=True),
        atol=ATOL,
    )
    _, scores = model(long_ids, return_attention_scores=True)
    # attention over the Transformer's tokens only
    assert tuple(scores[0].shape)[-2:] == (
        LENGTH,
        LENGTH,
    )
    path = str(tmp_path / "reach.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.ngram_length == 3 * LENGTH
    np.testing.assert_allclose(as_numpy(loaded(long_ids)), as_numpy(model(long_ids)), atol=1e-6)


def test_without_a_longer_reach_inputs_past_the_sequence_length_are_refused():
    model = make_model("max", bag_of_ngrams={"num_buckets": 101})
    assert model.input_length == LENGTH
    with pytest.raises(ValueError, match="past `sequence_length`"):
        model(token_batch([LENGTH + 4], total=LENGTH + 4))
    with pytest.raises(ValueError, match="needs `bag_of_ngrams`"):
        make_model("max", ngram_length=64)
    with pytest.raises(ValueError, match="ngram_length"):
        make_model("max", bag_of_ngrams={}, ngram_length=0)
