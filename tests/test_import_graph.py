"""attnkit's import graph, read from the source with ``ast``: no cycle, and the library
never reaching up into the entry points.

Every import statement counts, wherever it stands: at module level, inside a
function (the usual way to hide a cycle from the interpreter) and under
``if TYPE_CHECKING:`` (a type-only import is still a dependency of the design).
An edge goes to the most specific attnkit module the statement names:
``from attnkit.data.readers import read_lines`` is an edge to
``attnkit.data.readers``, ``from attnkit.data import readers`` one to
``attnkit.data.readers`` too, ``from attnkit.data import read_lines`` one to
the package ``attnkit.data``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "attnkit"
# The entry points and the trainer: the library (everything else) never imports them.
ENTRY_POINTS = ("cli", "serve", "interop", "engines", "training")


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of dotted ``name`` that is an attnkit module."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        candidate = ".".join(parts[:n])
        if candidate in modules:
            return candidate
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The attnkit modules that ``module`` imports anywhere in its source."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package the module lives in
                package = module.split(".")
                drop = node.level - 1 if is_package else node.level
                package = package[: len(package) - drop]
                base = ".".join([*package, base] if base else package)
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name, modules)
            if target is not None and target != module:
                found.add(target)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """``module -> the attnkit modules it imports`` for every module under ``root``."""
    modules = all_modules(root)
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_one_cycle(graph, set(c)) for c in components]


def _one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module, for the failure message."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError("a strongly connected component without a cycle")


def is_library(module: str) -> bool:
    parts = module.split(".")
    if module == "attnkit.__main__":  # `python -m attnkit`: the CLI's entry point
        return False
    return len(parts) < 2 or parts[1] not in ENTRY_POINTS


@functools.cache
def package_graph() -> dict[str, set[str]]:
    """attnkit's own graph, read once for the tests below."""
    return import_graph()


def test_the_package_has_no_import_cycle():
    cycles = find_cycles(package_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_library_never_imports_the_entry_points():
    graph = package_graph()
    bad = sorted(
        f"{m} imports {t}"
        for m, targets in graph.items()
        if is_library(m)
        for t in targets
        if not is_library(t) and t != "attnkit.__main__"
    )
    assert not bad, "library modules reaching up:\n" + "\n".join(bad)


def test_only_the_command_line_imports_the_command_line():
    # serve and interop are entry points too, but the CLI is the top: they share
    # what they need with it through the library (e.g. attnkit.data.readers).
    graph = package_graph()
    bad = sorted(
        f"{m} imports {t}"
        for m, targets in graph.items()
        if not _in_cli(m) and m != "attnkit.__main__"
        for t in targets
        if _in_cli(t)
    )
    assert not bad, "modules importing the CLI:\n" + "\n".join(bad)


def _in_cli(module: str) -> bool:
    return module == "attnkit.cli" or module.startswith("attnkit.cli.")


def command_modules() -> set[str]:
    """The modules ``attnkit.cli.main`` registers as commands (``COMMANDS``), read with ``ast``."""
    tree = ast.parse((ROOT / "cli" / "main.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id == "COMMANDS" and node.value is not None:
            table = ast.literal_eval(node.value)
            return {module for module, _ in table.values()}
    raise AssertionError("attnkit/cli/main.py: no COMMANDS table")


def commands_importing_commands(graph: dict[str, set[str]], commands: set[str]) -> list[str]:
    return sorted(f"{m} imports {t}" for m in commands for t in graph.get(m, ()) if t in commands)


def test_no_command_imports_another_command():
    # What two commands share lives in the library or a shared module of the CLI that is
    # no command (attnkit.cli.common, attnkit.cli.inference_args).
    commands = command_modules()
    assert {"attnkit.cli.translate", "attnkit.cli.serve"} <= commands
    bad = commands_importing_commands(package_graph(), commands)
    assert not bad, "commands importing other commands:\n" + "\n".join(bad)


def test_a_command_importing_a_command_is_seen(tmp_path):
    graph = _graph_of(
        tmp_path,
        {
            "cli/__init__.py": "",
            "cli/common.py": "",
            "cli/a.py": "def run():\n    from attnkit.cli.b import helper\n",
            "cli/b.py": "from attnkit.cli import common\ndef helper(): ...\n",
        },
    )
    commands = {"attnkit.cli.a", "attnkit.cli.b"}
    assert commands_importing_commands(graph, commands) == ["attnkit.cli.a imports attnkit.cli.b"]


# -- the checker itself: it must see what the tests above rely on ------------------


def _graph_of(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    root = tmp_path / "attnkit"
    for rel, text in {"__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return import_graph(root)


def test_an_import_inside_a_function_is_a_cycle(tmp_path):
    graph = _graph_of(
        tmp_path,
        {
            "data/__init__.py": "",
            "data/a.py": "from attnkit.data.b import f\n",
            "data/b.py": "def f():\n    from attnkit.data import a\n    return a\n",
        },
    )
    assert graph["attnkit.data.a"] == {"attnkit.data.b"}
    assert graph["attnkit.data.b"] == {"attnkit.data.a"}
    assert find_cycles(graph) == [["attnkit.data.a", "attnkit.data.b", "attnkit.data.a"]]


def test_relative_and_type_only_imports_are_edges(tmp_path):
    graph = _graph_of(
        tmp_path,
        {
            "training/__init__.py": "from .loop import Trainer\n",
            "training/loop.py": "from . import checkpointing\n",
            "training/checkpointing.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from attnkit.training.loop import Trainer\n"
            ),
            "models/x.py": "import attnkit.training.loop as loop\n",
        },
    )
    assert graph["attnkit.training"] == {"attnkit.training.loop"}
    assert graph["attnkit.training.loop"] == {"attnkit.training.checkpointing"}
    assert graph["attnkit.training.checkpointing"] == {"attnkit.training.loop"}
    assert len(find_cycles(graph)) == 1
    assert is_library("attnkit.models.x") and not is_library("attnkit.training.loop")
    assert graph["attnkit.models.x"] == {"attnkit.training.loop"}
