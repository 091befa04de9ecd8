"""The server tests' tiny exports and the explorer's server, for the browser tests too
(each started once per process whichever folder asks first; see tests/serving/serving_helpers.py)."""

import pytest

from tests.serving.serving_helpers import build_exports, start_explorer_server


@pytest.fixture(scope="session")
def exports(tmp_path_factory, randomize):
    return build_exports(tmp_path_factory, randomize)


@pytest.fixture(scope="session")
def explorer_server(exports, tmp_path_factory):
    server = start_explorer_server(exports, tmp_path_factory)
    yield server
    server.stop()
