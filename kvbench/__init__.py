"""kvbench: trace-driven benchmark and evaluation suite for LLM inference serving.

The Python API (kvbench.api): `replay(workload or trace, target, **options) -> Run`, `open_runs(paths)`, and
`Run.summary()`, `Run.per_request()` (pandas), `Run.arrow()` (Arrow). It is loaded on first use: the command line
imports this package too, and must not pay for pandas, DuckDB and pyarrow before it parses its arguments.
"""

from __future__ import annotations

from kvbench.version import __version__

TYPE_CHECKING = False  # not typing's: importing typing would cost `import kvbench` more than the rest of it
if TYPE_CHECKING:
    from kvbench.api import Run, open_runs, replay

__all__ = ["Run", "__version__", "open_runs", "replay"]
_API = frozenset({"Run", "open_runs", "replay"})


def __getattr__(name: str) -> object:
    if name in _API:
        from kvbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'kvbench' has no attribute {name!r}")
