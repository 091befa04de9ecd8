"""`PretrainedClassifier`: a checkpoint's encoder with a new head, fine-tuned
whole or through low-rank adapters, saved and reloaded."""

import keras
import numpy as np
import pytest

from keras_transformer.models import FineTuningAdamW, PretrainedClassifier, PretrainedEncoder
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


def test_an_encoder_reading_less_than_the_bag_sees_a_cut_text_end_in_sep(tmp_path):
    write_checkpoint(tmp_path)
    # [SEP] is id 3: the tokens of a vocabulary laid out as BERT's.
    (tmp_path / "vocab.txt").write_text(
        "".join(f"{t}\n" for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]"])
    )
    with_bag = PretrainedClassifier.from_pretrained(
        tmp_path,
        num_classes=2,
        sequence_length=6,
        bag_of_ngrams={"num_buckets": 11, "use_bias": True},
        ngram_length=12,
    )
    assert (with_bag.separator_id, with_bag.input_length) == (3, 12)
    token_ids = np.array([[2, 7, 8, 9, 10, 11, 12, 13, 3, 0, 0, 0], [2, 7, 8, 3, 0, 0] + [0] * 6])
    bag_bias = np.array([2.0, 0.25], "float32")  # the bag's logits: no n-gram has a weight
    with_bag(token_ids)  # builds the head and the bag
    with_bag.ngrams.set_linear_weights(np.zeros((with_bag.ngrams.num_features, 2)), bag_bias)
    # The same encoder and head on each row cut independently, `[CLS] ... [SEP]` in 6 tokens.
    alone = PretrainedClassifier(with_bag.encoder, num_classes=2, sequence_length=6)
    alone(token_ids[:, :6])
    alone.head.set_weights(with_bag.head.get_weights())
    cut = np.array([[2, 7, 8, 9, 10, 3], [2, 7, 8, 3, 0, 0]], "int32")
    logits = np.log(as_numpy(alone(cut)))
    expected = np.exp(logits + bag_bias)
    np.testing.assert_allclose(
        as_numpy(with_bag(token_ids)), expected / expected.sum(-1, keepdims=True), atol=1e-5
    )


def test_adapters_are_saved_only_from_a_classifier_with_adapters(tmp_path):
    write_checkpoint(tmp_path)
    classifier = PretrainedClassifier.from_pretrained(tmp_path, num_classes=2)
    classifier(TOKEN_IDS)
    with pytest.raises(ValueError, match="this classifier has none"):
        classifier.save_adapters(tmp_path / "adapters.npz")
    np.savez(tmp_path / "other.npz", weights=np.zeros(3))
    with pytest.raises(ValueError, match="is not a file of `save_adapters`"):
        PretrainedClassifier.from_adapters(tmp_path, tmp_path / "other.npz")


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


# Fine-tuning's optimizer: layer-wise learning-rate decay, no decay on norms and biases.

BETA_1, BETA_2, EPSILON = 0.9, 0.999, 1e-7


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("checkpoint")
    write_checkpoint(folder)
    return folder


def numpy_adamw(value, gradients, learning_rate, weight_decay):
    """AdamW (Loshchilov and Hutter, 2019, algorithm 2) in float64, from its formulas: each
    step decays the weights by `learning_rate * weight_decay`, then takes Adam's bias-corrected
    step, epsilon added to sqrt(v) before the correction ("epsilon hat", Kingma and Ba 2015,
    end of section 2, as Keras' AdamW documents)."""
    value = value.astype("float64")
    m = np.zeros_like(value)
    v = np.zeros_like(value)
    for step, gradient in enumerate(gradients, start=1):
        m = BETA_1 * m + (1 - BETA_1) * gradient
        v = BETA_2 * v + (1 - BETA_2) * gradient**2
        corrected = learning_rate * np.sqrt(1 - BETA_2**step) / (1 - BETA_1**step)
        value = value - learning_rate * weight_decay * value
        value = value - corrected * m / (np.sqrt(v) + EPSILON)
    return value


def expected_factor(path, num_layers, layer_decay):
    """The learning-rate factor layer-wise decay gives the variable at `path`: the head and
    pooler 1, block i layer_decay ** (num_layers - i), the embeddings ** (num_layers + 1)."""
    parts = path.split("/")
    for index in range(num_layers):
        if f"encoder_block_{index}" in parts:
            return layer_decay ** (num_layers - index)
    if {"embedding", "token_type_embedding", "embedding_norm"} & set(parts):
        return layer_decay ** (num_layers + 1)
    assert "head" in parts or "pooler" in parts, path
    return 1.0


def fine_tuning_optimizer(classifier, layer_decay, learning_rate=0.05, weight_decay=0.3):
    return FineTuningAdamW(
        learning_rate=learning_rate,
        weight_decay=weight_decay,
        beta_1=BETA_1,
        beta_2=BETA_2,
        epsilon=EPSILON,
        learning_rate_factors=classifier.encoder.layer_decay_factors(layer_decay),
    )


