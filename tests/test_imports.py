"""The package's import graph: no cycles (function-level imports included) and the pipeline's direction.

Every `import` and `from ... import` anywhere in a module (top level, inside functions, under TYPE_CHECKING) is an
edge; `from kvbench.pkg import name` points at the submodule `kvbench.pkg.name` when there is one, else at the
package. The pipeline reads workload -> replay -> targets -> event log -> analysis -> present -> cli.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "kvbench"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of a dotted name that is a module of the package (None outside it)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _base_of(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    anchor = module.split(".") if is_package else module.split(".")[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join(anchor + ([node.module] if node.module else []))


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules that `module` imports, anywhere in its body."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _base_of(node, module, path.name == "__init__.py")
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            # `from pkg import sub` names the submodule; `from pkg import func` names pkg itself.
            targets = [t for t in targets[:-1] if t in modules] or [base]
        else:
            continue
        found.update(r for t in targets if (r := _resolve(t, modules)) is not None and r != module)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found, key=lambda c: (-len(c), c))


GRAPH = import_graph()
CYCLES = cycles(GRAPH)


def describe(found: list[list[str]]) -> str:
    return "\n".join(" <-> ".join(c) for c in found) or "none"


def test_graph_sees_function_level_and_from_package_imports():
    # workload/build.py imports mooncake inside a function and servegen as `from kvbench.workload import servegen`.
    assert "kvbench.workload.mooncake" in GRAPH["kvbench.workload.build"]
    assert "kvbench.workload.servegen" in GRAPH["kvbench.workload.build"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert not CYCLES, f"import cycles:\n{describe(CYCLES)}"


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def violations(importers: set[str], forbidden: set[str]) -> list[str]:
    return sorted(f"{m} -> {d}" for m in GRAPH if _layer(m) in importers for d in GRAPH[m] if _layer(d) in forbidden)


LAYERS = {_layer(m) for m in GRAPH}
BASE = {"units", "records", "config"}


def test_layers_named_here_exist():
    assert {"analysis", "present", "cli", "workload", "sim", "http", "plan", "replayer", "run"} <= LAYERS | BASE
    assert BASE <= LAYERS


def test_analysis_never_imports_present_or_cli():
    assert not violations({"analysis"}, {"present", "cli"})


def test_only_cli_imports_cli():
    assert not violations(LAYERS - {"cli"}, {"cli"})


def test_workload_imports_only_the_base():
    assert not violations({"workload"}, LAYERS - BASE - {"workload"})


def test_targets_never_import_analysis_present_cli_or_plan():
    assert not violations({"sim", "http"}, {"analysis", "present", "cli", "plan"})


def test_base_imports_nothing_else_of_the_package():
    assert not violations(BASE, LAYERS - BASE)


def test_simulator_parts_see_views_not_the_cluster_or_the_lifecycle():
    # Engines, routers, the long-context split and STAR rescheduling get small Protocols (sim/*.py), never the
    # built cluster (sim/build.py) or the request lifecycle (sim/target.py).
    for name in ("engine", "router", "longctx", "star"):
        deps = GRAPH[f"kvbench.sim.{name}"]
        assert not deps & {"kvbench.sim.build", "kvbench.sim.target"}, (name, deps)
