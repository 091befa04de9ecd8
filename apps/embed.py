"""`python -m apps.embed`: `keras-transformer embed` (keras_transformer.cli.embed) in a clone."""

from keras_transformer.cli.main import run_command

if __name__ == "__main__":
    raise SystemExit(run_command("embed"))