def apply_gradients(optimizer, steps, variables):
    """`optimizer`'s steps on each list of gradients in `steps`, as `fit` takes them: on JAX,
    stateless under `jax.jit` (the one way a `LossScaleOptimizer` steps there)."""
    steps = [[keras.ops.convert_to_tensor(gradient) for gradient in step] for step in steps]
    if keras.backend.backend() != "jax":
        for gradients in steps:
            optimizer.apply(gradients, variables)
        return
    import jax

    stateless_apply = jax.jit(optimizer.stateless_apply)  # compiled once for every step
    values = [variable.value for variable in variables]
    optimizer_values = [variable.value for variable in optimizer.variables]
    for gradients in steps:
        values, optimizer_values = stateless_apply(optimizer_values, gradients, values)
    for variable, value in zip([*variables, *optimizer.variables], [*values, *optimizer_values]):
        variable.assign(value)


def known_gradients(variables, steps, seed=5):
    rng = np.random.default_rng(seed)
    return [
        [
            rng.normal(scale=0.1, size=tuple(variable.shape)).astype("float32")
            for variable in variables
        ]
        for _ in range(steps)
    ]


@pytest.mark.parametrize(
    "lora_rank, loss_scaled",
    [(None, False), (2, False), (None, True)],
    ids=["whole", "lora", "loss_scaled"],
)
def test_each_variable_steps_as_adamw_at_its_blocks_learning_rate(
    checkpoint, lora_rank, loss_scaled
):
    layer_decay, learning_rate, weight_decay = 0.5, 0.05, 0.3
    classifier = PretrainedClassifier.from_pretrained(
        checkpoint, num_classes=2, pooling="cls", lora_rank=lora_rank
    )
    classifier.build((None, 8))
    variables = classifier.trainable_variables
    before = [as_numpy(variable) for variable in variables]
    optimizer = fine_tuning_optimizer(classifier, layer_decay, learning_rate, weight_decay)
    if loss_scaled:  # as `compile` wraps it under mixed_float16
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(variables)
    steps = known_gradients(variables, steps=2)
    scale = float(as_numpy(optimizer.dynamic_scale)) if loss_scaled else 1.0
    apply_gradients(optimizer, [[g * scale for g in gradients] for gradients in steps], variables)

    num_layers = classifier.encoder.num_layers
    seen = set()
    for index, variable in enumerate(variables):
        factor = expected_factor(variable.path, num_layers, layer_decay)
        decays = variable.name not in ("gamma", "beta", "bias")
        expected = numpy_adamw(
            before[index],
            [gradients[index] for gradients in steps],
            learning_rate * factor,
            weight_decay if decays else 0.0,
        )
        np.testing.assert_allclose(
            as_numpy(variable), expected, rtol=1e-5, atol=1e-6, err_msg=variable.path
        )
        seen.add((factor, decays, variable.name))
    factors = {factor for factor, _, _ in seen}
    if lora_rank is None:  # the head, both blocks and the embeddings: four rates
        assert factors == {1.0, 0.5, 0.25, 0.125}, seen
        assert {"gamma", "beta", "bias", "embeddings", "kernel"} <= {name for *_, name in seen}
    else:  # the adapters get their block's rate and decay
        assert factors == {1.0, 0.5, 0.25}, seen
        assert {(0.25, True, "lora_kernel_a"), (0.5, True, "lora_kernel_b")} <= seen


def test_the_fine_tuning_optimizer_survives_save_and_load(checkpoint, tmp_path):
    classifier = PretrainedClassifier.from_pretrained(checkpoint, num_classes=2)
    classifier.build((None, 8))
    classifier.compile(
        optimizer=fine_tuning_optimizer(classifier, layer_decay=0.5),
        loss="sparse_categorical_crossentropy",
    )
    variables = classifier.trainable_variables
    classifier.optimizer.build(variables)
    first, second = known_gradients(variables, steps=2)
    apply_gradients(classifier.optimizer, [first], variables)
    path = str(tmp_path / "classifier.keras")
    classifier.save(path)
    reloaded = keras.models.load_model(path)

    config = reloaded.optimizer.get_config()
    assert type(reloaded.optimizer).__name__ == "FineTuningAdamW"
    assert config["learning_rate_factors"] == classifier.encoder.layer_decay_factors(0.5)
    assert config["no_decay_names"] == ["gamma", "beta", "bias"]
    # The next step, from the saved moments, moves both alike.
    for model in (classifier, reloaded):
        apply_gradients(model.optimizer, [second], model.trainable_variables)
    for variable, loaded in zip(variables, reloaded.trainable_variables):
        np.testing.assert_allclose(as_numpy(loaded), as_numpy(variable), atol=1e-6)


def test_layer_decay_outside_0_to_1_is_refused():
    encoder = PretrainedEncoder(
        vocabulary_size=20,
        sequence_length=8,
        num_layers=1,
        d_model=8,
        num_heads=2,
        intermediate_dim=16,
    )
    for layer_decay in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match=r"`layer_decay` must be in \(0, 1\], got"):
            encoder.layer_decay_factors(layer_decay)
    assert encoder.layer_decay_factors(1.0) == {
        "encoder_block_0": 1.0,
        "embedding": 1.0,
        "token_type_embedding": 1.0,
        "embedding_norm": 1.0,
    }
