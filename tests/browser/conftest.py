"""The server tests' tiny exports, for the browser tests too (built once per
process whichever folder asks first; see tests/serving/serving_helpers.py)."""

import pytest

from tests.serving.serving_helpers import build_exports


@pytest.fixture(scope="session")
def exports(tmp_path_factory, randomize):
    return build_exports(tmp_path_factory, randomize)
