"""Token folders: a corpus split and tokenized ahead of time, readable without TensorFlow.

    keras-transformer tokenize classifier --data bbc --out tokens/bbc
    keras-transformer train-classifier --data tokens:tokens/bbc     # here, or where TensorFlow is not

Tokenizing needs tensorflow-text; a machine that has only JAX (or PyTorch)
trains from a folder written elsewhere. A token folder holds:

* `tokens.json`: `FORMAT`, `VERSION`, the task (`"classifier"` or
  `"translator"`), the data source it came from, the settings tokenization
  fixed (`settings`) with the record of those chosen from the data
  (`chosen_from_data`), and the counts training still chooses from;
* the vocabulary file(s), named as in a run folder; for a checkpoint's
  vocabulary (`keras-transformer tokenize classifier --pretrained PATH`), its casing rules
  (`tokenizer_config.json`) beside it, and the checkpoint and its sizes among
  the settings;
* one `SPLIT.npz` per split (`np.savez`, read with `allow_pickle=False`):
  classifier `token_ids` int32 [N, sequence_length] and `labels` int32 [N];
  translator `source_ids` int32 [N, sequence_length], `target_ids` int32
  [N, sequence_length + 1] (with [START] and [END]) and, for validation and
  test, the `sources` and `targets` texts (chrF and samples need references).

This module imports NumPy, json and `keras_transformer.data.checkpoint_files`
(a checkpoint's tokenizer files, read without TensorFlow) only.
"""

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import zipfile

import numpy as np

from keras_transformer.data.checkpoint_files import CASING_FILE, read_json, tokenizer_rules
from keras_transformer.data.errors import DataError

FORMAT = "keras_transformer.tokens"
VERSION = 1
TOKENS_FILE = "tokens.json"
SPLITS = ("train", "validation", "test")
TASKS = ("classifier", "translator")
CLASSIFIER_VOCABULARY = "vocabulary.txt"
SOURCE_VOCABULARY = "source_vocabulary.txt"
TARGET_VOCABULARY = "target_vocabulary.txt"
SHARED_VOCABULARY = "vocabulary.txt"

# The settings tokenization fixes, per task; training takes them from the folder.
CLASSIFIER_TOKEN_SETTINGS = (
    "vocabulary_size",
    "sequence_length",
    "max_length",
    "pooling",
    "ngram_length",
)
# The settings a pretrained checkpoint fixes: settings field -> its `config.json` key.
CHECKPOINT_SIZES = {
    "vocabulary_size": "vocab_size",
    "num_layers": "num_hidden_layers",
    "d_model": "hidden_size",
    "num_heads": "num_attention_heads",
    "intermediate_dim": "intermediate_size",
}
TRANSLATOR_TOKEN_SETTINGS = (
    "vocabulary_size",
    "target_vocabulary_size",
    "sequence_length",
    "max_length",
    "shared_vocabulary",
)


@dataclasses.dataclass(frozen=True, eq=False)
class ClassificationTokens:
    """One split of a tokenized classification corpus."""

    token_ids: np.ndarray  # int32 [N, sequence_length]
    labels: np.ndarray  # int32 [N]

    def __len__(self):
        return len(self.labels)


@dataclasses.dataclass(frozen=True, eq=False)
class TranslationTokens:
    """One split of tokenized sentence pairs; `sources`/`targets` (lists of
    str) only where the texts are kept (validation and test)."""

    source_ids: np.ndarray  # int32 [N, sequence_length]
    target_ids: np.ndarray  # int32 [N, sequence_length + 1], [START] ... [END]
    sources: list = None
    targets: list = None

    def __len__(self):
        return len(self.source_ids)


@dataclasses.dataclass(eq=False)
class TokenizedClassificationData:
    """A classification corpus tokenized for training (`train_classifier` takes it).

    Attributes:
        name: the data as the run records it (`"bbc"`, `"tokens:DIR"`).
        source_name: the data source that was tokenized.
        settings: the `CLASSIFIER_TOKEN_SETTINGS` values tokenization used.
        chosen_from_data: `{name: {"value", "reason"}}` of those chosen from the data.
        vocabulary_files: `{file name in a run folder: path}`.
        class_names, train, validation, test: as in `ClassificationData`,
            splits of `ClassificationTokens`.
    """

    TASK = "classifier"

    name: str
    source_name: str
    settings: dict
    chosen_from_data: dict
    vocabulary_files: dict
    class_names: list
    train: ClassificationTokens
    validation: ClassificationTokens
    test: ClassificationTokens


