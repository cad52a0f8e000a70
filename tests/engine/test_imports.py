"""The engine's modules import each other without a cycle (at run time or for type checking): what a
module needs of a hand it reads through engine.position's protocols, not through engine.state."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "engine"


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in ENGINE.rglob("*.py"):
        module = ".".join(path.relative_to(ENGINE.parent).with_suffix("").parts).removesuffix(".__init__")
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):  # every import, TYPE_CHECKING too
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module)
                imported.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
        graph[module] = set()
        for name in imported:
            while name and name not in graph and not (ENGINE.parent / (name.replace(".", "/") + ".py")).is_file() \
                    and not (ENGINE.parent / name.replace(".", "/") / "__init__.py").is_file():
                name = name.rpartition(".")[0]
            if name.startswith("engine") and name != module and name != "engine":
                graph[module].add(name)
    return graph


def test_the_engine_has_no_import_cycle() -> None:
    graph = _graph()
    assert {"engine.state", "engine.movegen", "engine.view", "engine.position"} <= set(graph)
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, "import cycle: " + " -> ".join((*path[path.index(module):], module))
        if module in done:
            return
        for other in sorted(graph.get(module, ())):
            visit(other, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())
    assert "engine.state" not in graph["engine.movegen"] | graph["engine.view"]
