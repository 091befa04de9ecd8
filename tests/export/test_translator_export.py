"""The translator SavedModel from `export_translator`, loaded the ways its users
load it: in a process that cannot import this project (TF2 and the TF1 session
loader TensorFlow Serving uses), and listed by `saved_model_cli`; its answers
equal the library's own `greedy_decode` / `beam_search` string for string.

A tiny Spanish -> English model (adjective after the noun -> before it) is
trained for a few seconds once per session and exported to the session's temp
folder; `build_translator` is shared with tests/apps/test_translate.py.
"""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from keras_transformer.training.compiling import build_optimizer
from tests.export.fresh_loader import LOADER_HEADER

# --- the shared tiny translator --------------------------------------------------

COLORS = {
    "rojo": "red",
    "verde": "green",
    "azul": "blue",
    "negro": "black",
    "blanco": "white",
    "gris": "grey",
}
NOUNS = {
    "coche": "car",
    "perro": "dog",
    "gato": "cat",
    "libro": "book",
    "barco": "boat",
    "sombrero": "hat",
    "tren": "train",
}
# 42 pairs: "el perro azul" -> "the blue dog".
PAIRS = [
    (f"el {noun} {color}", f"the {COLORS[color]} {NOUNS[noun]}")
    for noun in NOUNS
    for color in COLORS
]
SEQUENCE_LENGTH = 16
TRAIN_STEPS = 300


@dataclasses.dataclass(frozen=True)
class TranslatorFixture:
    folder: str
    source_vocabulary: str  # FOLDER/source/vocabulary.txt
    target_vocabulary: str  # FOLDER/target/vocabulary.txt: the same file name on purpose
    model_path: str  # FOLDER/model.keras
    export_dir: str  # the base folder
    version_dir: str  # export_dir/1
    train_seconds: float
    export_seconds: float


def build_translator(tmp_path_factory):
    """Trains, saves and exports the tiny translator once per session.

    Whichever test module asks first builds it under the session's base temp
    folder; later calls (from either module) find it there.
    """
    folder = tmp_path_factory.getbasetemp() / "tiny_translator"
    done = folder / "done.json"
    if not done.exists():
        shutil.rmtree(folder, ignore_errors=True)
        _train_and_export(folder)
    return TranslatorFixture(**json.loads(done.read_text()))


def _train_and_export(folder):
    import keras
    import tensorflow as tf

    from keras_transformer.export import export_translator
    from keras_transformer.models import Seq2SeqTransformer
    from keras_transformer.text import WordPieceTokenizer, build_vocabulary, save_vocabulary

    sources, targets = [s for s, _ in PAIRS], [t for _, t in PAIRS]
    # Repeated so every word clears the learner's count threshold and is one token.
    source_vocabulary = save_vocabulary(
        build_vocabulary(sources * 5, 100), folder / "source" / "vocabulary.txt"
    )
    target_vocabulary = save_vocabulary(
        build_vocabulary(targets * 5, 100), folder / "target" / "vocabulary.txt"
    )
    source_tokenizer = WordPieceTokenizer(source_vocabulary)
    target_tokenizer = WordPieceTokenizer(target_vocabulary)
    source_ids = source_tokenizer.encode(tf.constant(sources), SEQUENCE_LENGTH).numpy()
    # START ... END in SEQUENCE_LENGTH + 1 tokens, then shifted into input and label.
    target_ids = target_tokenizer.encode(
        tf.constant(targets), SEQUENCE_LENGTH + 1, add_start_end=True
    ).numpy()
    target_in, target_out = target_ids[:, :-1], target_ids[:, 1:]

    keras.utils.set_random_seed(7)
    model = Seq2SeqTransformer(
        source_tokenizer.vocabulary_size,
        target_tokenizer.vocabulary_size,
        sequence_length=SEQUENCE_LENGTH,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_model=32,
        num_heads=2,
        intermediate_dim=64,
        dropout=0.0,
    )
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0),
    )
    model.build()
    build_optimizer(model)
    started = time.perf_counter()

    # One epoch of TRAIN_STEPS full batches: Keras' per-epoch overhead would
    # cost more than the steps themselves.
    def tiled(array):
        return np.tile(array, (TRAIN_STEPS, 1))

    model.fit(
        {"source_ids": tiled(source_ids), "target_ids": tiled(target_in)},
        tiled(target_out),
        batch_size=len(PAIRS),
        epochs=1,
        shuffle=False,
        verbose=0,
    )
    train_seconds = time.perf_counter() - started
    model_path = str(folder / "model.keras")
    model.save(model_path)

    started = time.perf_counter()
    version_dir = export_translator(
        model,
        source_tokenizer,
        target_tokenizer,
        str(folder / "export"),
        source_language="es",
        target_language="en",
    )
    export_seconds = time.perf_counter() - started
    fixture = TranslatorFixture(
        folder=str(folder),
        source_vocabulary=str(source_vocabulary),
        target_vocabulary=str(target_vocabulary),
        model_path=model_path,
        export_dir=str(folder / "export"),
        version_dir=version_dir,
        train_seconds=train_seconds,
        export_seconds=export_seconds,
    )
    (folder / "done.json").write_text(json.dumps(dataclasses.asdict(fixture)))