@dataclasses.dataclass(eq=False)
class TokenizedTranslationData:
    """Sentence pairs tokenized for training (`train_translator` takes them).

    Attributes as `TokenizedClassificationData`'s (`TRANSLATOR_TOKEN_SETTINGS`,
    splits of `TranslationTokens`), plus the languages and
    `train_target_words`, the count the translator's size tier is chosen by.
    """

    TASK = "translator"

    name: str
    source_name: str
    settings: dict
    chosen_from_data: dict
    vocabulary_files: dict
    source_language: str
    target_language: str
    train_target_words: int
    train: TranslationTokens
    validation: TranslationTokens
    test: TranslationTokens


def classifier_token_settings(pretrained):
    """The names of the settings a classifier's tokens fix: `CLASSIFIER_TOKEN_SETTINGS`, and
    for a checkpoint's vocabulary (`pretrained` not None) the checkpoint and its sizes."""
    if pretrained is None:
        return CLASSIFIER_TOKEN_SETTINGS
    sizes = [name for name in CHECKPOINT_SIZES if name not in CLASSIFIER_TOKEN_SETTINGS]
    return (*CLASSIFIER_TOKEN_SETTINGS, "pretrained", *sizes)


def classifier_tokenizer_files(pretrained):
    """The files of a classifier's tokenizer, named as in a run folder: the vocabulary, and
    for a checkpoint's (`pretrained` not None) its casing rules."""
    if pretrained is None:
        return (CLASSIFIER_VOCABULARY,)
    return (CLASSIFIER_VOCABULARY, CASING_FILE)


def classifier_input_length(settings):
    """How many tokens a classifier's texts are encoded to: its `sequence_length`,
    or its bag of n-grams' `ngram_length` where that is longer (a dict of
    `CLASSIFIER_TOKEN_SETTINGS` or a `ClassifierSettings`)."""
    values = settings if isinstance(settings, dict) else vars(settings)
    return max(values["sequence_length"], values.get("ngram_length") or 0)


class TokenSettingConflict(ValueError):
    """A setting that contradicts the settings a token folder was tokenized with.

    The message names the setting; `message(name_of)` names it as `name_of(setting)`
    does (the apps name their flags).
    """

    def __init__(self, setting, value, tokens_value, data_name):
        self.setting, self.value, self.tokens_value = setting, value, tokens_value
        self.data_name = data_name
        super().__init__(self.message())

    def message(self, name_of=lambda setting: setting):
        name = name_of(self.setting)
        if self.setting == "pooling":
            adds = "adds" if self.tokens_value == "cls" else "does not add"
            return (
                f"{name} {self.value} contradicts {self.data_name}: its tokens were made for "
                f"pooling {self.tokens_value}, which {adds} a [CLS] token. Leave {name} out, or "
                "tokenize again."
            )
        return (
            f"{name} {_shown(self.value)} contradicts {self.data_name}: its tokens were made with "
            f"{self.setting} {_shown(self.tokens_value)}. Leave {name} out, or tokenize again."
        )


class TokenCheckpointConflict(TokenSettingConflict):
    """A checkpoint to fine-tune (`pretrained`) that the tokens of a folder were not made
    for: tokens of our own vocabulary, of a checkpoint's without one to fine-tune, or of
    another checkpoint's vocabulary, casing or sizes."""

    def __init__(self, data_name, template):
        # `{flag}` in `template` is where the setting is named.
        self.template = template
        super().__init__("pretrained", None, None, data_name)

    def message(self, name_of=lambda setting: setting):
        return self.template.replace("{flag}", name_of(self.setting))


