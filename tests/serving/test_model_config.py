"""TensorFlow Serving's model config file: parsed with its own protos, every
mistake a startup error naming the file and line; version policies (latest N,
specific, all) serving several versions at once; version labels routed as
TensorFlow Serving routes them (an unknown label 400, a label for a version
not serving 404)."""

import os
import textwrap

import pytest
from starlette.testclient import TestClient

from keras_transformer.serving import ModelRepository, create_app
from keras_transformer.serving.model_config import (
    ModelConfigError,
    VersionPolicy,
    read_model_config_file,
    server_config_models,
    with_signatures,
)
from tests.serving.serving_helpers import REPO_ROOT, serve_process, serve_refusal
from tests.serving.version_models import write_version_model


def write_config(tmp_path, text, name="models.config"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return str(path)


@pytest.fixture
def folders(tmp_path):
    for name in ("classifier", "translator"):
        (tmp_path / name).mkdir()
    return {name: str(tmp_path / name) for name in ("classifier", "translator")}


# Parsing


def test_a_file_with_every_policy_and_labels(tmp_path, folders):
    path = write_config(
        tmp_path,
        f"""
        # Comments, both delimiters and the list syntax are TensorFlow Serving's text format.
        model_config_list {{
          config {{
            name: "classifier"
            base_path: "{folders["classifier"]}"
            model_platform: "tensorflow"
          }}
          config: <
            name: 'translator'
            base_path: "{folders["translator"]}"
            model_version_policy {{ specific {{ versions: 1 versions: 3 }} }}
            version_labels {{ key: "stable" value: 1 }}
            version_labels {{ key: "canary" value: 3 }}
          >
        }}
    """,
    )
    classifier, translator = read_model_config_file(path)
    assert (classifier.name, classifier.base_path) == ("classifier", folders["classifier"])
    assert (
        classifier.version_policy == VersionPolicy("latest", num_versions=1)
        and classifier.version_labels == {}
    )
    assert (translator.name, translator.base_path) == ("translator", folders["translator"])
    assert translator.version_policy == VersionPolicy("specific", versions=frozenset({1, 3}))
    assert translator.version_labels == {"stable": 1, "canary": 3}


def test_the_sample_file_of_the_docs(tmp_path, folders):
    with open(os.path.join(REPO_ROOT, "docs", "serving.md"), encoding="utf-8") as docs:
        section = docs.read().partition("## Model config file")[2]
    sample = section.split("```")[1]
    for name, folder in folders.items():
        sample = sample.replace(f'"/models/{name}"', f'"{folder}"')
    classifier, translator = read_model_config_file(write_config(tmp_path, sample))
    assert classifier.name == "classifier" and classifier.version_policy == VersionPolicy()
    assert translator.version_policy == VersionPolicy("specific", versions=frozenset({3, 4}))
    assert translator.version_labels == {"stable": 3, "canary": 4}


@pytest.mark.parametrize(
    "policy, expected",
    [
        ("latest { num_versions: 3 }", VersionPolicy("latest", num_versions=3)),
        ("latest { }", VersionPolicy("latest", num_versions=1)),  # TensorFlow Serving reads 0 as 1
        ("all { }", VersionPolicy("all")),
    ],
)
def test_version_policies(tmp_path, folders, policy, expected):
    path = write_config(
        tmp_path,
        f"""
        model_config_list {{ config {{ name: "m" base_path: "{folders["classifier"]}"
                                      model_version_policy {{ {policy} }} }} }}
    """,
    )
    (config,) = read_model_config_file(path)
    assert config.version_policy == expected


def test_policy_candidates():
    assert VersionPolicy("latest", num_versions=2).candidates({1: "1", 5: "5", 3: "3"}) == [5, 3, 1]
    assert VersionPolicy("latest", num_versions=2).limit() == 2
    assert VersionPolicy("specific", versions=frozenset({1, 3, 9})).candidates([1, 2, 3]) == [3, 1]
    assert VersionPolicy("all").limit() is None


# Mistakes: (file text with {a} and {b} for two existing folders, line, words the message holds).
MISTAKES = [
    (
        'model_config_list {\n  config {\n    name: "a"\n    base_path: "{a}"\n  }\n',
        5,
        ['Expected "}"'],
    ),
    (
        'model_config_list {\n  config {\n    name: "a"\n    bse_path: "{a}"\n  }\n}\n',
        4,
        ['no field named "bse_path"'],
    ),
    (
        'model_config_list {\n  config { name: "a" base_path: "{a}" }\n  config {\n    name: "b"\n  }\n}\n',
        3,
        ["model 'b' has no base_path"],
    ),
    (
        'model_config_list {\n  config { name: "a" base_path: "{a}" }\n  # a comment {\n'
        '  config { name: "a" base_path: "{b}" }\n}\n',
        4,
        ["model 'a' is listed twice (first at line 2)"],
    ),
    (
        'model_config_list {\n  config { name: "a" base_path: "{a}/nowhere" }\n}\n',
        2,
        ["no folder at base_path"],
    ),
    ('model_config_list {\n  config { name: "a/b" base_path: "{a}" }\n}\n', 2, ["may only hold"]),
    ('model_config_list {\n  config { base_path: "{a}" }\n}\n', 2, ["may not be empty"]),
    (
        'model_config_list {\n  config { name: "a" base_path: "{a}" model_platform: "pytorch" }\n}\n',
        2,
        ["model_platform 'pytorch'"],
    ),
    (
        'model_config_list {\n  config { name: "a" base_path: "{a}"\n'
        "    model_version_policy { specific { } } }\n}\n",
        2,
        ["specific lists no versions"],
    ),
    (
        'model_config_list {\n  config { name: "a" base_path: "{a}"\n'
        '    model_version_policy { specific { versions: 2 } }\n    version_labels { key: "stable" value: 1 } }\n}\n',
        2,
        ["label 'stable' names version 1", "never serves"],
    ),
    (
        'model_config_list {\n  config { name: "a" base_path: "{a}"\n'
        '    version_labels { key: "x/y" value: 1 } }\n}\n',
        2,
        ["label 'x/y'"],
    ),
    (
        'model_config_list {\n  config { name: "a" base_path: "{a}" model_version_policy { latest { num_versions: -1 } } }'
        "\n}\n",
        2,
        ["out of range"],
    ),
]


@pytest.mark.parametrize("text, line, words", MISTAKES)
def test_a_mistake_names_the_file_and_line(tmp_path, folders, text, line, words):
    path = write_config(
        tmp_path, text.replace("{a}", folders["classifier"]).replace("{b}", folders["translator"])
    )
    with pytest.raises(ModelConfigError) as raised:
        read_model_config_file(path)
    message = str(raised.value)
    assert message.startswith(f"{path}:{line}:"), message
    for word in words:
        assert word in message


@pytest.mark.parametrize(
    "text, words",
    [
        ("", ["no models"]),
        ("model_config_list { }", ["no models"]),
        ('custom_model_config { type_url: "x" }', ["custom_model_config is not supported"]),
    ],
)
def test_a_file_without_models_is_refused(tmp_path, text, words):
    path = write_config(tmp_path, text)
    with pytest.raises(ModelConfigError, match="no models|custom_model_config") as raised:
        read_model_config_file(path)
    assert str(raised.value).startswith(f"{path}: ")
    for word in words:
        assert word in str(raised.value)


def test_an_unreadable_file_is_refused(tmp_path):
    with pytest.raises(ModelConfigError, match="cannot read"):
        read_model_config_file(str(tmp_path / "absent.config"))
    path = tmp_path / "latin1.config"
    path.write_bytes(b'model_config_list { config { name: "caf\xe9" } }')
    with pytest.raises(ModelConfigError, match="cannot read"):
        read_model_config_file(str(path))


def test_a_reload_request_is_read_as_the_file_is(tmp_path, folders):
    from tensorflow_serving.apis import model_management_pb2

    # The message a client of TensorFlow Serving sends, built with its protos.
    request = model_management_pb2.ReloadConfigRequest()
    classifier = request.config.model_config_list.config.add()
    classifier.name, classifier.base_path = "classifier", folders["classifier"]
    classifier.model_platform = "tensorflow"
    translator = request.config.model_config_list.config.add()
    translator.name, translator.base_path = "translator", folders["translator"]
    translator.model_version_policy.specific.versions.extend([1, 3])
    translator.version_labels["stable"] = 1
    path = write_config(
        tmp_path,
        f"""
        model_config_list {{
          config {{ name: "classifier" base_path: "{folders["classifier"]}"
                    model_platform: "tensorflow" }}
          config {{ name: "translator" base_path: "{folders["translator"]}"
                    model_version_policy {{ specific {{ versions: [1, 3] }} }}
                    version_labels {{ key: "stable" value: 1 }} }}
        }}
    """,
    )
    configs = server_config_models(request.config, "ReloadConfigRequest")
    assert configs == read_model_config_file(path)
    assert configs[1].version_policy == VersionPolicy("specific", versions=frozenset({1, 3}))
    # Its mistakes name the entry by its rank.
    translator.ClearField("base_path")
    with pytest.raises(ModelConfigError) as raised:
        server_config_models(request.config, "ReloadConfigRequest")
    assert (
        str(raised.value) == "ReloadConfigRequest: config #2: model 'translator' has no base_path"
    )
    assert raised.value.code == "INVALID_ARGUMENT"


def test_signatures_for_every_model_or_one(tmp_path, folders):
    path = write_config(
        tmp_path,
        f"""
        model_config_list {{
          config {{ name: "classifier" base_path: "{folders["classifier"]}" }}
          config {{ name: "translator" base_path: "{folders["translator"]}" }}
        }}
    """,
    )
    configs = with_signatures(
        read_model_config_file(path), ["attention", "translator:greedy", "attention"]
    )
    assert [config.signatures for config in configs] == [("attention",), ("attention", "greedy")]
    assert configs[1].public_signatures() == {"serving_default", "attention", "greedy"}
    with pytest.raises(ModelConfigError, match="no model is named 'nobody'"):
        with_signatures(configs, ["nobody:greedy"])
    for bad in ("", "translator:", ":greedy"):
        with pytest.raises(ModelConfigError, match="expected SIGNATURE or MODEL:SIGNATURE"):
            with_signatures(configs, [bad])


# Serving by policy and label


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    """A base path holding versions 1 to 4 of a model that answers its version."""
    base = str(tmp_path_factory.mktemp("versions") / "model")
    for version in (1, 2, 3, 4):
        write_version_model(base, version)
    return base


def serve_config(tmp_path, text):
    repository = ModelRepository(
        read_model_config_file(write_config(tmp_path, text)), poll_seconds=0
    )
    return TestClient(create_app(repository), raise_server_exceptions=False)


def answer(client, path):
    """The version that answered a predict at `path`, or the error status and message."""
    response = client.post(f"/v1/models/{path}:predict", json={"instances": ["a", "b"]})
    if response.status_code == 200:
        (version,) = set(response.json()["predictions"])
        return version
    return response.status_code, response.json()["error"]


def statuses(client, path="model"):
    response = client.get(f"/v1/models/{path}")
    assert response.status_code == 200, response.text
    return {
        int(status["version"]): status["state"]
        for status in response.json()["model_version_status"]
    }


def test_latest_two_serves_the_two_newest(tmp_path, versions):
    with serve_config(
        tmp_path,
        f"""
        model_config_list {{ config {{ name: "model" base_path: "{versions}"
                                      model_version_policy {{ latest {{ num_versions: 2 }} }} }} }}
    """,
    ) as client:
        assert statuses(client) == {4: "AVAILABLE", 3: "AVAILABLE"}
        assert answer(client, "model") == 4
        assert answer(client, "model/versions/3") == 3
        assert answer(client, "model/versions/2") == (
            404,
            "Servable not found for request: Specific(model, 2)",
        )


def test_specific_versions_and_their_labels(tmp_path, versions):
    with serve_config(
        tmp_path,
        f"""
        model_config_list {{ config {{ name: "model" base_path: "{versions}"
                                      model_version_policy {{ specific {{ versions: 1 versions: 3 versions: 7 }} }}
                                      version_labels {{ key: "stable" value: 1 }}
                                      version_labels {{ key: "canary" value: 3 }}
                                      version_labels {{ key: "next" value: 7 }} }} }}
    """,
    ) as client:
        assert statuses(client) == {3: "AVAILABLE", 1: "AVAILABLE"}
        assert answer(client, "model") == 3
        assert answer(client, "model/versions/1") == 1
        assert answer(client, "model/labels/stable") == 1
        assert answer(client, "model/labels/canary") == 3
        metadata = client.get("/v1/models/model/labels/stable/metadata").json()
        assert metadata["model_spec"] == {"name": "model", "signature_name": "", "version": "1"}
        assert statuses(client, "model/labels/canary") == {3: "AVAILABLE"}
        # A label for a version that is not serving: TensorFlow Serving's 404.
        assert answer(client, "model/labels/next") == (
            404,
            "Servable not found for request: Specific(model, 7)",
        )
        # An unknown label: TensorFlow Serving's 400, whatever the route.
        unknown = "Unrecognized servable version label: nope"
        assert answer(client, "model/labels/nope") == (400, unknown)
        for path in ("/v1/models/model/labels/nope", "/v1/models/model/labels/nope/metadata"):
            response = client.get(path)
            assert (response.status_code, response.json()) == (400, {"error": unknown})


def test_all_serves_every_version(tmp_path, versions):
    with serve_config(
        tmp_path,
        f"""
        model_config_list {{ config {{ name: "model" base_path: "{versions}" model_version_policy {{ all {{ }} }} }} }}
    """,
    ) as client:
        assert statuses(client) == {4: "AVAILABLE", 3: "AVAILABLE", 2: "AVAILABLE", 1: "AVAILABLE"}
        assert [answer(client, f"model/versions/{version}") for version in (1, 2, 3, 4)] == [
            1,
            2,
            3,
            4,
        ]


def test_latest_two_swaps_one_at_a_time(tmp_path):
    base = str(tmp_path / "model")
    for version in (1, 2):
        write_version_model(base, version)
    with serve_config(
        tmp_path,
        f"""
        model_config_list {{ config {{ name: "model" base_path: "{base}"
                                      model_version_policy {{ latest {{ num_versions: 2 }} }} }} }}
    """,
    ) as client:
        model = client.app.state.repository.models["model"]
        write_version_model(base, 3)
        assert model.refresh() is True
        assert statuses(client) == {3: "AVAILABLE", 2: "AVAILABLE", 1: "END"}
        assert answer(client, "model") == 3 and answer(client, "model/versions/2") == 2


# The real server


def test_a_mistake_in_the_file_stops_the_server_with_its_line(tmp_path, folders):
    folder = folders["classifier"]
    path = write_config(
        tmp_path,
        f'model_config_list {{\n  config {{\n    name: "a"\n    bse_path: "{folder}"\n  }}\n}}\n',
    )
    result = serve_process("--model-config-file", path)
    assert result.returncode == 1
    assert f"error: {path}:4:" in result.stderr and "bse_path" in result.stderr
    assert "Traceback" not in result.stderr


def test_model_and_model_config_file_are_exclusive(tmp_path, folders):
    folder = folders["classifier"]
    path = write_config(
        tmp_path, f'model_config_list {{ config {{ name: "a" base_path: "{folder}" }} }}'
    )
    result = serve_refusal("--model", f"a={folder}", "--model-config-file", path)
    assert result.returncode == 2 and "not allowed with argument" in result.stderr


@pytest.mark.timeout(300)
def test_the_server_serves_a_model_config_file(tmp_path, versions, start_server):
    path = write_config(
        tmp_path,
        f"""
        model_config_list {{
          config {{
            name: "model"
            base_path: "{versions}"
            model_platform: "tensorflow"
            model_version_policy {{ specific {{ versions: 2 versions: 4 }} }}
            version_labels {{ key: "stable" value: 2 }}
          }}
        }}
    """,
    )
    server = start_server({}, "--model-config-file", path)
    import httpx

    with httpx.Client(base_url=server.url, timeout=30) as client:
        for route, version in (("model", 4), ("model/labels/stable", 2), ("model/versions/4", 4)):
            response = client.post(f"/v1/models/{route}:predict", json={"instances": ["a"]})
            assert response.status_code == 200 and response.json() == {"predictions": [version]}, (
                response.text
            )
        response = client.post("/v1/models/model/labels/beta:predict", json={"instances": ["a"]})
        assert response.status_code == 400
        assert response.json() == {"error": "Unrecognized servable version label: beta"}
    assert "Traceback" not in server.log()
