"""The simulator's import graph: no cycles inside kvbench/sim (function-level imports included), and the parts that
see the cluster through a Protocol (engine, routers, long-context split, STAR) import neither the built cluster nor
the request lifecycle."""

from __future__ import annotations

import ast
from pathlib import Path

import kvbench.sim

SIM = Path(kvbench.sim.__file__).parent
VIEWED = ("engine", "router", "longctx", "star")


def _module(path: Path) -> str:
    parts = path.relative_to(SIM.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in SIM.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for m, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # every import, at any depth
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            graph[m] |= {n for n in names if n in modules and n != m}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = 2
        path.pop()
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycle_inside_the_simulator() -> None:
    graph = _graph()
    assert "kvbench.sim.cost.config" in graph and "kvbench.sim.engine" in graph
    assert _cycle(graph) is None


def test_the_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_viewed_parts_do_not_import_the_cluster_or_the_lifecycle() -> None:
    graph = _graph()
    for name in VIEWED:
        deps = graph[f"kvbench.sim.{name}"]
        assert not deps & {"kvbench.sim.build", "kvbench.sim.target"}, (name, deps)
