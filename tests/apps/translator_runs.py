"""The translator app's runs that tests/apps/test_train_translator.py and
tests/apps/test_tokenize_app.py share: `apps.tokenize translator` writes a
token folder, `apps.train_translator` trains from the raw TSV (the "raw" run,
whose folder test_train_translator.py checks) and from the token folder.

Each app run costs seconds of graph tracing, so they run once per session,
for whichever of the two modules asks first through its `translator_runs`
fixture (tests/scheduling.py keeps both on one worker). No run exports:
tests/training/test_shared_vocabulary.py checks the export of an app run.
"""

import contextlib
import io
import warnings

TRANSLATOR_TOKEN_FLAGS = [
    "--vocab-size",
    "120",
    "--max-length",
    "12",
    "--validation-size",
    "8",
    "--test-size",
    "8",
]
TRANSLATOR_TRAIN_FLAGS = [
    "--num-layers",
    "1",
    "--d-model",
    "32",
    "--num-heads",
    "2",
    "--intermediate-dim",
    "64",
    "--batch-size",
    "16",
    "--warmup-steps",
    "10",
    "--chrf-pairs",
    "4",
    # Three epochs, so test_train_translator.py sees the loss fall.
    "--epochs",
    "3",
    "--verbose",
    "2",
    "--no-export",
]


def run_main(main, argv):
    """`(exit status, stdout)` of an app's `main`."""
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        status = main(argv)
    return status, output.getvalue()


_CACHE = {}


def translator_app_runs(tmp_path_factory):
    """{"tokens_dir", "raw", "tokens_run": folders, "outputs": {"tokenize", "raw", "tokens":
    (exit status, stdout)}, "raw_warnings": the messages of the warnings the raw run raised,
    "pairs": the TSV}."""
    if "runs" in _CACHE:
        return _CACHE["runs"]
    from keras_transformer.cli import tokenize, train_translator
    from tests.apps.test_train_translator import write_pairs

    folder = tmp_path_factory.mktemp("translator_runs")
    pairs = write_pairs(folder / "pairs.tsv", count=120)
    tokens_dir = str(folder / "tokens")
    outputs = {
        "tokenize": run_main(
            tokenize.main,
            ["translator", "--data", f"tsv:{pairs}", *TRANSLATOR_TOKEN_FLAGS, "--out", tokens_dir],
        )
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outputs["raw"] = run_main(
            train_translator.main,
            [
                "--data",
                f"tsv:{pairs}",
                *TRANSLATOR_TOKEN_FLAGS,
                *TRANSLATOR_TRAIN_FLAGS,
                "--run-dir",
                str(folder / "raw"),
            ],
        )
    outputs["tokens"] = run_main(
        train_translator.main,
        [
            "--data",
            f"tokens:{tokens_dir}",
            *TRANSLATOR_TRAIN_FLAGS,
            "--run-dir",
            str(folder / "tokens_run"),
        ],
    )
    _CACHE["runs"] = {
        "tokens_dir": tokens_dir,
        "raw": str(folder / "raw"),
        "tokens_run": str(folder / "tokens_run"),
        "outputs": outputs,
        "raw_warnings": [str(warning.message) for warning in caught],
        "pairs": pairs,
    }
    return _CACHE["runs"]
