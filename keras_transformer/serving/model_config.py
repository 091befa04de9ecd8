"""What the server is told to serve: each model's name, base path, version
policy, version labels and public signatures.

`read_model_config_file` reads TensorFlow Serving's `--model_config_file`
(a `ModelServerConfig` in protobuf text format, parsed with the protos of the
`tensorflow-serving-api` package), so an operator can reuse the file they
already have:

    model_config_list {
      config {
        name: "translator"
        base_path: "/models/translator"
        model_platform: "tensorflow"
        model_version_policy { specific { versions: 1 versions: 2 } }
        version_labels { key: "stable" value: 1 }
        version_labels { key: "canary" value: 2 }
      }
    }

Every error in the file names the file and the line. The same reader
(`server_config_models`) turns the `ModelServerConfig` of a gRPC
`HandleReloadConfigRequest` into `ModelConfig`s.
"""

import dataclasses
import logging
import os

from keras_transformer.serving.service import DEFAULT_SIGNATURE

logger = logging.getLogger("keras_transformer.serving")

MODEL_NAME_CHARACTERS = "letters, digits, '-', '_' and '.'"


class ModelConfigError(ValueError):
    """A model configuration that cannot be served; the message names what and where.

    Args:
        message: what is wrong, and where.
        code: TensorFlow Serving's status code for it (a `grpc.StatusCode`
            name), which `HandleReloadConfigRequest` answers with.
    """

    def __init__(self, message, code="INVALID_ARGUMENT"):
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(frozen=True)
class VersionPolicy:
    """Which version folders serve, as TensorFlow Serving's `model_version_policy`:
    the `num_versions` newest (`latest`, the default), the listed `versions`
    (`specific`), or every one (`all`)."""

    kind: str = "latest"
    num_versions: int = 1
    versions: frozenset = frozenset()

    def candidates(self, versions):
        """Of the versions on disk, those this policy may serve, newest first."""
        if self.kind == "specific":
            versions = [version for version in versions if version in self.versions]
        return sorted(versions, reverse=True)

    def limit(self):
        """How many of the candidates serve at once (None: all)."""
        return self.num_versions if self.kind == "latest" else None

    def __str__(self):
        if self.kind == "latest":
            return f"latest {self.num_versions}"
        if self.kind == "specific":
            return f"specific {sorted(self.versions)}"
        return "all"


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """One served model.

    Args:
        name: the model's name in URLs.
        base_path: the folder holding its numbered version folders.
        version_policy: which versions serve.
        version_labels: {label: version}, for `/labels/LABEL` URLs.
        signatures: signatures served beside `serving_default`; an export's
            others (such as `attention`) are hidden from every API. One an
            export lacks is logged when its version loads.
        optional_signatures: signatures served as `signatures` are, where an
            export has them, and not logged where it has not (the explorer's
            `translate`, which only translators have).
    """

    name: str
    base_path: str
    version_policy: VersionPolicy = VersionPolicy()
    version_labels: dict = dataclasses.field(default_factory=dict)
    signatures: tuple = ()
    optional_signatures: tuple = ()

    def public_signatures(self):
        return frozenset((DEFAULT_SIGNATURE, *self.signatures, *self.optional_signatures))


def model_configs(base_paths, signatures=()):
    """{name: base path} -> `ModelConfig`s serving each model's newest version
    and `signatures` beside `serving_default`."""
    return [
        ModelConfig(name, path, signatures=tuple(signatures)) for name, path in base_paths.items()
    ]


def check_model_name(name):
    """The reason `name` cannot name a model in URLs, or None if it can."""
    if not name:
        return "a model name may not be empty"
    if not all(character.isalnum() or character in "-_." for character in name):
        return f"model name {name!r} may only hold {MODEL_NAME_CHARACTERS}"
    return None


