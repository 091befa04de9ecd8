"""DESIGN.md's rooms: lower rooms never import higher ones.

Imports are read from the source with `ast` (every import, module-level or
inside a function), so a lazy import breaks the rules as much as an eager one.
"""

import ast
import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = REPO_ROOT / "keras_transformer"

# Lowest first: a room may import its own modules and those of the rooms
# before it. DESIGN.md's data flow, except that `export` sits below
# `training`: a model trained anywhere exports without the training code
# (issue #14). `plots` and `crosscheck` are tools that training and the apps use.
ROOMS = (
    "data",
    "text",
    "layers",
    "models",
    "decoding",
    "crosscheck",
    "plots",
    "export",
    "training",
    "serving",
)


def room_of(module):
    """`keras_transformer.X...` -> `X`; None for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def project_imports(path, root):
    """The `keras_transformer.*` and `apps.*` modules that `path` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module
            # `from keras_transformer import plots` imports the room `plots`.
            imported.update(
                f"{module}.{alias.name}" if module == "keras_transformer" else module
                for alias in node.names
            )
    return {name for name in imported if name.split(".")[0] in ("keras_transformer", "apps")}


def broken_rules(path, root=REPO_ROOT):
    """`"module imports what"` for each import of `path` that DESIGN.md forbids."""
    module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
    room = room_of(module)
    broken = []
    for name in sorted(project_imports(path, root)):
        if name.split(".")[0] == "apps":
            broken.append(f"{module} imports {name}: the library never imports the apps")
            continue
        target = room_of(name)
        if room is None or target is None or target == room:
            continue
        if room == "layers":
            broken.append(
                f"{module} imports {name}: layers import nothing of the project but layers"
            )
        elif room not in ROOMS or target not in ROOMS:
            broken.append(f"{module} imports {name}: add the room to ROOMS in {__name__}")
        elif ROOMS.index(target) > ROOMS.index(room):
            broken.append(f"{module} imports {name}: {room} sits below {target}")
    return broken


def library_files():
    return sorted(PACKAGE.rglob("*.py"))


def test_no_room_imports_a_higher_one():
    broken = [rule for path in library_files() for rule in broken_rules(path)]
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize(
    "module, source, expected",
    [
        (
            "export/classifier.py",
            "from keras_transformer.training.batching import x\n",
            "export sits below training",
        ),
        ("layers/attention.py", "from keras_transformer.text import x\n", "layers import nothing"),
        (
            "data/splits.py",
            "def f():\n    import keras_transformer.models\n",
            "data sits below models",
        ),
        ("training/classifier.py", "from apps import common\n", "never imports the apps"),
        (
            "export/translator.py",
            "from keras_transformer import serving\n",
            "export sits below serving",
        ),
        ("text/wordpiece.py", "from ..training import settings\n", "text sits below training"),
    ],
)
def test_a_forbidden_import_is_reported(tmp_path, module, source, expected):
    """The checker itself: each kind of forbidden import, in a scratch copy of the layout."""
    root = tmp_path / "repo"
    path = root / "keras_transformer" / module
    path.parent.mkdir(parents=True)
    path.write_text(source, encoding="utf-8")
    rules = broken_rules(path, root)
    assert len(rules) == 1 and expected in rules[0], rules


def test_allowed_imports_are_not_reported(tmp_path):
    root = tmp_path / "repo"
    path = root / "keras_transformer" / "export" / "translator.py"
    path.parent.mkdir(parents=True)
    path.write_text(
        "from keras_transformer.text.padding import trim\nfrom keras_transformer.decoding import greedy\n"
        "from keras_transformer.export.versions import v\nimport keras_transformer\n",
        encoding="utf-8",
    )
    assert broken_rules(path, root) == []
