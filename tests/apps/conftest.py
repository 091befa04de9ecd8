"""Shares the session's two classifier runs and the export at Transformer weight 0
(see tests/classifier_fixtures.py),
and a module-wide cache of SavedModel loads for the apps that load exports."""

import pytest

from tests.classifier_fixtures import (  # noqa: F401  (fixtures)
    bag_alone_classifier,
    budget_classifier,
    trained_classifier,
)


@pytest.fixture(scope="module")
def saved_model_cache():
    """Loads each SavedModel folder once for the module: every `main` call of
    apps.predict or apps.translate would otherwise spend a second or more
    loading the same export again. Yields {path: loaded model}."""
    import tensorflow as tf

    cache = {}
    real_load = tf.saved_model.load

    def load(path, *args, **kwargs):
        if path not in cache:
            cache[path] = real_load(path, *args, **kwargs)
        return cache[path]

    patch = pytest.MonkeyPatch()
    patch.setattr(tf.saved_model, "load", load)
    yield cache
    patch.undo()
