"""The rooms of docs/architecture.md: lower rooms never import higher ones, and
inside `training`, the shared modules never import a task's package, nor one
task's package the other's.

Imports are read from the source with `ast` (every import, module-level or
inside a function), so a lazy import breaks the rules as much as an eager one,
and an import moved into a function does not hide a circle.
"""

import ast
import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = REPO_ROOT / "keras_transformer"

# Lowest first: a room may import its own modules and those of the rooms
# before it. docs/architecture.md's data flow, except that `export` sits below
# `training`: a model trained anywhere exports without the training code.
# `plots` and `crosscheck` are tools that training and the apps use; `cli`, the
# command-line apps, sits on top of everything.
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
    "cli",
)


# Inside `training`: one package per task. The shared modules serve both and
# import neither; `run_export` reads a run folder of either task, and the
# package's `__init__` re-exports the classifier's report for users.
TASK_PACKAGES = ("classifier", "translator")
IMPORTS_EVERY_TASK = ("keras_transformer.training.run_export", "keras_transformer.training")


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


def task_of(module):
    """`keras_transformer.training.TASK...` -> `TASK` for a task package; None otherwise."""
    parts = module.split(".")
    if parts[:2] != ["keras_transformer", "training"] or len(parts) < 3:
        return None
    return parts[2] if parts[2] in TASK_PACKAGES else None


def broken_training_rule(module, name):
    """Why `module` (of the training room) may not import `name`, or None."""
    if room_of(name) != "training" or module in IMPORTS_EVERY_TASK:
        return None
    task, target = task_of(module), task_of(name)
    if target is None or task == target:
        return None
    if task is None:
        return f"{module} imports {name}: a shared training module imports no task's package"
    return f"{module} imports {name}: one task's package never imports the other's"


def module_name(path, root):
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def broken_rules(path, root=REPO_ROOT):
    """`"module imports what"` for each import of `path` that docs/architecture.md forbids."""
    module = module_name(path, root)
    room = room_of(module)
    broken = []
    for name in sorted(project_imports(path, root)):
        if name.split(".")[0] == "apps":
            broken.append(f"{module} imports {name}: the library never imports the apps")
            continue
        target = room_of(name)
        if room == "training" and broken_training_rule(module, name):
            broken.append(broken_training_rule(module, name))
            continue
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


def import_circles(paths, root):
    """The circles of imports among the modules at `paths`, each as a list of modules."""
    modules = {module_name(path, root): path for path in paths}
    graph = {module: imported_modules(path, root, modules) for module, path in modules.items()}
    circles, done = [], set()

    def visit(module, stack):
        if module in stack:
            circles.append([*stack[stack.index(module) :], module])
            return
        if module in done:
            return
        for name in sorted(graph[module]):
            visit(name, [*stack, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    return circles


def imported_modules(path, root, modules):
    """Which of `modules` the module at `path` imports: for `from package import module`,
    the module (a package's `__init__` may import its modules that way)."""
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
            for alias in node.names:
                submodule = f"{module}.{alias.name}"
                imported.add(submodule if submodule in modules else module)
    return imported & set(modules)


def test_no_import_circle():
    circles = import_circles(library_files(), REPO_ROOT)
    assert not circles, "\n".join(" -> ".join(circle) for circle in circles)


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
        (
            "serving/app.py",
            "from keras_transformer.cli.common import load_export\n",
            "serving sits below cli",
        ),
        ("text/wordpiece.py", "from ..training import settings\n", "text sits below training"),
        (
            "training/runs.py",
            "from keras_transformer.training.classifier.settings import x\n",
            "a shared training module imports no task's package",
        ),
        (
            "training/compiling.py",
            "def f():\n    from .translator import model\n",
            "a shared training module imports no task's package",
        ),
        (
            "training/classifier/pipeline.py",
            "from keras_transformer.training.translator.chrf import x\n",
            "one task's package never imports the other's",
        ),
        (
            "training/translator/model.py",
            "from ..classifier import model\n",
            "one task's package never imports the other's",
        ),
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
        "from keras_transformer.text.padding import trim\n"
        "from keras_transformer.decoding import greedy\n"
        "from keras_transformer.export.versions import v\nimport keras_transformer\n",
        encoding="utf-8",
    )
    assert broken_rules(path, root) == []


def test_run_export_and_a_task_package_import_what_they_may(tmp_path):
    root = tmp_path / "repo"
    training = root / "keras_transformer" / "training"
    (training / "classifier").mkdir(parents=True)
    (training / "run_export.py").write_text(
        "from keras_transformer.training.classifier.settings import a\n"
        "from keras_transformer.training.translator.settings import b\n",
        encoding="utf-8",
    )
    (training / "classifier" / "pipeline.py").write_text(
        "from keras_transformer.training.runs import RunFolder\n"
        "from keras_transformer.training.classifier.model import build\n"
        "from keras_transformer.models import TransformerClassifier\n",
        encoding="utf-8",
    )
    assert broken_rules(training / "run_export.py", root) == []
    assert broken_rules(training / "classifier" / "pipeline.py", root) == []


def test_an_import_circle_is_reported_even_through_a_function(tmp_path):
    root = tmp_path / "repo"
    package = root / "keras_transformer" / "training" / "classifier"
    package.mkdir(parents=True)
    (package / "pipeline.py").write_text(
        "from keras_transformer.training.classifier import pretraining\n", encoding="utf-8"
    )
    (package / "pretraining.py").write_text(
        "def build():\n    from keras_transformer.training.classifier.pipeline import x\n",
        encoding="utf-8",
    )
    (package / "model.py").write_text("import keras_transformer.models\n", encoding="utf-8")
    circles = import_circles(sorted(root.rglob("*.py")), root)
    assert [set(circle) for circle in circles] == [
        {
            "keras_transformer.training.classifier.pipeline",
            "keras_transformer.training.classifier.pretraining",
        }
    ]


def test_the_clones_apps_are_wrappers_of_the_installed_command():
    """`python -m apps.X` runs `keras-transformer X`: each of apps/ imports the command's
    `run_command` and nothing else of the project, and every command has its wrapper."""
    from keras_transformer.cli.main import COMMANDS

    wrappers = {path.stem: path for path in (REPO_ROOT / "apps").glob("*.py")}
    wrappers.pop("__init__")
    assert set(wrappers) == {module for module, _ in COMMANDS.values()}
    for module, path in wrappers.items():
        assert project_imports(path, REPO_ROOT) == {"keras_transformer.cli.main"}, path
        command = next(name for name, (target, _) in COMMANDS.items() if target == module)
        assert f'run_command("{command}")' in path.read_text(encoding="utf-8"), path
