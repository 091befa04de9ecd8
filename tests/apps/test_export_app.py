"""`keras-transformer export RUN_DIR`: a TensorFlow-trained run folder exports to
the same answers as its training app's own export, in the next version; a
folder that cannot be exported is one `error:` line naming the file.

The classifier run is the session's `budget_classifier` (tests/classifier_fixtures.py); the
trained classifier's run (with the bag of n-grams) is exported and checked against its model
in tests/apps/test_train_classifier.py.

Runs trained on JAX: tests/apps/test_export_jax_runs.py.
"""

import json
import os
import shutil

import numpy as np
import pytest

from keras_transformer.cli import export as export_app
from keras_transformer.cli import train_translator
from tests.apps.test_train_translator import FLAGS as TRANSLATOR_FLAGS
from tests.apps.test_train_translator import write_pairs
from tests.classifier_fixtures import expect_usage_error, load_export, snapshot

TEXTS = [
    "the team scored a goal",
    "shares fell on the market",
    "a film about music",
    "uno dos tres",
    "seis cinco",
    "",
]
RUN_FILES = ("settings.json", "vocabulary.txt", "model.keras")  # what a classifier's export reads


@pytest.fixture(scope="module")
def translator_run(tmp_path_factory):
    """`(run folder, the training app's export folder)` of a tiny translator trained with
    TensorFlow.
    """
    folder = tmp_path_factory.mktemp("translator")
    run_dir, export_dir = str(folder / "run"), str(folder / "app_export")
    status = train_translator.main(
        [
            "--data",
            f"tsv:{write_pairs(folder / 'pairs.tsv')}",
            *TRANSLATOR_FLAGS,
            "--epochs",
            "1",
            # No chrF of validation translations: one decoder graph fewer to trace.
            "--chrf-pairs",
            "0",
            "--monitor",
            "val_loss",
            "--beam-width",
            "3",
            "--length-penalty",
            "1.5",
            "--run-dir",
            run_dir,
            "--export-dir",
            export_dir,
        ]
    )
    assert status == 0
    return run_dir, export_dir


def answers(model, signature, output):
    import tensorflow as tf

    return model.signatures[signature](text=tf.constant(TEXTS))[output].numpy()


def read_extra(version_dir, name):
    with open(os.path.join(version_dir, "assets.extra", name), encoding="utf-8") as extra:
        return extra.read()


def test_classifier_run_exports_as_the_training_app_did(
    budget_classifier, tmp_path, monkeypatch, capsys
):
    import tensorflow as tf

    # No --export-dir: the classifier's default, under the working folder.
    monkeypatch.chdir(tmp_path)
    assert export_app.main([budget_classifier.run_dir]) == 0
    base = os.path.join("exported_models", "classifier")
    assert capsys.readouterr().out.splitlines() == [
        f"Exported SavedModel: {os.path.join(base, '1')}",
        f'Try it: keras-transformer predict {base} "your text here"',
    ]
    mine_dir, theirs_dir = str(tmp_path / base / "1"), budget_classifier.version_dir
    mine, theirs = tf.saved_model.load(mine_dir), load_export(theirs_dir)
    np.testing.assert_allclose(
        answers(mine, "serving_default", "probabilities"),
        answers(theirs, "serving_default", "probabilities"),
        rtol=0,
        atol=1e-6,
    )
    assert list(answers(mine, "serving_default", "label")) == list(
        answers(theirs, "serving_default", "label")
    )
    assert read_extra(mine_dir, "class_names.txt") == read_extra(theirs_dir, "class_names.txt")