def with_signatures(configs, names):
    """`configs` with the signatures `names` public: each is `SIGNATURE` (every
    model) or `MODEL:SIGNATURE` (that model). Raises ModelConfigError for an
    empty name or an unknown model."""
    added = {config.name: [] for config in configs}
    for item in names:
        model, separator, signature = item.rpartition(":")
        if not signature or (separator and not model):
            raise ModelConfigError(
                f"--signatures: expected SIGNATURE or MODEL:SIGNATURE, got {item!r}"
            )
        if separator and model not in added:
            raise ModelConfigError(
                f"--signatures {item!r}: no model is named {model!r}; "
                f"the models are {sorted(added)}"
            )
        for name in [model] if separator else added:
            added[name].append(signature)
    return [
        dataclasses.replace(
            config, signatures=tuple(dict.fromkeys((*config.signatures, *added[config.name])))
        )
        for config in configs
    ]


def read_model_config_file(path):
    """The models listed in TensorFlow Serving's model config file at `path`
    (a `model_config_list`). Raises ModelConfigError naming the file and line."""
    try:
        with open(path, encoding="utf-8") as config_file:
            text = config_file.read()
    except (OSError, UnicodeDecodeError) as error:
        raise ModelConfigError(f"{path}: cannot read the model config file: {error}") from None
    return parse_model_config(text, path)


def parse_model_config(text, path):
    """The models of `text`, a `ModelServerConfig` in protobuf text format read
    from the file `path`. Raises ModelConfigError naming the file and line."""
    from tensorflow_serving.config import model_server_config_pb2

    message = model_server_config_pb2.ModelServerConfig()
    parse_text_message(text, message, path, ModelConfigError)
    return server_config_models(message, path, _entry_lines(text))


def parse_text_message(text, message, path, error_class):
    """Fills the protobuf `message` from `text` (protobuf's text format), read from the file
    `path`. Raises `error_class` naming the file, line and column of a mistake."""
    from google.protobuf import text_format

    try:
        text_format.Parse(text, message)
    except text_format.ParseError as error:
        # The message starts "LINE:COLUMN : "; the location is put first, as compilers do.
        reason = str(error)
        if error.GetLine() is not None:
            reason = reason.partition(" : ")[2] or reason
            raise error_class(f"{path}:{error.GetLine()}:{error.GetColumn()}: {reason}") from None
        raise error_class(f"{path}: {reason}") from None


def server_config_models(message, source, entry_lines=None):
    """The `ModelConfig`s of a `ModelServerConfig` proto: the one reader of both
    a model config file and a `ReloadConfigRequest`'s `config`.

    Args:
        message: a `tensorflow_serving.config.ModelServerConfig`.
        source: what the message came from, first in every error message
            (the file's path, or "ReloadConfigRequest").
        entry_lines: the line where each `config` entry starts in the file,
            to name it by; entries are named by their rank otherwise.

    Raises ModelConfigError (code INVALID_ARGUMENT) for a config that cannot
    be served: custom_model_config, no models, a model listed twice, or a
    mistake in one entry.
    """
    if message.WhichOneof("config") == "custom_model_config":
        raise ModelConfigError(
            f"{source}: custom_model_config is not supported; list the models in "
            "model_config_list { config { name: ... base_path: ... } }"
        )
    entries = message.model_config_list.config
    if not entries:
        # An empty file too, as one being rewritten in place may be for a moment:
        # TensorFlow Serving takes no action for an unset config.
        raise ModelConfigError(
            f"{source}: no models; expected model_config_list "
            '{ config { name: "NAME" base_path: "/PATH" } }'
        )
    lines = list(entry_lines or ())
    if len(lines) != len(entries):  # a layout the scan does not follow: name the entry by its rank
        lines = [None] * len(entries)
    configs, first_places = [], {}
    for index, (entry, line) in enumerate(zip(entries, lines)):
        place = f"line {line}" if line is not None else f"config #{index + 1}"
        where = f"{source}:{line}" if line is not None else f"{source}: config #{index + 1}"
        config = _model_config(entry, where)
        if config.name in first_places:
            raise ModelConfigError(
                f"{where}: model {config.name!r} is listed twice "
                f"(first at {first_places[config.name]})"
            )
        first_places[config.name] = place
        configs.append(config)
    return configs


