"""`python -m apps.translate`: `keras-transformer translate` (keras_transformer.cli.translate) in a clone."""

from keras_transformer.cli.main import run_command

if __name__ == "__main__":
    raise SystemExit(run_command("translate"))