def test_translator_run_exports_as_the_training_app_did(translator_run, tmp_path, capsys):
    import tensorflow as tf

    run_dir, app_export = translator_run
    base = str(tmp_path / "translator")
    shutil.copytree(app_export, base)  # version 1 there: the export is version 2
    before = snapshot(base)
    capsys.readouterr()
    assert (
        export_app.main(
            [run_dir, "--export-dir", base, "--beam-width", "3", "--length-penalty", "1.5"]
        )
        == 0
    )
    assert (
        capsys.readouterr().out.splitlines()[-1]
        == f'Try it: keras-transformer translate {base} "your sentence here"'
    )
    assert sorted(os.listdir(base)) == ["1", "2"]
    assert {
        path: data for path, data in snapshot(base).items() if path.startswith("1" + os.sep)
    } == before
    theirs, mine = os.path.join(base, "1"), os.path.join(base, "2")
    theirs_model, mine_model = tf.saved_model.load(theirs), tf.saved_model.load(mine)
    for signature in ("serving_default", "greedy"):
        assert list(answers(mine_model, signature, "translation")) == list(
            answers(theirs_model, signature, "translation")
        )
    config = json.loads(read_extra(mine, "translator.json"))
    assert config == json.loads(read_extra(theirs, "translator.json"))
    # The languages come from the run's settings.json (a tsv file names none of its own).
    assert (config["beam_width"], config["length_penalty"]) == (3, 1.5)
    assert (config["source_language"], config["target_language"]) == ("source", "target")


# --- folders that cannot be exported -----------------------------------------------


@pytest.fixture
def classifier_copy(budget_classifier, tmp_path):
    """The files of a classifier's run folder that its export reads, and its best checkpoint
    (of the run without the bag of n-grams: the quickest to export).
    """
    run_dir = tmp_path / "run"
    os.makedirs(run_dir / "checkpoints")
    for name in (*RUN_FILES, os.path.join("checkpoints", "best.keras")):
        shutil.copy(os.path.join(budget_classifier.run_dir, name), run_dir / name)
    return run_dir


def export_error(argv, capsys, tmp_path):
    """The `error:` line of `apps.export` on `argv`, which must write no version."""
    export_dir = tmp_path / "no_export"
    line = expect_usage_error(export_app.main, [*argv, "--export-dir", str(export_dir)], capsys)
    assert not os.path.exists(export_dir) or not os.listdir(export_dir)
    return line


def test_a_missing_folder_or_one_without_settings(tmp_path, capsys):
    missing = str(tmp_path / "nowhere")
    line = export_error([missing], capsys, tmp_path)
    assert missing in line and "not a folder" in line
    line = export_error([str(tmp_path)], capsys, tmp_path)
    assert "not a run folder" in line and "settings.json" in line


@pytest.mark.parametrize(
    "content, expected",
    [
        ("{not json", "Cannot read"),
        ('["a list"]', 'no "settings" object'),
        (
            '{"settings": {"pooling": "max", "seed": 1}}',
            "neither a classifier's nor a translator's",
        ),
        ('{"settings": {"label_smoothing": 0.1}, "class_names": ["a", "b"]}', "neither"),
        ('{"settings": {}, "class_names": "ab"}', "class_names must be a list"),
    ],
)
def test_unreadable_or_foreign_settings(classifier_copy, tmp_path, capsys, content, expected):
    (classifier_copy / "settings.json").write_text(content)
    line = export_error([str(classifier_copy)], capsys, tmp_path)
    assert expected in line and str(classifier_copy / "settings.json") in line


def test_an_unfinished_run_says_how_to_resume_or_export_its_best_epoch(
    classifier_copy, tmp_path, capsys
):
    os.remove(classifier_copy / "model.keras")
    line = export_error([str(classifier_copy)], capsys, tmp_path)
    best = str(classifier_copy / "checkpoints" / "best.keras")
    assert (
        "has not finished" in line
        and "--resume" in line
        and "keras-transformer train-classifier" in line
    )
    assert f"--model-file {best}" in line
    # What the line suggests works.
    assert (
        export_app.main(
            [str(classifier_copy), "--model-file", best, "--export-dir", str(tmp_path / "e")]
        )
        == 0
    )
    assert os.listdir(tmp_path / "e") == ["1"]


def test_a_missing_vocabulary(classifier_copy, tmp_path, capsys):
    os.remove(classifier_copy / "vocabulary.txt")
    line = export_error([str(classifier_copy)], capsys, tmp_path)
    assert (
        "Cannot read the run's vocabulary" in line
        and str(classifier_copy / "vocabulary.txt") in line
    )


def test_a_vocabulary_of_another_size(classifier_copy, tmp_path, capsys):
    path = classifier_copy / "vocabulary.txt"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))
    line = export_error([str(classifier_copy)], capsys, tmp_path)
    assert str(path) in line and "expects a vocabulary of" in line


