"""The docs cannot drift from the code: links resolve, app flags and make targets exist.

Checked in README.md, docs/*.md, benchmarks/*.md and exported_models/README.md:

* every relative link `[text](path#anchor)` names an existing file, and its
  anchor a heading of that file (GitHub's slugs);
* every `python -m apps.X ... --flag` written in a code block or inline code
  names an app with a `build_parser()` that accepts that flag;
* every `make TARGET` written in code names a target of the Makefile.
"""

import argparse
import collections
import importlib
import re
import shlex
from pathlib import Path

import pytest

from keras_transformer.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted(
    [ROOT / "README.md", ROOT / "exported_models" / "README.md"]
    + list((ROOT / "docs").glob("*.md"))
    + list((ROOT / "benchmarks").glob("*.md"))
)

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
# `python -m apps.X` (a clone) or `keras-transformer X` (the installed command, `-` for `_`).
COMMAND_MODULES = {module for module, _ in COMMANDS.values()}
APP_COMMAND = re.compile(r"(?:-m\s+apps\.|keras-transformer\s+)([A-Za-z][A-Za-z0-9_-]*)")
MAKE_COMMAND = re.compile(r"(?:^|[\s;&|(])make\s+([A-Za-z][\w.-]*)")
MAKE_TARGET = re.compile(r"^([A-Za-z][\w.-]*(?:\s+[A-Za-z][\w.-]*)*)\s*:(?!=)", re.MULTILINE)
# Where a shell command's arguments end.
SHELL_BREAKS = {"|", "||", "&", "&&", ";", "<", ">", ">>", "2>", "2>&1"}


def split_markdown(text):
    """`(prose_lines, code_blocks)`: fenced code blocks apart from the rest."""
    prose, blocks, block = [], [], None
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            if block is None:
                block = []
            else:
                blocks.append("\n".join(block))
                block = None
        elif block is None:
            prose.append(line)
        else:
            block.append(line)
    if block is not None:
        raise ValueError("a code fence is opened and never closed")
    return prose, blocks


def code_snippets(text):
    """Every fenced block's logical lines (`\\` continuations joined) and every inline code span."""
    prose, blocks = split_markdown(text)
    snippets = []
    for block in blocks:
        snippets.extend(block.replace("\\\n", " ").splitlines())
    # Inline code can wrap over lines within a paragraph.
    for paragraph in "\n".join(prose).split("\n\n"):
        snippets.extend(
            match.group(2) for match in INLINE_CODE.finditer(paragraph.replace("\n", " "))
        )
    return snippets


def github_slug(heading):
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = INLINE_CODE.sub(lambda match: match.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text only
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path):
    """GitHub anchors of a Markdown file's headings, with `-1`, `-2` ... for repeated ones."""
    prose, _ = split_markdown(path.read_text(encoding="utf-8"))
    seen = collections.Counter()
    result = set()
    for line in prose:
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = github_slug(match.group(1))
            result.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
            seen[slug] += 1
    return result


def broken_links(path):
    """`"target: why"` for each relative link of `path` that does not resolve."""
    prose, _ = split_markdown(path.read_text(encoding="utf-8"))
    text = INLINE_CODE.sub("", "\n".join(prose))
    problems = []
    for match in LINK.finditer(text):
        target = match.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            problems.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{target}: no heading with anchor #{anchor} in {linked}")
    return problems


def app_flags(snippet):
    """`[(app, [flags])]` for each `-m apps.X` or `keras-transformer X` command in a line of
    code; `app` is the module's name (`train_classifier`)."""
    commands = []
    for match in APP_COMMAND.finditer(snippet):
        rest = snippet[match.end() :]
        try:
            tokens = shlex.split(rest, comments=True)
        except ValueError:  # an unbalanced quote in an excerpt: fall back to whitespace
            tokens = rest.split()
        flags = []
        for token in tokens:
            if token in SHELL_BREAKS or token.startswith(("|", ";", "&", ">", "<")):
                break
            if token.startswith("--") and len(token) > 2:
                flags.append(token.split("=", 1)[0])
        app = match.group(1).replace("-", "_")
        if match.group(0).startswith("keras-transformer") and app not in COMMAND_MODULES:
            continue  # prose about the name (`pip uninstall keras-transformer ...`), not a command
        commands.append((app, flags))
    return commands


