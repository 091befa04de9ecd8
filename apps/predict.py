"""`python -m apps.predict`: `keras-transformer predict` (keras_transformer.cli.predict) in a clone."""

from keras_transformer.cli.main import run_command

if __name__ == "__main__":
    raise SystemExit(run_command("predict"))
