"""The analysis, presentation and planning packages import in one direction: no cycles (function-level imports
included) and analysis never imports present, plan or cli. The graph is read from the source with ast."""

from __future__ import annotations

import ast
from pathlib import Path

import kvbench

PACKAGE = Path(kvbench.__file__).parent
MINE = ("kvbench.analysis", "kvbench.present", "kvbench.plan")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imported(node: ast.AST, modules: dict[str, Path]) -> list[str]:
    """Modules an import statement loads: `from a.b import c` is a.b.c when that is a module, else a.b."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in modules]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        subs = [f"{node.module}.{a.name}" for a in node.names]
        return [s for s in subs if s in modules] or ([node.module] if node.module in modules else [])
    return []


def import_graph() -> dict[str, set[str]]:
    """module -> the kvbench modules it imports anywhere in its body (top level, functions, TYPE_CHECKING)."""
    modules = _modules()
    return {
        name: {m for node in ast.walk(ast.parse(path.read_text())) for m in _imported(node, modules)} - {name}
        for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_graph_sees_function_level_imports():
    graph = import_graph()
    assert "kvbench.analysis.figures" in graph["kvbench.analysis.metrics"]  # top level
    assert "kvbench.present.plots" in graph["kvbench.present.report"]  # inside build_report


def test_no_import_cycles_in_analysis_present_plan():
    graph = import_graph()
    mine = {k: {v for v in vs if v.startswith(MINE)} for k, vs in graph.items() if k.startswith(MINE)}
    assert cycles(mine) == []


def test_analysis_imports_nothing_downstream():
    graph = import_graph()
    bad = {
        (k, v)
        for k, vs in graph.items()
        if k.startswith("kvbench.analysis")
        for v in vs
        if v.startswith(("kvbench.present", "kvbench.plan", "kvbench.cli"))
    }
    assert bad == set()
    assert not any(v.startswith("kvbench.cli") for k, vs in graph.items() if k.startswith(MINE) for v in vs)


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