@pytest.fixture(scope="session")
def tiny_translator(tmp_path_factory):
    return build_translator(tmp_path_factory)


@dataclasses.dataclass
class InProcess:
    model: object
    source_tokenizer: object
    target_tokenizer: object


@pytest.fixture(scope="module")
def in_process(tiny_translator):
    """The exported model and tokenizers, loaded back into this process."""
    import keras

    from keras_transformer.text import WordPieceTokenizer

    return InProcess(
        model=keras.models.load_model(tiny_translator.model_path),
        source_tokenizer=WordPieceTokenizer(tiny_translator.source_vocabulary),
        target_tokenizer=WordPieceTokenizer(tiny_translator.target_vocabulary),
    )


# --- loading it elsewhere ------------------------------------------------------------

EDGE_TEXTS = [
    b"",
    b"   ",
    b"\xff\xfe",
    b"\t\n",
    ("el perro azul " * 7500).encode(),
]  # the last is ~100 KB
KNOWN_TEXTS = [source.encode() for source, _ in PAIRS[::5]]
TEXTS = EDGE_TEXTS + KNOWN_TEXTS
SIGNATURES = ("serving_default", "greedy")

# Runs with only tensorflow and tensorflow_text: `saved_model_cli show --all`,
# then both translation signatures through `tf.saved_model.load` (TF2) and
# through the TF1 session loader, feeding and fetching the signatures' tensors
# by name.
LOADER = LOADER_HEADER + textwrap.dedent(
    """
    import tensorflow_text  # noqa: F401  registers the tokenizer ops
    result = {}
    model = tf.saved_model.load(path)
    for name in ("serving_default", "greedy"):
        translation = model.signatures[name](text=tf.constant(texts, tf.string))["translation"]
        result[name] = {
            "dtype": translation.dtype.name,
            "shape": translation.shape.as_list(),
            "translations": [text.hex() for text in translation.numpy()],
            "empty_batch_shape": model.signatures[name](text=tf.constant([], tf.string))["translation"].shape.as_list(),
        }
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        for name in ("serving_default", "greedy"):
            signature = meta_graph.signature_def[name]
            translation = session.run(
                signature.outputs["translation"].name, {signature.inputs["text"].name: texts}
            )
            result["tf1_" + name] = [text.hex() for text in translation]
    result["cli"] = cli
    print("RESULT " + json.dumps(result))
    """
)


def fresh_environment():
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return env


