"""`keras-transformer translate`: texts from arguments or stdin, plain or JSON output,
beam or greedy, base or version folders, cross-attention plots, and its usage
errors. The tiny translator is the one tests/export/test_translator_export.py
trains and exports (once per session)."""

import io
import json
import sys

import pytest

from keras_transformer.cli import translate
from tests.classifier_fixtures import expect_usage_error, is_png
from tests.export.test_translator_export import PAIRS, build_translator

TEXTS = [source for source, _ in PAIRS[:3]]
WANTED = [target for _, target in PAIRS[:3]]


@pytest.fixture(scope="session")
def translator(tmp_path_factory):
    return build_translator(tmp_path_factory)


@pytest.fixture(scope="module")
def loaded(translator, saved_model_cache):
    """The translator's export, loaded once for the module (tests/apps/conftest.py)."""
    return saved_model_cache


def usage_error(argv, capsys):
    return expect_usage_error(translate.main, argv, capsys)


def test_prints_one_translation_per_text(translator, loaded, capsys):
    assert translate.main([translator.export_dir, *TEXTS]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == WANTED
    # The model line goes to stderr, so stdout is only translations.
    assert f"Model: {translator.version_dir}" in captured.err


def test_json_lines_have_the_text_and_translation(translator, loaded, capsys):
    assert translate.main(["--json", translator.export_dir, *TEXTS]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert answers == [{"text": text, "translation": wanted} for text, wanted in zip(TEXTS, WANTED)]


def test_greedy_uses_the_greedy_signature(translator, loaded, capsys):
    import tensorflow as tf

    texts = [*TEXTS, "", "   ", "perro perro perro azul"]
    # Texts after options, and a batch smaller than the texts.
    assert (
        translate.main([translator.version_dir, "--greedy", "--json", "--batch-size", "2", *texts])
        == 0
    )
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    model = tf.saved_model.load(translator.version_dir)
    greedy = model.signatures["greedy"](text=tf.constant(texts))["translation"].numpy()
    assert [answer["translation"] for answer in answers] == [text.decode() for text in greedy]
    assert [answer["text"] for answer in answers] == texts


def test_reads_texts_from_stdin(translator, loaded, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(text + "\n" for text in TEXTS)))
    assert translate.main([translator.export_dir, "--json"]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [answer["text"] for answer in answers] == TEXTS  # newlines stripped
    assert [answer["translation"] for answer in answers] == WANTED


def test_plot_attention_writes_a_png(translator, loaded, tmp_path, capsys):
    out = tmp_path / "plots" / "cross.png"  # the folder is made for it
    assert (
        translate.main([translator.export_dir, "--plot-attention", TEXTS[0], "--out", str(out)])
        == 0
    )
    assert is_png(out)
    assert str(out) in capsys.readouterr().out


def test_plot_attention_draws_target_rows_over_source_columns(
    translator, loaded, tmp_path, monkeypatch
):
    from keras_transformer import plots

    drawn = {}

    def record(weights, query_tokens, key_tokens, path, title=None, **kwargs):
        drawn.update(weights=weights, query_tokens=query_tokens, key_tokens=key_tokens, title=title)
        return path

    monkeypatch.setattr(plots, "plot_attention", record)
    assert (
        translate.main(
            [translator.export_dir, "--plot-attention", TEXTS[0], "--out", str(tmp_path / "a.png")]
        )
        == 0
    )
    assert drawn["key_tokens"] == TEXTS[0].split()
    assert drawn["query_tokens"] == [*WANTED[0].split(), "[END]"]
    # [heads, T, S]
    assert drawn["weights"].shape == (
        2,
        len(drawn["query_tokens"]),
        len(drawn["key_tokens"]),
    )
    assert "cross-attention" in drawn["title"]


def test_plot_attention_of_a_text_without_tokens_is_a_usage_error(
    translator, loaded, tmp_path, capsys
):
    out = tmp_path / "a.png"
    message = usage_error(
        [translator.export_dir, "--plot-attention", "   ", "--out", str(out)], capsys
    )
    assert "no tokens" in message
    assert not out.exists()


def test_a_layer_out_of_range_is_a_usage_error(translator, loaded, tmp_path, capsys):
    out = tmp_path / "a.png"
    message = usage_error(
        [translator.export_dir, "--plot-attention", TEXTS[0], "--out", str(out), "--layer", "3"],
        capsys,
    )
    assert "--layer 3" in message and "1 decoder block" in message
    assert not out.exists()


def test_a_missing_model_is_a_usage_error(tmp_path, capsys):
    missing = str(tmp_path / "no_model")
    message = usage_error([missing, "some text"], capsys)
    assert missing in message


def test_a_classifier_export_is_a_usage_error(translator, loaded, tmp_path, capsys):
    """A SavedModel without translator signatures: one clear line, no traceback."""
    import tensorflow as tf

    class Echo(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def serve(self, text):
            return {"label": text}

    module = Echo()
    folder = str(tmp_path / "other" / "1")
    tf.saved_model.save(module, folder, signatures={"serving_default": module.serve})
    message = usage_error([folder, "--greedy", "hola"], capsys)
    assert "greedy" in message
    message = usage_error([folder, "hola"], capsys)
    assert "translation" in message


def test_a_zero_batch_size_is_a_usage_error(translator, capsys):
    message = usage_error(["--batch-size", "0", translator.export_dir, TEXTS[0]], capsys)
    assert "--batch-size" in message


def test_controls_at_their_defaults_answer_as_serving_default(translator, loaded, capsys):
    assert translate.main([translator.export_dir, "--beam-width", "4", *TEXTS]) == 0
    assert capsys.readouterr().out.splitlines() == WANTED


def test_num_translations_prints_each_with_its_score_best_first(translator, loaded, capsys):
    import tensorflow as tf

    argv = [translator.export_dir, "--num-translations", "3", "--beam-width", "3"]
    assert translate.main([*argv, "--json", *TEXTS]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    model = tf.saved_model.load(translator.version_dir)
    controls = {
        "beam_width": tf.constant(3),
        "num_translations": tf.constant(3),
        "sampling": tf.constant(False),
        "temperature": tf.constant(1.0),
        "top_k": tf.constant(0),
        "top_p": tf.constant(1.0),
        "seed": tf.constant(0, tf.int64),
    }
    outputs = model.signatures["translate"](text=tf.constant(TEXTS), **controls)
    wanted = [[text.decode() for text in row] for row in outputs["translations"].numpy()]
    assert [answer["translations"] for answer in answers] == wanted
    assert [answer["translation"] for answer in answers] == WANTED
    for answer, scores in zip(answers, outputs["scores"].numpy()):
        assert answer["scores"] == pytest.approx(scores.tolist())
        assert answer["scores"] == sorted(answer["scores"], reverse=True)
    # Plain: "score<TAB>translation" lines, a blank line after each text's.
    assert translate.main([*argv, TEXTS[0]]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert lines[3:] == ["", ""]
    assert [line.split("\t")[1] for line in lines[:3]] == wanted[0]
    assert [float(line.split("\t")[0]) for line in lines[:3]] == pytest.approx(
        answers[0]["scores"], abs=1e-4
    )


def test_sampling_repeats_with_its_seed(translator, loaded, capsys):
    argv = [translator.export_dir, "--sample", "--temperature", "3", "--json", *TEXTS]
    answers = []
    for seed in ("1", "1", "2"):
        assert translate.main([*argv, "--seed", seed]) == 0
        answers.append(capsys.readouterr().out)
    assert answers[0] == answers[1] != answers[2]
    assert translate.main([*argv, "--top-k", "1", "--seed", "3"]) == 0
    sampled = [json.loads(line)["translation"] for line in capsys.readouterr().out.splitlines()]
    assert translate.main([translator.export_dir, "--greedy", *TEXTS]) == 0
    assert sampled == capsys.readouterr().out.splitlines()


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--beam-width", "5"], "--beam-width must be between 1 and 4, got 5"),
        (["--beam-width", "0"], "--beam-width must be between 1 and 4, got 0"),
        (
            ["--beam-width", "2", "--num-translations", "3"],
            "--num-translations must be between 1 and 2 (--beam-width), got 3",
        ),
        (["--num-translations", "5"], "--num-translations must be between 1 and 4"),
        (["--sample", "--top-p", "1.5"], "--top-p must be above 0.0 and at most 1.0, got 1.5"),
        (["--sample", "--temperature", "0"], "--temperature must be above 0.0, got 0.0"),
        (["--greedy", "--beam-width", "2"], "--greedy does not combine with --beam-width"),
    ],
)
def test_controls_out_of_range_are_usage_errors(translator, loaded, capsys, flags, fragment):
    message = usage_error([translator.export_dir, *flags, TEXTS[0]], capsys)
    assert fragment in message