def test_a_model_file_that_is_not_a_model(classifier_copy, tmp_path, capsys):
    (classifier_copy / "model.keras").write_text("not a zip")
    line = export_error([str(classifier_copy)], capsys, tmp_path)
    assert f"{classifier_copy / 'model.keras'} is not a Keras model file" in line


def test_a_model_of_the_other_task(classifier_copy, translator_run, tmp_path, capsys):
    line = export_error(
        [str(classifier_copy), "--model-file", os.path.join(translator_run[0], "model.keras")],
        capsys,
        tmp_path,
    )
    assert "holds a Seq2SeqTransformer" in line and "classifier" in line


def test_a_bad_beam_width_is_refused_before_reading_the_run(tmp_path, capsys):
    line = export_error([str(tmp_path / "nowhere"), "--beam-width", "0"], capsys, tmp_path)
    assert "--beam-width must be at least 1" in line


def predicted(main, argv, capsys):
    """`(status, [json answers])` of `keras-transformer predict|translate ... --json`."""
    capsys.readouterr()
    status = main([*argv, "--json"])
    return status, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_classifier_exports_for_onnx_and_litert_and_predict_answers_from_them(
    budget_classifier, tmp_path, monkeypatch, capsys
):
    """`--format onnx` and `--format litert --quantize int8` from the command line, each to
    its default folder; `keras-transformer predict` then answers from each, through its
    runtime, as it answers from the SavedModel (int8: the same labels)."""
    from keras_transformer.cli import predict

    monkeypatch.chdir(tmp_path)
    texts = [text for text in TEXTS if text]
    status, saved = predicted(predict.main, [budget_classifier.version_dir, *texts], capsys)
    assert status == 0
    for flags, base in (
        (["--format", "onnx"], os.path.join("exported_models", "classifier-onnx")),
        (["--format", "litert", "--quantize", "int8"], "litert-int8"),
    ):
        export_dir = [] if base.startswith("exported_models") else ["--export-dir", base]
        assert export_app.main([budget_classifier.run_dir, *flags, *export_dir]) == 0
        printed = capsys.readouterr().out.splitlines()
        kind = "ONNX model" if "onnx" in flags else "LiteRT model"
        assert printed == [
            f"Exported {kind}: {os.path.join(base, '1')}",
            f'Try it: keras-transformer predict {base} "your text here"',
        ]
        status, answered = predicted(predict.main, [base, *texts], capsys)
        assert status == 0
        assert [a["label"] for a in answered] == [a["label"] for a in saved], flags
        if "--quantize" not in flags:
            for mine, theirs in zip(answered, saved):
                for name, probability in theirs["probabilities"].items():
                    # --json rounds to 4 places; the graphs agree to float32 rounding.
                    assert abs(mine["probabilities"][name] - probability) <= 1.01e-4
    with open(os.path.join("litert-int8", "1", "litert.json"), encoding="utf-8") as manifest:
        assert json.load(manifest)["quantization"] == "int8"
    message = expect_usage_error(
        predict.main, ["litert-int8", "--plot-attention", "a goal"], capsys
    )
    assert "litert export, which has no attention to draw" in message


def test_translator_exports_for_onnx_and_translate_decodes_greedily(
    translator_run, tmp_path, capsys
):
    from keras_transformer.cli import translate

    run_dir, app_export = translator_run
    base = str(tmp_path / "onnx")
    assert export_app.main([run_dir, "--format", "onnx", "--export-dir", base]) == 0
    texts = [text for text in TEXTS if text]
    status, saved = predicted(translate.main, [app_export, "--greedy", *texts], capsys)
    assert status == 0
    status, answered = predicted(translate.main, [base, *texts], capsys)
    assert status == 0 and answered == saved
    message = expect_usage_error(translate.main, [base, "--beam-width", "2", "uno"], capsys)
    assert "decodes greedily only: drop --beam-width" in message


@pytest.mark.parametrize(
    "flags, named", [(["--format", "tflite"], "--format"), (["--quantize", "int4"], "--quantize")]
)
def test_an_unknown_format_or_quantization_is_a_usage_error(
    budget_classifier, flags, named, capsys
):
    with pytest.raises(SystemExit) as raised:
        export_app.main([budget_classifier.run_dir, *flags])
    assert raised.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith(f"keras-transformer export: error: argument {named}: invalid choice")