def _model_config(entry, where):
    from tensorflow_serving.config import model_server_config_pb2

    reason = check_model_name(entry.name)
    if reason:
        raise ModelConfigError(f"{where}: {reason}")
    name = entry.name
    if not entry.base_path:
        raise ModelConfigError(f"{where}: model {name!r} has no base_path")
    if not os.path.isdir(entry.base_path):
        raise ModelConfigError(
            f"{where}: model {name!r}: no folder at base_path {entry.base_path!r}"
        )
    if entry.model_platform not in ("", "tensorflow"):
        raise ModelConfigError(
            f"{where}: model {name!r}: model_platform {entry.model_platform!r} is not "
            'served here; only "tensorflow" is'
        )
    if entry.model_type not in (
        model_server_config_pb2.MODEL_TYPE_UNSPECIFIED,
        model_server_config_pb2.TENSORFLOW,
    ):
        raise ModelConfigError(
            f"{where}: model {name!r}: only model_type TENSORFLOW is served here"
        )
    if entry.HasField("logging_config"):
        logger.warning("%s: model %r: logging_config is not supported here; ignored", where, name)
    policy = _version_policy(entry.model_version_policy, name, where)
    labels = dict(entry.version_labels)
    for label, version in sorted(labels.items()):
        if not label or "/" in label or ":" in label:
            raise ModelConfigError(
                f"{where}: model {name!r}: version label {label!r} must be non-empty "
                "and hold no '/' or ':'"
            )
        if version < 1:
            raise ModelConfigError(
                f"{where}: model {name!r}: version label {label!r} names version {version}; "
                "versions are positive"
            )
        if policy.kind == "specific" and version not in policy.versions:
            # TensorFlow Serving refuses a label for a version that does not serve.
            raise ModelConfigError(
                f"{where}: model {name!r}: version label {label!r} names version {version}, "
                f"which its policy ({policy}) never serves"
            )
    return ModelConfig(name, entry.base_path, policy, labels)


def _version_policy(proto, name, where):
    choice = proto.WhichOneof("policy_choice")
    if choice in (None, "latest"):
        # As TensorFlow Serving: an unset or zero num_versions means 1.
        return VersionPolicy("latest", num_versions=max(proto.latest.num_versions, 1))
    if choice == "all":
        return VersionPolicy("all")
    if choice == "specific":
        versions = frozenset(proto.specific.versions)
        if not versions:
            raise ModelConfigError(
                f"{where}: model {name!r}: model_version_policy specific lists no versions"
            )
        if min(versions) < 1:
            raise ModelConfigError(
                f"{where}: model {name!r}: model_version_policy specific lists version "
                f"{min(versions)}; versions are positive"
            )
        return VersionPolicy("specific", versions=versions)
    raise ModelConfigError(
        f"{where}: model {name!r}: model_version_policy {choice} is not supported here; "
        "use latest, specific or all"
    )


def _entry_lines(text):
    """The line where each `config` entry of the `model_config_list` opens:
    every message opened at depth 1 of the text format (strings and
    comments skipped), whichever of its syntaxes (`config {`, `config: <`,
    `config [{...}, {...}]`) the file uses."""
    lines, depth, line, index = [], 0, 1, 0
    while index < len(text):
        character = text[index]
        if character == "\n":
            line += 1
        elif character == "#":
            end = text.find("\n", index)
            index = len(text) if end < 0 else end
            continue
        elif character in "\"'":
            index += 1
            while index < len(text) and text[index] not in (character, "\n"):
                index += 2 if text[index] == "\\" else 1
            if index < len(text) and text[index] == "\n":  # an unclosed string: count its line end
                continue
        elif character in "{<":
            depth += 1
            if depth == 2:
                lines.append(line)
        elif character in "}>":
            depth -= 1
        index += 1
    return lines
