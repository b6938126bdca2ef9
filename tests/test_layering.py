"""The import structure the code is held to: no module cycles, the engine apart from the backends.

Imports are read from the source (every `import`, at module level, inside a function or
under `if TYPE_CHECKING:` — a cycle for the type checker is still a circle of
responsibility), so the test needs neither TensorFlow nor Horovod.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dsl", "backends")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The project modules `path` imports (a `from package import name` that names a module
    counts as importing that module)."""
    found: set[str] = set()
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return {module for module in found if module in known and module != name}


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(path, set(found)) for name, path in found.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(edges.get(node, ())):
            if successor not in index:
                connect(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return found


def test_no_module_imports_itself_back_through_others() -> None:
    edges = graph()
    # Package __init__ files are imported by their own submodules by construction; leave them out.
    edges = {name: {m for m in targets if not name.startswith(f"{m}.")} for name, targets in edges.items()}
    assert cycles(edges) == []


def private_imports(edges: dict[str, set[str]]) -> list[str]:
    """Imports of a package's private module (`_name`) from outside that package."""
    found = []
    for name, targets in sorted(edges.items()):
        for target in sorted(targets):
            package, _, last = target.rpartition(".")
            if last.startswith("_") and not last.startswith("__") and not (name == package or name.startswith(f"{package}.")):
                found.append(f"{name} -> {target}")
    return found


def test_no_module_imports_another_packages_private_module() -> None:
    """What another package needs of a private module is made public where it belongs."""
    assert private_imports(graph()) == []


def test_the_private_import_finder_finds_one() -> None:
    edges = {"dsl.engine.x": {"dsl.inputters._private"}, "dsl.inputters.csv": {"dsl.inputters._private"}}
    assert private_imports(edges) == ["dsl.engine.x -> dsl.inputters._private"]


# What the runner holds of a run (dsl/engine/run_state.py and the rest of its attributes) is
# written by the runner alone; the modules deciding how it changes return what changes.
RUNNER_STATE_WRITERS = {"dsl/engine/runner.py"}


def test_no_module_but_the_runner_writes_the_runners_state() -> None:
    writes = {}
    for package in ("dsl", "backends"):
        for path in sorted((ROOT / package).rglob("*.py")):
            where = str(path.relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                    node, (ast.AugAssign, ast.AnnAssign)) else []
                for target in targets:
                    for element in target.elts if isinstance(target, ast.Tuple) else [target]:
                        if isinstance(element, ast.Attribute) and isinstance(element.value, ast.Name) \
                                and element.value.id == "runner" and where not in RUNNER_STATE_WRITERS:
                            writes.setdefault(where, []).append(f"runner.{element.attr} (line {node.lineno})")
    assert writes == {}


def test_the_engine_meets_the_backends_only_at_its_composition_root() -> None:
    offenders = {
        name: sorted(target for target in targets if target.split(".")[0] == "backends")
        for name, targets in graph().items()
        if name.startswith("dsl.") and name != "dsl.commands._training"
    }
    assert {name: targets for name, targets in offenders.items() if targets} == {}


def test_backends_use_the_engine_through_its_contracts_and_step_functions() -> None:
    allowed = {"dsl.engine", "dsl.engine.contracts", "dsl.engine.hooks", "dsl.engine.steps", "dsl.engine.replicas",
               "dsl.engine.precision", "dsl.engine.global_batch"}
    used = {target for name, targets in graph().items() if name.startswith("backends")
            for target in targets if target.startswith("dsl.engine")}
    assert used <= allowed


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_engine_modules_stay_small() -> None:
    """One concept per module: a file of the loop over 400 lines holds more than one."""
    sizes = {path.name: len(path.read_text(encoding="utf-8").splitlines()) for path in (ROOT / "dsl" / "engine").glob("*.py")}
    assert {name: lines for name, lines in sizes.items() if lines > 400} == {}


# What a task's components speak of. The engine and the backends pass `(features, targets)`
# through and ask the modeler and inputter for the rest, so none of these may appear in their
# code (names, attributes, arguments, strings); docstrings and comments may give examples.
TASK_WORDS = {"image", "images", "label", "labels", "logits", "mask", "masks", "pixels", "vocabulary",
              "token", "tokens", "num_classes", "class_names", "image_shape", "ignore_label", "sequence_length",
              "segmentation", "classification", "classifier"}
# Registered types that are ordinary words too (`none` is also Python's and Horovod's).
GENERIC_TYPES = {"none"}


def code_words(path: Path) -> set[str]:
    """Every identifier, attribute and word of a string constant in `path`'s code, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value) for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        elif isinstance(node, ast.arg):
            words.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.update(part for chunk in node.value.split() for part in chunk.strip(".,:;()[]{}'\"").split("_"))
            words.update(node.value.split())
    return {word.lower() for word in words}


def test_no_engine_or_backend_file_names_a_task() -> None:
    """A new task is its components' modules: nothing under dsl/engine/ or backends/ knows one."""
    from dsl.language import registry

    registry.load_all()
    task_types = {c.type for kind in ("inputter", "augmenter", "network", "modeler")
                  for c in registry.components(kind)} - GENERIC_TYPES
    found = {}
    for package in ("dsl/engine", "backends"):
        for path in sorted((ROOT / package).rglob("*.py")):
            named = code_words(path) & (TASK_WORDS | task_types)
            if named:
                found[str(path.relative_to(ROOT))] = sorted(named)
    assert found == {}


# The folders of dsl/ and backends/, lowest first: a folder imports only the folders before it,
# so no two import each other and nothing low knows what is built on it. The language is the
# ground (pure Python, no TensorFlow); the tasks build on the shared components; the backends on
# the engine; the sweep and the commands put them together. docs/architecture.md draws it.
LAYERS = (
    "dsl.language",
    "dsl.distributed",
    "dsl.engine",
    "dsl.datasets",
    "dsl.inputters",
    "dsl.data_check",
    "dsl.networks",
    "dsl.augmenters",
    "dsl.modelers",
    "dsl.callbacks",
    "dsl.tasks",
    "backends",
    "dsl.sweep",
    "dsl.commands",
    "dsl.cli",
    "dsl.__main__",
)


def folder_of(module: str) -> str | None:
    """The layer `module` belongs to (None: the `dsl` package itself, which every module imports)."""
    return next((layer for layer in LAYERS if module == layer or module.startswith(f"{layer}.")), None)


def imports_up(edges: dict[str, set[str]]) -> list[str]:
    """Every import from a folder to one at its level or above it (other than itself)."""
    order = {layer: index for index, layer in enumerate(LAYERS)}
    found = []
    for name, targets in sorted(edges.items()):
        for target in sorted(targets):
            low, high = folder_of(name), folder_of(target)
            if low and high and low != high and order[high] >= order[low]:
                found.append(f"{name} -> {target}")
    return found


def test_every_module_lives_in_a_folder_of_the_layers() -> None:
    """No loose module at the top of dsl/ but the command line's entry points."""
    assert sorted(name for name in graph() if name != "dsl" and folder_of(name) is None) == []


def test_every_folder_imports_only_the_folders_below_it() -> None:
    assert imports_up(graph()) == []


def test_the_layer_check_finds_an_import_up() -> None:
    edges = {"dsl.language.schema": {"dsl.sweep.language"}, "dsl.sweep.checks": {"dsl.language.schema"}}
    assert imports_up(edges) == ["dsl.language.schema -> dsl.sweep.language"]


def test_a_task_is_one_folder_nothing_else_imports() -> None:
    """A task reaches the rest through the registry alone: no other folder, and no other task,
    imports a module of it (the registry walks dsl/tasks/ by name)."""
    found = []
    for name, targets in sorted(graph().items()):
        own = ".".join(name.split(".")[:3]) if name.startswith("dsl.tasks.") else None
        found += [f"{name} -> {t}" for t in sorted(targets)
                  if t.startswith("dsl.tasks.") and ".".join(t.split(".")[:3]) != own]
    assert found == []


def test_no_folder_but_a_tasks_names_a_task_or_its_types() -> None:
    """The language, the engine, distribution, the commands and the sweep never name a task's
    folder or a type a task registers (in code or strings; docstrings may give examples)."""
    from dsl.language import registry

    registry.load_all()
    tasks = [name.rpartition(".")[2] for name in registry.component_packages() if name.startswith("dsl.tasks.")]
    task_types = {c.type for c in registry.components() if c.module.startswith("dsl.tasks.")} - GENERIC_TYPES
    assert len(tasks) >= 4 and {"image_classification_csv", "retinanet", "unet", "text_cnn"} <= task_types
    found = {}
    for package in ("dsl/language", "dsl/engine", "dsl/distributed", "dsl/commands", "dsl/sweep", "backends"):
        for path in sorted((ROOT / package).rglob("*.py")):
            named = code_words(path) & (set(tasks) | task_types)
            if named:
                found[str(path.relative_to(ROOT))] = sorted(named)
    assert found == {}


# A measured figure in the code goes stale with the next machine; docs/benchmarks.md keeps them
# with how they were measured. A comment or docstring line that quotes a time, a share or a
# factor together with what was measured of it (faster, slower, cost, took, measured, instead of)
# is refused; a setting's value (`1 ms by default`) is not a figure.
FIGURE = re.compile(r"\d(\.\d+)?\s?((ms|µs|us|x)\b|%)")
MEASURED = re.compile(r"faster|slower|cost|took|measured|instead of")


def figures_in_prose(text: str) -> list[str]:
    """The comment and docstring lines of `text` that quote a duration or a speed-up."""
    tree = ast.parse(text)
    prose = [node.value.value for node in ast.walk(tree)
             if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
             and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
             and isinstance(node.body[0].value.value, str)
             for node in [node.body[0]]]
    prose += [line.partition("#")[2] for line in text.splitlines() if "#" in line]
    return [line.strip() for block in prose for line in block.splitlines() if FIGURE.search(line) and MEASURED.search(line)]


def test_no_code_comment_quotes_a_benchmark_figure() -> None:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            lines = figures_in_prose(path.read_text(encoding="utf-8"))
            if lines:
                found[str(path.relative_to(ROOT))] = lines
    assert found == {}


def test_the_figure_finder_finds_one() -> None:
    text = '"""Fast: 0.4 instead of 4 ms per batch."""\nx = 1  # trained 3-21 % faster\ny = "5 ms"\n'
    assert figures_in_prose(text) == ["Fast: 0.4 instead of 4 ms per batch.", "trained 3-21 % faster"]
