"""`keras-transformer crosscheck`: the table, and its exit status."""

import pytest

from keras_transformer import crosscheck
from keras_transformer.cli import crosscheck as crosscheck_app


def test_prints_a_row_per_check_and_passes(capsys):
    assert crosscheck_app.main(["--configurations", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.rstrip().endswith(("yes", "NO"))]
    assert len(rows) == 4
    assert "4 of 4 checks within tolerance" in lines[-1]


def test_exits_non_zero_when_a_difference_exceeds_the_tolerance(monkeypatch, capsys):
    # Float32 rounding is never exactly zero on every gradient, so a zero
    # tolerance must fail.
    monkeypatch.setattr(crosscheck, "GRADIENT_TOLERANCE", 0.0)
    assert crosscheck_app.main(["--configurations", "1"]) == 1
    assert "NO" in capsys.readouterr().out


def test_build_parser_gives_the_flags_main_reads(capsys):
    args = crosscheck_app.build_parser().parse_args(["--configurations", "3", "--seed", "7"])
    assert (args.configurations, args.seed) == (3, 7)
    with pytest.raises(SystemExit) as exited:
        crosscheck_app.main(["--configurations", "0"])
    assert exited.value.code == 2
    assert "--configurations must be at least 1" in capsys.readouterr().err
