"""The start both fresh-process loader scripts share (they run where the
project cannot be imported, so they cannot share a function)."""

import textwrap

# Makes the project unimportable (it may be installed in this interpreter:
# `make` installs it editable; a None entry in sys.modules fails every import
# of it and of its submodules), reads the export path and the texts (hex, one
# JSON list) from argv, and lists the export with `saved_model_cli show --all`
# as its console script would, into `cli`.
LOADER_HEADER = textwrap.dedent(
    """
    import json, sys
    for project_package in ("keras_transformer", "apps", "tests"):
        sys.modules[project_package] = None
    import tensorflow as tf

    path = sys.argv[1]
    with open(sys.argv[2]) as texts_file:
        texts = [bytes.fromhex(text) for text in json.load(texts_file)]

    # `saved_model_cli show --all --dir PATH`: what its console script runs
    # (`saved_model_cli.main()` on these arguments), here rather than in a
    # second fresh process (each costs a TensorFlow import), and before
    # tensorflow_text is imported, as the console script never imports it.
    import contextlib, io
    from tensorflow.python.tools import saved_model_cli
    cli_output = io.StringIO()
    sys.argv = ["saved_model_cli", "show", "--dir", path, "--all"]
    with contextlib.redirect_stdout(cli_output):
        try:
            saved_model_cli.main()
            cli_status = 0
        except SystemExit as exit:
            cli_status = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    cli = {"status": cli_status, "stdout": cli_output.getvalue()}
    """
)
