"""`keras-transformer`, the wheel's one command: its subcommands, and a missing extra named in
one line (the installed script itself: tests/test_packaging.py)."""

import pytest

from keras_transformer.cli import main as command


def test_every_subcommand_runs_its_module(monkeypatch):
    """`keras-transformer NAME ARGS` calls the module's `main(ARGS)` and returns its status."""
    calls = []
    for name, (module_name, _) in command.COMMANDS.items():
        module = __import__(f"keras_transformer.cli.{module_name}", fromlist=["main"])
        monkeypatch.setattr(module, "main", lambda argv, name=name: calls.append((name, argv)) or 7)
        assert command.main([name, "--flag", "value"]) == 7
    assert calls == [(name, ["--flag", "value"]) for name in command.COMMANDS]


def test_an_unknown_subcommand_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as raised:
        command.main(["trian-classifier"])
    assert raised.value.code == 2
    assert "invalid choice: 'trian-classifier'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "missing, extra",
    [
        ("tensorflow", "tensorflow"),
        ("tensorflow_text.python.ops", "tensorflow"),
        ("starlette", "serve"),
        ("onnxruntime", "deploy"),
        ("ai_edge_litert.interpreter", "deploy"),
        ("safetensors", "pretrained"),
    ],
)
def test_a_missing_extra_is_named_in_one_line(monkeypatch, capsys, missing, extra):
    from keras_transformer.cli import export

    def needs_it(argv):
        raise ModuleNotFoundError(f"No module named {missing!r}", name=missing)

    monkeypatch.setattr(export, "main", needs_it)
    assert command.run_command("export", []) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"error: keras-transformer export needs the package {missing.split('.')[0]!r}, which "
        f'is not installed: pip install "keras-transformer-toolkit[{extra}]" (the {extra!r} extra)'
    ]


def test_a_missing_module_of_no_extra_is_not_hidden(monkeypatch):
    """A module no extra installs is a bug to see, not an install to suggest."""
    from keras_transformer.cli import export

    def broken(argv):
        raise ModuleNotFoundError("No module named 'keras_transformer.nowhere'", name="x.y")

    monkeypatch.setattr(export, "main", broken)
    with pytest.raises(ModuleNotFoundError):
        command.run_command("export", [])
