"""`python -m apps.embed`: the `keras-transformer embed` command (`keras_transformer.cli.embed`)."""

from keras_transformer.cli.embed import main

if __name__ == "__main__":
    raise SystemExit(main())
