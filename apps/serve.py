"""`python -m apps.serve`: `keras-transformer serve` (keras_transformer.cli.serve) in a clone."""

from keras_transformer.cli.main import run_command

if __name__ == "__main__":
    raise SystemExit(run_command("serve"))