def check_checkpoint_tokens(tokenized, pretrained):
    """Raises unless `tokenized` holds tokens for the checkpoint folder `pretrained`
    (None: of our own vocabulary): the same vocabulary and casing rules, as
    `PretrainedTokenizer.from_pretrained` reads them, and the same sizes. The
    folder's path may differ (tokens written on one machine, fine-tuned on
    another).

    Raises:
        TokenCheckpointConflict: naming the folder and what differs.
    """
    tokenized_for = tokenized.settings.get("pretrained")
    name = tokenized.name
    if tokenized_for is None and pretrained is None:
        return
    if tokenized_for is None:
        raise TokenCheckpointConflict(
            name,
            f"{name} holds tokens of our own vocabulary, and {{flag}} {pretrained} fine-tunes "
            "a checkpoint that reads its own: tokenize for it (keras-transformer tokenize "
            f"classifier --pretrained {pretrained}), or leave {{flag}} out.",
        )
    if pretrained is None:
        raise TokenCheckpointConflict(
            name,
            f"{name} holds tokens of the checkpoint {tokenized_for}'s vocabulary: give "
            "{flag} with that checkpoint's folder to fine-tune it, or tokenize without "
            "--pretrained to train a Transformer of our own.",
        )
    pretrained = os.fspath(pretrained)
    if not os.path.isdir(pretrained):
        raise TokenCheckpointConflict(
            name, f"{{flag}} {pretrained} is not a folder: give a Hugging Face checkpoint folder."
        )
    folder = os.path.dirname(tokenized.vocabulary_files[CLASSIFIER_VOCABULARY])
    tokens, casing = tokenizer_rules(folder, CLASSIFIER_VOCABULARY)
    checkpoint_tokens, checkpoint_casing = tokenizer_rules(pretrained)
    again = f"tokenize again with --pretrained {pretrained}"
    if tokens != checkpoint_tokens:
        first = next(
            (
                index
                for index, pair in enumerate(zip(tokens, checkpoint_tokens))
                if len(set(pair)) > 1
            ),
            min(len(tokens), len(checkpoint_tokens)),
        )
        shown = [repr(t[first]) if first < len(t) else "none" for t in (tokens, checkpoint_tokens)]
        raise TokenCheckpointConflict(
            name,
            f"{name} holds tokens of the vocabulary of {tokenized_for} ({len(tokens)} tokens), "
            f"and {{flag}} {pretrained} has another ({len(checkpoint_tokens)} tokens; id {first} "
            f"is {shown[0]} in the folder, {shown[1]} in the checkpoint): {again}.",
        )
    if casing != checkpoint_casing:
        raise TokenCheckpointConflict(
            name,
            f"{name} was tokenized with the casing rules {casing} of {tokenized_for}, and "
            f"{{flag}} {pretrained} has {checkpoint_casing}: {again}.",
        )
    config = read_json(os.path.join(pretrained, "config.json")) or {}
    for setting, key in CHECKPOINT_SIZES.items():
        if tokenized.settings[setting] != config.get(key):
            raise TokenCheckpointConflict(
                name,
                f"{name} was tokenized for a checkpoint with {key} {tokenized.settings[setting]} "
                f"({tokenized_for}), and {{flag}} {pretrained} has {config.get(key)}: {again}.",
            )
    positions = config.get("max_position_embeddings", 512)
    if tokenized.settings["max_length"] > positions:
        raise TokenCheckpointConflict(
            name,
            f"{name} holds texts of up to {tokenized.settings['max_length']} tokens, more than "
            f"the {positions} positions of {{flag}} {pretrained}: {again}.",
        )


def settings_from_tokens(settings, tokenized, given=None):
    """`settings` with the values tokenization fixed taken from `tokenized`.

    A value the caller set that contradicts the tokens is an error. The
    caller set a field when it is in `given` (the names of the settings
    given) or, without `given`, when it is neither None nor the settings'
    default. Pooling contradicts only when one side adds [CLS] and the
    other does not; without `given`, a pooling the tokens allow is kept.
    Tokens of a checkpoint's vocabulary start with [CLS] whatever the pooling
    (any pooling is the run's to choose), and are for that checkpoint alone:
    `settings.pretrained` must name it (`check_checkpoint_tokens`).

    Raises:
        TokenSettingConflict: naming the setting, its value and the folder's.
    """
    check_checkpoint_tokens(tokenized, getattr(settings, "pretrained", None))
    for_checkpoint = tokenized.settings.get("pretrained") is not None
    defaults = type(settings)()
    fixed = {}
    for name, value in tokenized.settings.items():
        if name == "pretrained" or (name == "pooling" and for_checkpoint):
            continue  # the run's own checkpoint folder, checked above; its own pooling
        current = getattr(settings, name)
        was_set = (
            name in given
            if given is not None
            else current is not None and current != getattr(defaults, name)
        )
        if name == "pooling":
            agrees = (current == "cls") == (value == "cls")
            if was_set and not agrees:
                raise TokenSettingConflict(name, current, value, tokenized.name)
            # Unless given, the folder's; a caller without `given` keeps any pooling the
            # tokens allow.
            if not agrees or (given is not None and not was_set):
                fixed[name] = value
            continue
        if was_set and current != value:
            raise TokenSettingConflict(name, current, value, tokenized.name)
        fixed[name] = value
    return dataclasses.replace(settings, **fixed)


