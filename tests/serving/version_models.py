"""Tiny SavedModels that answer their own version number: every signature maps
`text` (string `[None]`) to `version` (int64 `[None]`, the version written),
so a test sees which version served a request. They save in a fraction of a
second, unlike the exports of conftest.py."""

import os
import shutil
import tempfile

SIGNATURES = ("serving_default", "greedy", "attention")


def write_version_model(base_path, version, signatures=SIGNATURES):
    """Writes `base_path/VERSION/` whole (staged beside it, then renamed, as
    an export appears) and returns that folder."""
    import tensorflow as tf

    module = tf.Module()
    module.version = tf.Variable(version, dtype=tf.int64)

    def answer(text):
        return {"version": tf.fill(tf.shape(text), module.version)}

    text_spec = tf.TensorSpec([None], tf.string, name="text")
    functions = {
        name: tf.function(answer, input_signature=[text_spec]).get_concrete_function()
        for name in signatures
    }
    os.makedirs(base_path, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".staging-", dir=base_path)
    target = os.path.join(base_path, str(version))
    try:
        tf.saved_model.save(module, staging, signatures=functions)
        os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
