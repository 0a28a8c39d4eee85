"""The Python API: replay a workload against a target and read runs back, for notebooks and scripts.

    import kvbench
    run = kvbench.replay("traces/kimi-sample.jsonl", "sim", max_requests=40, out="reports/nb")
    run.summary()["metrics"]["ttft_ms.p50"]      # the figures of `kvbench summary RUN --json`
    run.per_request()                            # one row per request (pandas); run.arrow() for Arrow

The same steps as `kvbench replay` and `kvbench summary`, without the terminal: nothing is printed, and every
user error (bad option, unknown target or workload, taken `out`) is a one-line `kvbench.config.ConfigError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.analysis import metrics
from kvbench.analysis.runset import check_run, expand
from kvbench.analysis.slo import Slo, parse_slo, slo_from_manifest
from kvbench.config import ConfigError
from kvbench.present import summary as summary_doc
from kvbench.run import RunOptions, execute, load_run
from kvbench.rundir import check_out
from kvbench.targets import resolve
from kvbench.workload import load

if TYPE_CHECKING:
    import pandas
    import pyarrow

__all__ = ["Run", "open_runs", "replay"]

_PER_REQUEST = "SELECT * FROM per_request ORDER BY run, arrival_ns, req_id"


@dataclass(frozen=True)
class Run:
    """A run directory (run.json, events/, requests/) and the figures computed from it. `slo`: 'ttft=200,tpot=50'
    (ms, as `--slo`) for summary() and the `good` column; default the SLOs the run's workload declares."""

    path: Path

    @property
    def manifest(self) -> dict[str, Any]:
        """run.json: identity, options, target, counts and status (a run still marked running reads 'killed')."""
        return load_run(self.path)

    @property
    def status(self) -> str:
        """complete | interrupted | failed | killed."""
        return str(self.manifest["status"])

    def summary(self, slo: str | None = None, bucket_s: float = 1.0) -> dict[str, Any]:
        """The summary.json document (`kvbench summary RUN --json`): run_id, status, slo_ms, rates, `metrics` (flat
        figures such as requests, ttft_ms.p50, output_token_throughput), bootstrap samples and `timeseries` per bucket_s."""
        return summary_doc.build(self.path, parse_slo(slo) if slo else None, bucket_s)

    def per_request(self, slo: str | None = None) -> pandas.DataFrame:
        """One row per request, ordered by arrival: run, req_id, arrival_ns, send_ns, first_ns, last_ns, end_ns,
        status (FINISH|ERROR|REJECT|CANCEL|RUNNING), reason, input/output token counts, ttft_ns, tpot_ns,
        e2e_ns, lag_ns, queue_ns, tbt_ns, the SLO columns and good (formulas: analysis/sql/per_request.sql)."""
        con = metrics.open_runs([self.path])
        try:
            return metrics.per_request(con, self._slo(slo))
        finally:
            con.close()

    def arrow(self, slo: str | None = None) -> pyarrow.Table:
        """per_request() as an Arrow table, with DuckDB's column types (nullable integers stay integers)."""
        con = metrics.open_runs([self.path])
        try:
            metrics.prepare(con, self._slo(slo))
            return con.sql(_PER_REQUEST).to_arrow_table()
        finally:
            con.close()

    def _slo(self, slo: str | None) -> Slo:
        return parse_slo(slo) if slo else slo_from_manifest(check_run(self.path))


def open_runs(paths: str | Path | Sequence[str | Path]) -> list[Run]:
    """The runs at these directories (or glob patterns such as 'reports/rate-*'), in the order given; a path that is
    not a readable kvbench run is a ConfigError."""
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    runs = expand(items)
    for path in runs:
        check_run(path)
    return [Run(path) for path in runs]


def replay(
    source: str | Path | load.Workload,
    target: str = "sim",
    *,
    seed: int = 0,
    time_scale: float = 1.0,
    rate: float | None = None,
    start: float = 0.0,
    duration: float | None = None,
    max_requests: int | None = None,
    concurrency: int | None = None,
    out: str | Path | None = None,
    overwrite: bool = False,
    overrides: dict[str, Any] | Sequence[str] = (),
    workers: int = 1,
    users: int | None = None,
    think_time: float = 0.0,
) -> Run:
    """Replay a workload against a target, as `kvbench replay` does, and return the finished Run.

    `source`: a trace file (a path with a suffix other than .toml, e.g. traces/kimi-sample.jsonl), a workload spec
    (a NAME such as kimi-sample, or FILE.toml), or a Workload from kvbench.workload.load. `target`: as --target
    (sim, sim:PRESET, fixed:ttft_ms=50,itl_ms=10, http://HOST:PORT/v1, a profile). `overrides`: the target's
    --set KEY=VALUE settings, as a dict or a list of 'k=v'. The other options mirror the flags of the same name
    (seconds for start/duration, requests/s for rate). `users`: a closed loop of that many users, each sending its
    next request `think_time` seconds after its previous answer (arrival times are ignored). `out` defaults to reports/<run-id>/; an `out` holding a run
    is refused unless `overwrite`. The run's summary.json is written, as after `kvbench replay`."""
    if out is not None:
        check_out(Path(out), overwrite)  # before reading the trace: a taken `out` is known at once
    wl = _workload(source, seed)
    if rate is not None:
        wl = load.retime_poisson(wl, rate, seed)
    wl = load.shape(wl, time_scale, start, duration, max_requests)
    load.require_requests(wl)
    spec = resolve(target, _override_items(overrides))
    loop = _closed_loop(users, think_time, concurrency, rate)
    opts = RunOptions(seed, users or concurrency, Path(out) if out else None, workers, overwrite, loop, think_time)
    run_dir, _ = execute(wl, spec, opts)
    run = Run(run_dir)
    with contextlib.suppress(ConfigError):  # as after `kvbench replay`: a run with nothing to summarise has none
        summary_doc.save(run.summary(), run_dir)
    return run


def _closed_loop(users: int | None, think_time: float, concurrency: int | None, rate: float | None) -> bool:
    if users is None:
        if think_time:
            raise ConfigError("think_time is the pause of a closed loop's users: give users=N")
        return False
    if users < 1 or concurrency is not None or rate is not None:
        raise ConfigError(f"users must be an int >= 1 without concurrency or rate (a closed loop), got users={users}")
    if not think_time >= 0:
        raise ConfigError(f"think_time must be seconds >= 0, got {think_time}")
    return True


def _workload(source: str | Path | load.Workload, seed: int) -> load.Workload:
    if isinstance(source, load.Workload):
        return source
    text = str(source)
    if text.endswith(".toml") or (isinstance(source, str) and not Path(text).suffix and "/" not in text):
        return load.select(None, text, seed)
    return load.select(text, None, seed)


def _override_items(overrides: dict[str, Any] | Sequence[str]) -> list[str]:
    """--set items from a dict ({'router.name': 'cache_aware', 'servers': 2}) or from 'k=v' strings."""
    if isinstance(overrides, str):
        return [overrides]
    if isinstance(overrides, dict):
        return [f"{k}={_toml_literal(v)}" for k, v in overrides.items()]
    return list(overrides)


def _toml_literal(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(v)
