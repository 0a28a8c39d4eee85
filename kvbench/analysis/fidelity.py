"""Sim vs real: the same workload's figures on both runs side by side, with the sim's relative error per figure.

relative error = (sim - real) / real, per statistic of a distribution (TTFT, TPOT, ITL, E2E: p50, p90, p99) and
per scalar (throughput, prefix hit ratio; a ratio is also compared as a difference in points, its relative error
is undefined at 0). Per request, the two runs are joined on req_id: the same trace replayed on both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.analysis.catalogue import by_key
from kvbench.analysis.figures import summary
from kvbench.analysis.runset import open_runs, run_names
from kvbench.analysis.tables import prepare

if TYPE_CHECKING:
    import pandas

DISTRIBUTIONS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
STATS = ("p50", "p90", "p99")
SCALARS = ("request_throughput", "output_token_throughput", "prefix_hit_ratio")
PER_REQUEST = (("ttft_ms", "ttft_ns"), ("tpot_ms", "tpot_ns"), ("e2e_ms", "e2e_ns"))  # key, per_request column


@dataclass(frozen=True)
class Fidelity:
    sim: str  # run names
    real: str
    rows: list[dict[str, Any]]  # key, label, unit, stat, sim, real, rel_error
    pairs: pandas.DataFrame  # per request in both runs: req_id, input_tokens, output_tokens, <key>_sim, <key>_real

    def worst(self, stat: str) -> float | None:
        """Largest |relative error| over the latency distributions' `stat` (p50, p90 or p99)."""
        errs = [abs(r["rel_error"]) for r in self.rows if r["stat"] == stat and r["rel_error"] is not None]
        return max(errs, default=None)

    def error(self, key: str, stat: str | None = None) -> float | None:
        return next(r["rel_error"] for r in self.rows if r["key"] == key and r["stat"] == stat)


def rel_error(sim: float | None, real: float | None) -> float | None:
    """(sim - real) / real; None when either is missing or real is 0."""
    if sim is None or real is None or real == 0:
        return None
    return (sim - real) / real


def _row(key: str, stat: str | None, sim: dict[str, Any], real: dict[str, Any]) -> dict[str, Any]:
    m = by_key(key)
    k = f"{key}.{stat}" if stat else key
    return {
        "key": key,
        "label": m.label,
        "unit": m.unit,
        "stat": stat,
        "sim": sim.get(k),
        "real": real.get(k),
        "rel_error": rel_error(sim.get(k), real.get(k)),
    }


def figure_rows(sim: dict[str, Any], real: dict[str, Any]) -> list[dict[str, Any]]:
    """The comparison table from two summary dicts (kvbench.analysis.figures.summary)."""
    rows = [_row(key, stat, sim, real) for key in DISTRIBUTIONS for stat in STATS]
    return rows + [_row(key, None, sim, real) for key in SCALARS]


def request_pairs(sim_run: Path, real_run: Path) -> pandas.DataFrame:
    """Finished requests of both runs joined on req_id, latencies in ms (columns <key>_sim, <key>_real)."""
    from kvbench.units import ns_to_ms

    names = run_names([Path(sim_run), Path(real_run)])
    con = open_runs([sim_run, real_run])
    try:
        prepare(con)
        df = con.execute(
            "SELECT run, req_id, input_tokens, output_tokens, ttft_ns, tpot_ns, e2e_ns FROM per_request "
            "WHERE status = 'FINISH' ORDER BY req_id"
        ).df()
    finally:
        con.close()
    for key, col in PER_REQUEST:
        df[key] = ns_to_ms(df.pop(col).astype(float))
    sim, real = (df[df["run"] == n].drop(columns="run") for n in names)
    return sim.merge(real, on=["req_id", "input_tokens", "output_tokens"], suffixes=("_sim", "_real"))


def compare(sim_run: str | Path, real_run: str | Path) -> Fidelity:
    """The fidelity of `sim_run` against `real_run` (both kvbench run directories of the same workload)."""
    names = run_names([Path(sim_run), Path(real_run)])
    rows = figure_rows(summary(sim_run), summary(real_run))
    return Fidelity(names[0], names[1], rows, request_pairs(Path(sim_run), Path(real_run)))
