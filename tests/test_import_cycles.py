"""Import cycles, function-level and TYPE_CHECKING imports included: the runner, the target types and registry,
the event log, the config reader and kvbench serve take part in none."""

from __future__ import annotations

import ast
from pathlib import Path

import kvbench

PACKAGE = Path(kvbench.__file__).parent
ACYCLIC = (
    "kvbench.config",
    "kvbench.eventlog",
    "kvbench.replay",
    "kvbench.run",
    "kvbench.target",
    "kvbench.targets",
    "kvbench.fixed_target",
    "kvbench.clientlag",
    "kvbench.sim.target",
    "kvbench.http.target",
    "kvbench.http.probe",
    "kvbench.http.profile",
    "kvbench.http.scrape",
    "kvbench.serve.timing",
    "kvbench.serve.sim_timing",
    "kvbench.serve.sources",
    "kvbench.serve.server",
)


def import_graph() -> dict[str, set[str]]:
    """Module -> the kvbench modules it imports anywhere in its body."""
    modules = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for m, p in modules.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{a.name}" for a in node.names]
                graph[m] |= {n if n in modules else node.module for n in names} & modules.keys()
            elif isinstance(node, ast.Import):
                graph[m] |= {a.name for a in node.names} & modules.keys()
        graph[m].discard(m)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected groups of more than one module (each is an import cycle)."""

    def reach(start: str) -> set[str]:
        seen, todo = {start}, [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    reached = {m: reach(m) for m in graph}
    groups = {frozenset(n for n in reached[m] if m in reached[n]) for m in graph}
    return [set(g) for g in groups if len(g) > 1]


def test_the_graph_sees_function_level_imports():
    graph = import_graph()
    assert "kvbench.sim.target" in graph["kvbench.targets"]  # imported inside _sim, for start-up time
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_runner_targets_log_config_and_serve_are_in_no_cycle():
    involved = [sorted(c) for c in cycles(import_graph()) if c & set(ACYCLIC)]
    assert involved == []
