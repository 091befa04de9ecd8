"""`python -m apps.export`: `keras-transformer export` (keras_transformer.cli.export) in a clone."""

from keras_transformer.cli.main import run_command

if __name__ == "__main__":
    raise SystemExit(run_command("export"))