def parser_options(app):
    """The option strings of `keras_transformer.cli.<app>.build_parser()`."""
    try:
        module = importlib.import_module(f"keras_transformer.cli.{app}")
    except ModuleNotFoundError as error:
        if error.name and error.name.startswith("keras_transformer.cli"):
            pytest.fail(
                f"the docs name the command {app!r}, but keras_transformer/cli has no {app}.py"
            )
        raise
    if not hasattr(module, "build_parser"):
        pytest.fail(
            f"keras_transformer/cli/{app}.py has no build_parser(): the docs' flags for {app!r} "
            "cannot be checked (every app builds its argparse parser in build_parser())"
        )
    parser = module.build_parser()
    options = set(parser._option_string_actions)
    # An app with subcommands (`apps.tokenize classifier|translator`): any subcommand's options.
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                options |= set(subparser._option_string_actions)
    return options


def makefile_targets():
    targets = set()
    for match in MAKE_TARGET.finditer((ROOT / "Makefile").read_text(encoding="utf-8")):
        targets.update(match.group(1).split())
    return targets


def doc_id(path):
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", DOCS, ids=doc_id)
def test_relative_links_resolve(path):
    assert broken_links(path) == [], f"{doc_id(path)} has links that do not resolve"


@pytest.mark.parametrize("path", DOCS, ids=doc_id)
def test_app_flags_exist(path):
    unknown = []
    for snippet in code_snippets(path.read_text(encoding="utf-8")):
        for app, flags in app_flags(snippet):
            options = parser_options(app)
            unknown += [
                f"apps.{app} {flag}  (in: {snippet.strip()[:100]})"
                for flag in flags
                if flag not in options
            ]
    assert unknown == [], f"{doc_id(path)} uses flags the apps do not have"


@pytest.mark.parametrize("path", DOCS, ids=doc_id)
def test_make_targets_exist(path):
    targets = makefile_targets()
    named = {
        target
        for snippet in code_snippets(path.read_text(encoding="utf-8"))
        for target in MAKE_COMMAND.findall(snippet)
    }
    assert named - targets == set(), f"{doc_id(path)} names make targets the Makefile lacks"


def test_docs_exist():
    names = {path.name for path in (ROOT / "docs").glob("*.md")}
    assert {"classifier.md", "translator.md", "serving.md", "layers.md", "gpu.md"} <= names


# The checkers themselves, on made-up Markdown: each must catch what it is for.


def test_broken_link_and_anchor_are_reported(tmp_path):
    (tmp_path / "other.md").write_text(
        "# A `code` heading: with punctuation!\n\n## Twice\n\n## Twice\n"
    )
    page = tmp_path / "page.md"
    page.write_text(
        "[fine](other.md#a-code-heading-with-punctuation) [second](other.md#twice-1)\n"
        "[missing file](nowhere.md) [missing anchor](other.md#nope) [web](https://example.com/x)\n"
        "`[not a link](in-code.md)`\n\n```\n[nor this](in-block.md)\n```\n"
    )
    problems = broken_links(page)
    assert [problem.split(":")[0] for problem in problems] == ["nowhere.md", "other.md#nope"]


def test_flags_are_found_across_continuations_and_stop_at_the_shell():
    text = (
        "```sh\n.venv/bin/keras-transformer train-classifier --data bbc \\\n"
        "    --epochs 2 | tee log  # --not-a-flag\n```\n"
        "Then `keras-transformer predict DIR --json < in.txt --ignored`.\n"
    )
    commands = [command for snippet in code_snippets(text) for command in app_flags(snippet)]
    assert commands == [("train_classifier", ["--data", "--epochs"]), ("predict", ["--json"])]


def test_unknown_app_flag_is_not_an_option():
    assert "--bogus-flag" not in parser_options("serve")
    assert {"--model", "--port"} <= parser_options("serve")


@pytest.mark.parametrize("path", DOCS, ids=doc_id)
def test_no_pythonpath_workaround(path):
    # The Makefile installs the project in editable mode, so commands need no PYTHONPATH=. prefix.
    lines = [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if re.search(r"PYTHONPATH=\.(?=[\s:;]|$)", line)
    ]
    assert lines == [], f"{doc_id(path)} still sets PYTHONPATH=."
