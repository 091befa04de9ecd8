"""`python -m apps.train_translator`: `keras-transformer train-translator` (keras_transformer.cli.train_translator) in a clone."""

from keras_transformer.cli.main import run_command

if __name__ == "__main__":
    raise SystemExit(run_command("train-translator"))