def _shown(value):
    """A setting's value as tokens.json shows it (true, not True)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


# --- writing ------------------------------------------------------------------------


@contextlib.contextmanager
def token_folder_writer(out_dir):
    """Yields an empty temporary folder next to `out_dir`; when the block ends
    without an error, it becomes `out_dir` (an earlier token folder there is
    replaced); after an error it is removed and `out_dir` is untouched.

    Raises:
        DataError: `out_dir` is a file, or a non-empty folder that is not a
            token folder (before the block runs).
    """
    out_dir = os.path.abspath(os.path.expanduser(os.fspath(out_dir)))
    _check_replaceable(out_dir)
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    temporary = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.writing-", dir=parent)
    try:
        # mkdtemp makes a private folder; the token folder gets a plain one's permissions.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o777 & ~umask)
        yield temporary
        _check_replaceable(out_dir)
        if os.path.isdir(out_dir):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.old-", dir=parent)
            os.rename(out_dir, os.path.join(old, "replaced"))
            os.rename(temporary, out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(temporary, out_dir)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def _check_replaceable(out_dir):
    if os.path.isfile(out_dir):
        raise DataError(f"{out_dir} is a file; a token folder is a folder.")
    if (
        os.path.isdir(out_dir)
        and os.listdir(out_dir)
        and not os.path.isfile(os.path.join(out_dir, TOKENS_FILE))
    ):
        raise DataError(
            f"{out_dir} is not empty and not a token folder (no {TOKENS_FILE}): refusing to "
            "overwrite it. Give an empty or new folder."
        )


def save_tokenized(tokenized, folder):
    """Writes `tokenized` into `folder` (from `token_folder_writer`): its
    vocabulary files (copied unless already there), one `.npz` per split and
    `tokens.json`, last."""
    copy_vocabularies(tokenized, folder)
    for split in SPLITS:
        arrays = dataclasses.asdict(getattr(tokenized, split))
        np.savez(
            os.path.join(folder, f"{split}.npz"),
            **{key: np.asarray(value) for key, value in arrays.items() if value is not None},
        )
    description = {
        "format": FORMAT,
        "version": VERSION,
        "task": tokenized.TASK,
        "data": tokenized.source_name,
        "settings": tokenized.settings,
        "chosen_from_data": tokenized.chosen_from_data,
        "vocabularies": sorted(tokenized.vocabulary_files),
        "examples": {split: len(getattr(tokenized, split)) for split in SPLITS},
    }
    if tokenized.TASK == "classifier":
        description["class_names"] = list(tokenized.class_names)
    else:
        description.update(
            source_language=tokenized.source_language,
            target_language=tokenized.target_language,
            train_target_words=tokenized.train_target_words,
        )
    with open(os.path.join(folder, TOKENS_FILE), "w", encoding="utf-8") as tokens_file:
        json.dump(description, tokens_file, indent=2, ensure_ascii=False)


def copy_vocabularies(tokenized, folder):
    """Copies the vocabulary files of `tokenized` into `folder` (a run folder
    or a token folder), under the names a run folder gives them."""
    for file_name, path in tokenized.vocabulary_files.items():
        destination = os.path.join(folder, file_name)
        if os.path.abspath(path) != os.path.abspath(destination):
            shutil.copyfile(path, destination)


def folder_size(folder):
    """Bytes in the files of `folder` (not recursive)."""
    return sum(entry.stat().st_size for entry in os.scandir(folder) if entry.is_file())


# --- reading ------------------------------------------------------------------------


def read_token_folder(path, task, name=None):
    """Reads and checks a token folder written by `keras-transformer tokenize`.

    Args:
        path: the folder.
        task: `"classifier"` or `"translator"`, what the caller trains.
        name: the data's name for the run (default `"tokens:PATH"`).

    Returns:
        `TokenizedClassificationData` or `TokenizedTranslationData`.

    Raises:
        DataError: naming the file and what is wrong with it.
    """
    folder = os.path.expanduser(os.fspath(path))
    name = name or f"tokens:{path}"
    if not os.path.isdir(folder):
        raise DataError(
            f"No such token folder: {folder}"
            if not os.path.exists(folder)
            else f"{folder} is not a folder; tokens:DIR needs a folder from "
            "keras-transformer tokenize."
        )
    description = _read_description(folder)
    if description["task"] != task:
        raise DataError(
            f"{folder} holds tokens for the {description['task']}, not the {task}: "
            f"tokenize with `keras-transformer tokenize {task}`."
        )
    settings = description["settings"]
    pretrained = settings.get("pretrained") if isinstance(settings, dict) else None
    expected_settings = (
        classifier_token_settings(pretrained) if task == "classifier" else TRANSLATOR_TOKEN_SETTINGS
    )
    _require(
        isinstance(settings, dict) and set(settings) == set(expected_settings),
        folder,
        TOKENS_FILE,
        f"its settings must name exactly {', '.join(expected_settings)}",
    )
    ngram_length = settings.get("ngram_length")
    _require(
        ngram_length is None or (isinstance(ngram_length, int) and ngram_length > 0),
        folder,
        TOKENS_FILE,
        f"ngram_length must be a positive integer or null, got {ngram_length!r}",
    )
    _require(
        pretrained is None or (isinstance(pretrained, str) and pretrained),
        folder,
        TOKENS_FILE,
        f"pretrained must be a checkpoint folder's path or absent, got {pretrained!r}",
    )
    sequence_length = settings["sequence_length"]
    _require(
        isinstance(sequence_length, int) and sequence_length > 0,
        folder,
        TOKENS_FILE,
        f"sequence_length must be a positive integer, got {sequence_length!r}",
    )
    if task == "classifier":
        return _read_classification(folder, name, description)
    return _read_translation(folder, name, description)


def _require(condition, folder, file_name, what):
    if not condition:
        raise DataError(f"{os.path.join(folder, file_name)}: {what}.")


def _read_description(folder):
    path = os.path.join(folder, TOKENS_FILE)
    if not os.path.isfile(path):
        raise DataError(
            f"{folder} is not a token folder: it has no {TOKENS_FILE} (write one with "
            "keras-transformer tokenize)."
        )
    try:
        with open(path, encoding="utf-8") as tokens_file:
            description = json.load(tokens_file)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DataError(f"{path} cannot be read as JSON: {error}") from error
    _require(
        isinstance(description, dict) and description.get("format") == FORMAT,
        folder,
        TOKENS_FILE,
        f"not a token folder description (format is not {FORMAT!r})",
    )
    _require(
        description.get("version") == VERSION,
        folder,
        TOKENS_FILE,
        f"format version {description.get('version')!r}, but this version of "
        f"keras_transformer reads version {VERSION}: tokenize again",
    )
    _require(
        description.get("task") in TASKS,
        folder,
        TOKENS_FILE,
        f"task must be one of {', '.join(TASKS)}, got {description.get('task')!r}",
    )
    for key in ("data", "settings", "chosen_from_data"):
        _require(key in description, folder, TOKENS_FILE, f"{key!r} is missing")
    return description


def _vocabulary_size(folder, file_name):
    path = os.path.join(folder, file_name)
    if not os.path.isfile(path):
        raise DataError(f"{path} is missing: a token folder keeps its vocabulary.")
    try:
        with open(path, encoding="utf-8") as vocabulary_file:
            return sum(1 for _ in vocabulary_file)
    except (OSError, UnicodeDecodeError) as error:
        raise DataError(f"{path} cannot be read as UTF-8 text: {error}") from error


def _read_split(folder, split, columns):
    """`{column: array}` of `SPLIT.npz`; `columns` maps a name to (dtype kind, ndim, required)."""
    file_name = f"{split}.npz"
    path = os.path.join(folder, file_name)
    if not os.path.isfile(path):
        raise DataError(
            f"{path} is missing: a token folder has {', '.join(s + '.npz' for s in SPLITS)}."
        )
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
        raise DataError(f"{path} cannot be read as NumPy arrays: {error}") from error
    found = {}
    for column, (dtype, ndim, required) in columns.items():
        if column not in arrays:
            _require(
                not required,
                folder,
                file_name,
                f"the array {column!r} is missing (it has {', '.join(sorted(arrays)) or 'none'})",
            )
            continue
        array = arrays[column]
        kind_ok = array.dtype == np.int32 if dtype == "int32" else array.dtype.kind == "U"
        _require(
            kind_ok,
            folder,
            file_name,
            f"{column} must be {'int32' if dtype == 'int32' else 'unicode text'}, "
            f"got {array.dtype}",
        )
        _require(
            array.ndim == ndim,
            folder,
            file_name,
            f"{column} must have {ndim} dimension(s), got shape {array.shape}",
        )
        found[column] = array
    lengths = {column: len(array) for column, array in found.items()}
    _require(
        len(set(lengths.values())) <= 1,
        folder,
        file_name,
        f"its arrays disagree on the number of examples: {lengths}",
    )
    return found


def _check_ids(folder, split, column, ids, width, vocabulary_size, vocabulary_file):
    file_name = f"{split}.npz"
    _require(
        ids.shape[1] == width,
        folder,
        file_name,
        f"{column} has {ids.shape[1]} columns, but tokens.json's settings make {width}",
    )
    if ids.size:
        _require(
            ids.min() >= 0 and ids.max() < vocabulary_size,
            folder,
            file_name,
            f"{column} holds ids outside [0, {vocabulary_size}), the size of {vocabulary_file} "
            f"(found {ids.min()}..{ids.max()})",
        )


def _read_classification(folder, name, description):
    settings = description["settings"]
    class_names = description.get("class_names")
    _require(
        isinstance(class_names, list) and len(class_names) >= 2,
        folder,
        TOKENS_FILE,
        "class_names must list at least two classes",
    )
    vocabulary_size = _vocabulary_size(folder, CLASSIFIER_VOCABULARY)
    files = classifier_tokenizer_files(settings.get("pretrained"))
    for file_name in files:
        if not os.path.isfile(os.path.join(folder, file_name)):
            raise DataError(
                f"{os.path.join(folder, file_name)} is missing: a token folder keeps its "
                "tokenizer's files."
            )
    splits = {}
    for split in SPLITS:
        arrays = _read_split(
            folder, split, {"token_ids": ("int32", 2, True), "labels": ("int32", 1, True)}
        )
        _check_ids(
            folder,
            split,
            "token_ids",
            arrays["token_ids"],
            classifier_input_length(settings),
            vocabulary_size,
            CLASSIFIER_VOCABULARY,
        )
        labels = arrays["labels"]
        _require(
            not labels.size or (labels.min() >= 0 and labels.max() < len(class_names)),
            folder,
            f"{split}.npz",
            f"labels must index the {len(class_names)} class_names",
        )
        splits[split] = ClassificationTokens(**arrays)
    _require(len(splits["train"]) > 0, folder, "train.npz", "no training examples")
    return TokenizedClassificationData(
        name=name,
        source_name=description["data"],
        settings=settings,
        chosen_from_data=description["chosen_from_data"],
        vocabulary_files={file_name: os.path.join(folder, file_name) for file_name in files},
        class_names=class_names,
        **splits,
    )


def _read_translation(folder, name, description):
    settings = description["settings"]
    for key in ("source_language", "target_language", "train_target_words"):
        _require(key in description, folder, TOKENS_FILE, f"{key!r} is missing")
    if settings["shared_vocabulary"]:
        files = {SHARED_VOCABULARY: SHARED_VOCABULARY}
        source_file = target_file = SHARED_VOCABULARY
    else:
        source_file, target_file = SOURCE_VOCABULARY, TARGET_VOCABULARY
        files = {source_file: source_file, target_file: target_file}
    source_size = _vocabulary_size(folder, source_file)
    target_size = _vocabulary_size(folder, target_file)
    length = settings["sequence_length"]
    splits = {}
    for split in SPLITS:
        texts_required = split != "train"
        arrays = _read_split(
            folder,
            split,
            {
                "source_ids": ("int32", 2, True),
                "target_ids": ("int32", 2, True),
                "sources": ("text", 1, texts_required),
                "targets": ("text", 1, texts_required),
            },
        )
        _check_ids(
            folder, split, "source_ids", arrays["source_ids"], length, source_size, source_file
        )
        _check_ids(
            folder, split, "target_ids", arrays["target_ids"], length + 1, target_size, target_file
        )
        texts = {key: arrays[key].tolist() for key in ("sources", "targets") if key in arrays}
        splits[split] = TranslationTokens(arrays["source_ids"], arrays["target_ids"], **texts)
    _require(len(splits["train"]) > 0, folder, "train.npz", "no training pairs")
    return TokenizedTranslationData(
        name=name,
        source_name=description["data"],
        settings=settings,
        chosen_from_data=description["chosen_from_data"],
        vocabulary_files={file_name: os.path.join(folder, file_name) for file_name in files},
        source_language=description["source_language"],
        target_language=description["target_language"],
        train_target_words=description["train_target_words"],
        **splits,
    )
