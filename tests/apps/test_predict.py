"""`keras-transformer predict`: texts from arguments or stdin, plain or JSON output,
base or version folders, attention plots, and its usage errors."""

import io
import json
import os
import shutil
import sys

import pytest

from keras_transformer.cli import predict
from tests.classifier_fixtures import CLASS_NAMES, expect_usage_error, is_png

TEXTS = ["goal match team", "stocks market shares", "film music actor"]


def label_lines(output):
    """The first word of each prediction line (the label), skipping the
    `Model:` line and the indented per-class probability lines."""
    return [
        line.split()[0]
        for line in output.splitlines()
        if line.strip() and not line.startswith((" ", "Model:"))
    ]


def usage_error(argv, capsys):
    return expect_usage_error(predict.main, argv, capsys)


@pytest.fixture(autouse=True)
def loaded(saved_model_cache):
    """The classifier's export, loaded once for the module (tests/apps/conftest.py)."""
    return saved_model_cache


def chosen_weights(trained_classifier):
    """The Transformer's and the bag of n-grams' weights, as training recorded them."""
    with open(os.path.join(trained_classifier.run_dir, "metrics.json")) as metrics_file:
        combination = json.load(metrics_file)["bag_of_ngrams"]
    return combination["transformer_weight"], combination["bag_weight"]


def test_prints_the_model_and_one_label_per_text(trained_classifier, capsys):
    assert predict.main([trained_classifier.export_dir, *TEXTS[:2]]) == 0
    output = capsys.readouterr().out
    transformer, bag = chosen_weights(trained_classifier)
    assert output.splitlines()[0] == (
        f"Model: {trained_classifier.version_dir} (the Transformer at weight {transformer}, "
        f"the bag of n-grams at {bag})"
    )
    labels = label_lines(output)
    assert len(labels) == 2
    assert set(labels) <= set(CLASS_NAMES)
    # Each text's line shows its (shortened) text.
    assert repr(TEXTS[0]) in output and repr(TEXTS[1]) in output


def test_json_lines_have_the_label_and_probabilities_by_class(trained_classifier, capsys):
    assert predict.main(["--json", trained_classifier.export_dir, *TEXTS]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(TEXTS)
    transformer, bag = chosen_weights(trained_classifier)
    for text, line in zip(TEXTS, lines):
        answer = json.loads(line)
        assert answer["text"] == text
        assert answer["weights"] == {"transformer": transformer, "bag_of_ngrams": bag}
        assert answer["label"] in CLASS_NAMES
        assert sorted(answer["probabilities"]) == CLASS_NAMES
        # Rounded to 4 decimals each.
        assert sum(answer["probabilities"].values()) == pytest.approx(1.0, abs=1e-3)
        assert answer["label"] == max(answer["probabilities"], key=answer["probabilities"].get)


def test_texts_may_follow_options_as_the_usage_shows(trained_classifier, capsys):
    assert predict.main([trained_classifier.export_dir, "--json", *TEXTS]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(TEXTS)


def test_reads_texts_from_stdin(trained_classifier, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(text + "\n" for text in TEXTS)))
    assert predict.main([trained_classifier.export_dir, "--json"]) == 0
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [answer["text"] for answer in answers] == TEXTS  # newlines stripped


def test_a_version_folder_answers_as_its_base_folder(trained_classifier, capsys):
    assert predict.main(["--json", trained_classifier.export_dir, *TEXTS]) == 0
    from_base = capsys.readouterr().out
    assert predict.main(["--json", trained_classifier.version_dir, *TEXTS]) == 0
    assert capsys.readouterr().out == from_base


def test_a_missing_model_is_a_usage_error(tmp_path, capsys):
    missing = str(tmp_path / "no_model")
    message = usage_error([missing, "some text"], capsys)
    assert missing in message


def test_plot_attention_writes_a_png(trained_classifier, tmp_path, capsys):
    out = tmp_path / "plots" / "a.png"  # the folder is made for it
    assert (
        predict.main(
            [trained_classifier.export_dir, "--plot-attention", TEXTS[0], "--out", str(out)]
        )
        == 0
    )
    assert is_png(out)
    assert str(out) in capsys.readouterr().out


def test_plot_attention_says_when_the_transformer_does_not_count(
    trained_classifier, tmp_path, capsys
):
    export = tmp_path / "export"
    shutil.copytree(trained_classifier.version_dir, export / "1")
    parts_path = export / "1" / "assets.extra" / "classifier.json"
    parts = json.loads(parts_path.read_text())
    parts_path.write_text(json.dumps({**parts, "transformer_weight": 0.0}))
    out = tmp_path / "a.png"
    assert predict.main([str(export), "--plot-attention", TEXTS[0], "--out", str(out)]) == 0
    assert is_png(out)
    assert "weight in this model is 0" in capsys.readouterr().err


def test_a_model_without_an_encoder_answers_but_has_no_attention_to_plot(
    bag_alone_classifier, tmp_path, capsys
):
    """The export at Transformer weight 0 holds the bag of n-grams alone: it classifies,
    and --plot-attention says plainly why there is nothing to draw."""
    assert predict.main([bag_alone_classifier.export_dir, *TEXTS]) == 0
    output = capsys.readouterr().out
    assert "(the Transformer at weight 0.0, the bag of n-grams at" in output.splitlines()[0]
    assert label_lines(output) == ["sport", "business", "culture"]
    out = tmp_path / "a.png"
    message = usage_error(
        [bag_alone_classifier.export_dir, "--plot-attention", TEXTS[0], "--out", str(out)],
        capsys,
    )
    assert "This model has no attention to show" in message
    assert "the bag of n-grams' alone" in message
    assert not out.exists()


def test_a_layer_out_of_range_is_a_usage_error(trained_classifier, tmp_path, capsys):
    out = tmp_path / "a.png"
    message = usage_error(
        [
            trained_classifier.export_dir,
            "--plot-attention",
            TEXTS[0],
            "--out",
            str(out),
            "--layer",
            "5",
        ],
        capsys,
    )
    assert "--layer 5" in message and "1 encoder block" in message
    assert not out.exists()


def test_a_zero_batch_size_is_a_usage_error(trained_classifier, capsys):
    message = usage_error(["--batch-size", "0", trained_classifier.export_dir, TEXTS[0]], capsys)
    assert "--batch-size" in message
