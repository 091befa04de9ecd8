"""`python -m keras_transformer.cli COMMAND`: `keras-transformer COMMAND` where the script is
not on PATH (and the export of a run trained on another backend, in a TensorFlow process)."""

import sys

from keras_transformer.cli.main import main

sys.exit(main())
