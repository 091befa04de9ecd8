"""The pytest-xdist groups of tests/scheduling.py."""

from tests.scheduling import SHARED_FIXTURES, SHARED_GROUPS, scheduling_group


def test_files_sharing_a_session_artifact_are_in_its_group(request):
    """Each test file that uses a session-scoped artifact shared across files is in
    that artifact's group: a file left out would build it again on the other worker."""
    groups = {}
    for item in request.session.items:
        for name in item.fixturenames:
            if name in SHARED_FIXTURES:
                groups.setdefault(item.nodeid.split("::", 1)[0], set()).add(SHARED_FIXTURES[name])
    for path, wanted in groups.items():
        assert len(wanted) == 1, (path, wanted)
        assert scheduling_group(path + "::test") == wanted.pop(), path


def test_groups():
    assert scheduling_group("tests/apps/test_translate.py::test_json[x]") == "tiny_translator"
    assert (
        scheduling_group("tests/layers/test_masks.py::test_causal[1-6-2]")
        == "tests/layers/test_masks.py"
    )
    assert set(SHARED_FIXTURES.values()) == set(SHARED_GROUPS.values())
