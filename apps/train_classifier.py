"""`python -m apps.train_classifier`: `keras-transformer train-classifier` (keras_transformer.cli.train_classifier) in a clone."""

from keras_transformer.cli.main import run_command

if __name__ == "__main__":
    raise SystemExit(run_command("train-classifier"))
