"""`python -m apps.tokenize`: `keras-transformer tokenize` (keras_transformer.cli.tokenize) in a clone."""

from keras_transformer.cli.main import run_command

if __name__ == "__main__":
    raise SystemExit(run_command("tokenize"))
