"""A BERT-family checkpoint's tokenizer files, read without TensorFlow.

`PretrainedTokenizer` builds its ops from what these functions read; a token
folder written for a checkpoint is checked against the checkpoint with them
where only JAX (or PyTorch) is installed.
"""

import json
import os

VOCABULARY_NAME = "vocab.txt"  # a Hugging Face checkpoint's
FAST_TOKENIZER_FILE = "tokenizer.json"
CASING_FILE = "tokenizer_config.json"  # where Hugging Face keeps do_lower_case, strip_accents


def read_json(path):
    """The JSON file at `path`, or None where there is none."""
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as json_file:
        try:
            return json.load(json_file)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not JSON: {error}.") from error


def accents_stripped(lower_case, strip_accents):
    """Whether accents are stripped: `strip_accents`, where None follows `lower_case`, as in
    Hugging Face's tokenizers."""
    return lower_case if strip_accents is None else strip_accents


def casing_rules(path, fast):
    """`lower_case` and `strip_accents` of a checkpoint folder's tokenizer files
    (`fast`: its `tokenizer.json` read, or None)."""
    normalizer = (fast or {}).get("normalizer") or {}
    if normalizer:
        if normalizer.get("type") != "BertNormalizer":
            raise ValueError(
                f"{os.path.join(path, FAST_TOKENIZER_FILE)}: normalizer "
                f"{normalizer.get('type')!r} is not supported; supported: BertNormalizer."
            )
        rules = {
            "lower_case": normalizer.get("lowercase", True),
            "strip_accents": normalizer.get("strip_accents"),
            "tokenize_chinese_chars": normalizer.get("handle_chinese_chars", True),
        }
        where = FAST_TOKENIZER_FILE
    else:
        config = read_json(os.path.join(path, CASING_FILE)) or {}
        rules = {
            "lower_case": config.get("do_lower_case", True),
            "strip_accents": config.get("strip_accents"),
            "tokenize_chinese_chars": config.get("tokenize_chinese_chars", True),
        }
        where = CASING_FILE
    if not rules.pop("tokenize_chinese_chars"):
        raise ValueError(
            f"{os.path.join(path, where)}: only tokenizers that split CJK characters "
            "(tokenize_chinese_chars / handle_chinese_chars true) are supported."
        )
    return rules


def fast_vocabulary(fast, source):
    """The WordPiece vocabulary of a `tokenizer.json` (`fast`, read from `source`), in id order."""
    model = fast.get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise ValueError(
            f"{source}: model {model.get('type')!r} is not supported; supported: WordPiece."
        )
    by_id = sorted(model["vocab"].items(), key=lambda item: item[1])
    if [index for _, index in by_id] != list(range(len(by_id))):
        raise ValueError(f"{source}: the vocabulary's ids are not 0..{len(by_id) - 1}.")
    return [token for token, _ in by_id]


def read_vocabulary_lines(path):
    """The tokens of a vocabulary file, one a line, in id order."""
    with open(path, encoding="utf-8") as vocabulary_file:
        return [line.rstrip("\n") for line in vocabulary_file]


def tokenizer_rules(path, vocabulary_name=VOCABULARY_NAME):
    """What decides a checkpoint folder's token ids (or a folder `PretrainedTokenizer.save`
    wrote): `(its vocabulary's tokens, {"lower_case", "strip_accents"})`, read as
    `PretrainedTokenizer.from_pretrained` reads them, `strip_accents` resolved."""
    fast = read_json(os.path.join(path, FAST_TOKENIZER_FILE))
    rules = casing_rules(path, fast)
    rules["strip_accents"] = accents_stripped(rules["lower_case"], rules["strip_accents"])
    vocabulary_path = os.path.join(path, vocabulary_name)
    if os.path.isfile(vocabulary_path):
        return read_vocabulary_lines(vocabulary_path), rules
    if fast is None:
        raise ValueError(
            f"{path} has neither {vocabulary_name} nor {FAST_TOKENIZER_FILE}: a BERT-family "
            "checkpoint's tokenizer needs one of them."
        )
    return fast_vocabulary(fast, os.path.join(path, FAST_TOKENIZER_FILE)), rules
