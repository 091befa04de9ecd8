"""`python -m apps.crosscheck`: `keras-transformer crosscheck` (keras_transformer.cli.crosscheck) in a clone."""

from keras_transformer.cli.main import run_command

if __name__ == "__main__":
    raise SystemExit(run_command("crosscheck"))
