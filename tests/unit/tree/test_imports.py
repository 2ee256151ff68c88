"""Imports flow one way: the decision cores need nothing else; planning, simulation and reports need neither torch nor the coordinator;
the coordinator needs nothing of the learner or the workers, and the learner reaches the
coordinator only through ``echo2.exchange``. Each check runs in a fresh interpreter."""

import re
from pathlib import Path

from paths import SOURCE


def test_the_learner_loop_calls_the_coordinator_only_through_its_face():
    """Every ``self.state.<name>`` in ``learner/loop.py`` is a method of ``exchange.RolloutSource``."""
    from echo2.exchange import RolloutSource

    loop = (SOURCE / "learner" / "loop.py").read_text()
    called = set(re.findall(r"\bstate\.(\w+)", loop))
    assert called and called <= {name for name in vars(RolloutSource) if not name.startswith("_")}, called


def _imports_of(path: Path) -> set[str]:
    """The echo2 modules ``path`` imports anywhere in it (in functions and under TYPE_CHECKING too)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("echo2")}


def test_no_circle_of_files_in_the_package():
    """Every import between echo2's files, type-only and function-level ones included, runs one way."""
    modules = {".".join(("echo2", *p.relative_to(SOURCE).with_suffix("").parts)).removesuffix(".__init__"): p
               for p in SOURCE.rglob("*.py")}
    graph = {name: _imports_of(path) & modules.keys() - {name} for name, path in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(name: str) -> None:  # Tarjan's strongly connected components
        index[name] = low[name] = len(index)
        stack.append(name)
        for other in graph[name]:
            if other not in index:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            component = []
            while (top := stack.pop()) != name:
                component.append(top)
            if component:
                circles.append(sorted([name, *component]))

    for name in graph:
        if name not in index:
            visit(name)
    assert circles == []


def test_the_package_root_holds_only_the_cli_and_the_records():
    """Everything else lives in a folder named for its job (``core/``, ``net/``, ``model/``, ...)."""
    assert sorted(p.stem for p in SOURCE.glob("*.py")) == ["__init__", "cli", "exchange", "protocol", "units"]