@pytest.fixture(scope="module", autouse=True)
def outside_process(tiny_translator, tmp_path_factory):
    """Starts the loader script (saved_model_cli's listing included) in a fresh
    process from an empty folder, as soon as the export exists: it runs while
    this process does the in-process tests."""
    cwd = tmp_path_factory.mktemp("elsewhere")
    texts_path = cwd / "texts.json"
    texts_path.write_text(json.dumps([text.hex() for text in TEXTS]))
    process = subprocess.Popen(
        [sys.executable, "-c", LOADER, tiny_translator.version_dir, str(texts_path)],
        cwd=cwd,
        env=fresh_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    yield process
    if process.poll() is None:
        process.kill()
        process.communicate()


@pytest.fixture(scope="module")
def loaded_outside(outside_process):
    stdout, stderr = outside_process.communicate(timeout=300)
    stderr = stderr.decode(errors="replace")
    assert outside_process.returncode == 0, stderr[-3000:]
    [line] = [
        line for line in stdout.decode(errors="replace").splitlines() if line.startswith("RESULT ")
    ]
    result = json.loads(line[len("RESULT ") :])
    result["stderr"] = stderr
    return result


def strings(hex_list):
    return [bytes.fromhex(text) for text in hex_list]


@pytest.fixture(scope="module")
def expected(in_process):
    """The library's own decoders, eagerly in this process, on the same texts."""
    import tensorflow as tf

    from keras_transformer.decoding import beam_search, greedy_decode

    model, source, target = (
        in_process.model,
        in_process.source_tokenizer,
        in_process.target_tokenizer,
    )
    source_ids = source.encode(tf.constant(TEXTS), model.sequence_length)
    arguments = (
        model,
        source_ids,
        SEQUENCE_LENGTH,
        target.token_id("[START]"),
        target.token_id("[END]"),
    )
    greedy_ids = greedy_decode(*arguments)
    beam_ids, _ = beam_search(*arguments, beam_width=4, length_penalty=0.6)
    return {
        "greedy": list(target.detokenize(greedy_ids).numpy()),
        "serving_default": list(target.detokenize(beam_ids).numpy()),
    }


# --- in this process (while the outside process runs) -------------------------


def test_both_vocabularies_travel_as_distinct_assets(tiny_translator):
    assets = os.path.join(tiny_translator.version_dir, "assets")
    stored = set()
    for name in os.listdir(assets):
        with open(os.path.join(assets, name), "rb") as asset:
            stored.add(asset.read())
    wanted = set()
    for path in (tiny_translator.source_vocabulary, tiny_translator.target_vocabulary):
        with open(path, "rb") as vocabulary:
            wanted.add(vocabulary.read())
    assert len(wanted) == 2  # both named vocabulary.txt, with different tokens
    assert stored == wanted


def test_decoding_settings_travel_in_assets_extra(tiny_translator):
    with open(
        os.path.join(tiny_translator.version_dir, "assets.extra", "translator.json"),
        encoding="utf-8",
    ) as file:
        config = json.load(file)
    assert config["beam_width"] == 4
    assert config["length_penalty"] == pytest.approx(0.6)
    # The default 64 is capped at the model's sequence length.
    assert config["max_output_length"] == SEQUENCE_LENGTH
    assert (config["source_language"], config["target_language"]) == ("es", "en")
    controls = config["request_controls"]
    assert controls["signature"] == "translate"
    assert {name: spec["default"] for name, spec in controls["inputs"].items()} == DEFAULT_CONTROLS
    assert (
        controls["inputs"]["beam_width"]["minimum"],
        controls["inputs"]["beam_width"]["maximum"],
    ) == (1, 4)
    assert controls["inputs"]["num_translations"]["maximum"] == "beam_width"


def test_attention_signature_gives_the_greedy_tokens_and_cross_attention(tiny_translator):
    import tensorflow as tf

    exported = tf.saved_model.load(tiny_translator.version_dir)
    text = PAIRS[0][0]
    outputs = exported.signatures["attention"](text=tf.constant([text, ""]))
    source_tokens = outputs["source_tokens"].numpy()
    target_tokens = outputs["target_tokens"].numpy()
    cross = outputs["cross_attention"].numpy()
    assert source_tokens.shape == (2, SEQUENCE_LENGTH) and target_tokens.shape == (
        2,
        SEQUENCE_LENGTH,
    )
    assert cross.shape == (2, 1, 2, SEQUENCE_LENGTH, SEQUENCE_LENGTH)
    pieces = [token.decode() for token in source_tokens[0] if token]
    assert " ".join(pieces) == text and not any(source_tokens[0][len(pieces) :])
    assert not any(source_tokens[1])  # "" at padding
    # The target tokens are the greedy translation's, [END] included.
    greedy = (
        exported.signatures["greedy"](text=tf.constant([text]))["translation"].numpy()[0].decode()
    )
    target = [token.decode() for token in target_tokens[0] if token]
    assert target[-1] == "[END]" and " ".join(target[:-1]) == greedy
    # Each generated token's cross-attention is a distribution over the real source tokens.
    rows, columns = len(target), len(pieces)
    np.testing.assert_allclose(cross[0, :, :, :rows, :columns].sum(axis=-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(cross[0, :, :, :rows, columns:], 0.0, atol=1e-6)
    assert np.all(np.isfinite(cross))
    # An empty batch is an empty answer (the loader script checks serving_default).
    for name in ("greedy", "attention"):
        for output in exported.signatures[name](text=tf.constant([], tf.string)).values():
            assert output.shape[0] == 0


def test_greedy_decode_of_an_empty_batch(in_process):
    from keras_transformer.decoding import greedy_decode

    target = in_process.target_tokenizer
    ids = greedy_decode(
        in_process.model,
        np.zeros([0, SEQUENCE_LENGTH], "int32"),
        SEQUENCE_LENGTH,
        target.token_id("[START]"),
        target.token_id("[END]"),
    )
    assert tuple(ids.shape) == (0, SEQUENCE_LENGTH)


def test_a_second_export_is_version_2_and_leaves_1_alone(tiny_translator, in_process, tmp_path):
    from keras_transformer.export import export_translator
    from tests.classifier_fixtures import snapshot

    base = str(tmp_path / "export")
    shutil.copytree(tiny_translator.export_dir, base)
    before = snapshot(base)
    # Other decoding settings: a shorter output and one beam.
    version_dir = export_translator(
        in_process.model,
        in_process.source_tokenizer,
        in_process.target_tokenizer,
        base,
        max_output_length=8,
        beam_width=1,
    )
    assert version_dir == os.path.join(base, "2")
    assert sorted(os.listdir(base)) == ["1", "2"]
    assert {
        path: data for path, data in snapshot(base).items() if path.startswith("1" + os.sep)
    } == before
    with open(
        os.path.join(version_dir, "assets.extra", "translator.json"), encoding="utf-8"
    ) as file:
        config = json.load(file)
    assert (config["max_output_length"], config["beam_width"]) == (8, 1)
    assert config["source_language"] is None


def test_mismatched_tokenizers_are_refused(in_process, tmp_path):
    from keras_transformer.export import export_translator
    from keras_transformer.text import RESERVED_TOKENS, WordPieceTokenizer, save_vocabulary

    small = WordPieceTokenizer(
        save_vocabulary([*RESERVED_TOKENS, "a", "b"], tmp_path / "small.txt")
    )
    base = tmp_path / "export"
    with pytest.raises(ValueError, match="target tokenizer has 9 tokens"):
        export_translator(in_process.model, in_process.source_tokenizer, small, str(base))
    with pytest.raises(ValueError, match="source tokenizer has 9 tokens"):
        export_translator(in_process.model, small, in_process.target_tokenizer, str(base))
    assert not base.exists()


# --- the `translate` signature: decoding chosen per request -------------------------

# What a request that names no control gets: the export's own beam search.
DEFAULT_CONTROLS = {
    "beam_width": 4,
    "num_translations": 1,
    "sampling": False,
    "temperature": 1.0,
    "top_k": 0,
    "top_p": 1.0,
    "seed": 0,
}


@pytest.fixture(scope="module")
def exported(tiny_translator):
    """The export, loaded once for this module's `translate` tests."""
    import tensorflow as tf

    return tf.saved_model.load(tiny_translator.version_dir)


def translate(exported, texts, **controls):
    """The `translate` signature's (translations as bytes `[B, K]`, scores `[B, K]`)."""
    import tensorflow as tf

    signature = exported.signatures["translate"]
    specs = signature.structured_input_signature[1]
    arguments = {
        name: tf.constant(value, specs[name].dtype)
        for name, value in {**DEFAULT_CONTROLS, **controls}.items()
    }
    outputs = signature(text=tf.constant(texts, tf.string), **arguments)
    return outputs["translations"].numpy(), outputs["scores"].numpy()


def library_arguments(in_process, texts):
    import tensorflow as tf

    model, target = in_process.model, in_process.target_tokenizer
    source_ids = in_process.source_tokenizer.encode(tf.constant(texts), model.sequence_length)
    return (
        model,
        source_ids,
        SEQUENCE_LENGTH,
        target.token_id("[START]"),
        target.token_id("[END]"),
    )


def test_translate_by_default_is_serving_default_and_with_one_beam_greedy(exported, expected):
    translations, scores = translate(exported, TEXTS)
    assert translations.shape == scores.shape == (len(TEXTS), 1)
    assert list(translations[:, 0]) == expected["serving_default"]
    translations, _ = translate(exported, TEXTS, beam_width=1)
    assert list(translations[:, 0]) == expected["greedy"]
    # Beam width 1 with top-k 1 sampling (any seed, any temperature) is greedy too.
    translations, _ = translate(exported, TEXTS, sampling=True, top_k=1, seed=5, temperature=3.0)
    assert list(translations[:, 0]) == expected["greedy"]


@pytest.mark.parametrize("beam_width, num_translations", [(4, 4), (2, 2), (3, 2)])
def test_translate_returns_the_beam_searchs_hypotheses_best_first(
    exported, in_process, beam_width, num_translations
):
    from keras_transformer.decoding import beam_search

    texts = [text.decode() for text in KNOWN_TEXTS[:4]]
    translations, scores = translate(
        exported, texts, beam_width=beam_width, num_translations=num_translations
    )
    ids, library_scores = beam_search(
        *library_arguments(in_process, texts),
        beam_width=beam_width,
        length_penalty=0.6,
        return_all_beams=True,
    )
    target = in_process.target_tokenizer
    wanted = target.detokenize(tf_reshape(ids[:, :num_translations], SEQUENCE_LENGTH)).numpy()
    assert translations.shape == (len(texts), num_translations)
    assert list(translations.reshape(-1)) == list(wanted)
    # A confident hypothesis scores near 0, where float32 sums of log-probabilities
    # differ by ulps of the terms, not of the total: hence the absolute tolerance.
    np.testing.assert_allclose(scores, library_scores[:, :num_translations], rtol=1e-5, atol=1e-6)
    assert np.all(np.diff(scores, axis=1) <= 0)


def tf_reshape(ids, length):
    import tensorflow as tf

    return tf.reshape(ids, [-1, length])


def test_sampling_is_sample_decode_and_the_seed_chooses_the_drawing(exported, in_process):
    from keras_transformer.decoding import sample_decode

    texts = [text.decode() for text in KNOWN_TEXTS[:4]]
    settings = {"temperature": 3.0, "top_k": 6, "top_p": 0.95}
    first, first_scores = translate(exported, texts, sampling=True, seed=11, **settings)
    again, again_scores = translate(exported, texts, sampling=True, seed=11, **settings)
    assert first.tolist() == again.tolist() and first_scores.tolist() == again_scores.tolist()
    ids, library_scores = sample_decode(*library_arguments(in_process, texts), seed=11, **settings)
    assert list(first[:, 0]) == list(in_process.target_tokenizer.detokenize(ids).numpy())
    np.testing.assert_allclose(first_scores[:, 0], library_scores, rtol=1e-5, atol=1e-6)
    # At temperature 3 over the top 6 tokens, 4 texts drawn alike by two seeds is out of reach.
    other, _ = translate(exported, texts, sampling=True, seed=12, **settings)
    assert other.tolist() != first.tolist()
    # Several drawings per text, best first.
    drawings, scores = translate(
        exported, texts, sampling=True, seed=11, num_translations=3, **settings
    )
    assert drawings.shape == (len(texts), 3) and np.all(np.diff(scores, axis=1) <= 0)
    assert np.all(scores <= 0)


@pytest.mark.parametrize(
    "controls, fragment",
    [
        ({"beam_width": 5}, "`beam_width` must be between 1 and 4"),
        ({"beam_width": 0}, "`beam_width` must be between 1 and 4"),
        ({"beam_width": 2, "num_translations": 3}, "`num_translations` must be between 1"),
        ({"sampling": True, "top_p": 0.0}, "`top_p` must be in (0, 1]"),
    ],
)
def test_translate_refuses_controls_out_of_range(exported, controls, fragment):
    import tensorflow as tf

    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(fragment)):
        translate(exported, ["el perro azul"], **controls)


# --- the outside process's answers ----------------------------------------------


@pytest.mark.parametrize("signature", SIGNATURES)
def test_export_translates_any_strings_without_the_project(loaded_outside, signature):
    outputs = loaded_outside[signature]
    assert outputs["dtype"] == "string"
    assert outputs["shape"] == [len(TEXTS)]
    assert all(isinstance(text, bytes) for text in strings(outputs["translations"]))
    assert outputs["empty_batch_shape"] == [0]


@pytest.mark.parametrize("signature", SIGNATURES)
def test_export_answers_as_the_library_decoders(loaded_outside, expected, signature):
    assert strings(loaded_outside[signature]["translations"]) == expected[signature]


@pytest.mark.parametrize("signature", SIGNATURES)
def test_tf1_session_loader_answers_as_the_tf2_loader(loaded_outside, signature):
    assert loaded_outside["tf1_" + signature] == loaded_outside[signature]["translations"]


def test_the_tiny_model_learned_its_training_pairs(loaded_outside):
    known = strings(loaded_outside["serving_default"]["translations"])[len(EDGE_TEXTS) :]
    wanted = [target.encode() for _, target in PAIRS[::5]]
    correct = sum(got == want for got, want in zip(known, wanted))
    assert correct >= len(wanted) - 1, list(zip(known, wanted))


def test_saved_model_cli_lists_the_three_string_signatures(loaded_outside):
    status, stdout = loaded_outside["cli"]["status"], loaded_outside["cli"]["stdout"]
    assert status == 0, loaded_outside["stderr"][-3000:]
    sections = {}
    for block in stdout.split("signature_def['")[1:]:
        name, _, body = block.partition("']")
        sections[name] = body
    assert {"serving_default", "greedy", "attention"} <= set(sections)
    for name in ("serving_default", "greedy", "attention"):
        inputs, _, outputs = sections[name].partition("contains the following output(s)")
        assert (
            "inputs['text']" in inputs and "dtype: DT_STRING" in inputs and "shape: (-1)" in inputs
        )
    for name in ("serving_default", "greedy"):
        outputs = sections[name].partition("contains the following output(s)")[2]
        assert (
            "outputs['translation']" in outputs
            and "DT_STRING" in outputs
            and "shape: (-1)" in outputs
        )
    attention = sections["attention"].partition("contains the following output(s)")[2]
    for output in ("source_tokens", "target_tokens", "cross_attention"):
        assert f"outputs['{output}']" in attention
    assert "shape: (-1, 1, 2, 16, 16)" in attention  # [batch, decoder layers, heads, T, S]
