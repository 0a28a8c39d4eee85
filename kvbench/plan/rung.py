"""One candidate at one rung of a plan: a goodput search of its deployment on the rung's prefix of the trace, and
the candidate's row (goodput per GPU, latency figures at the best passing probe, cache hits, the work it cost).
Runs in a worker process, a Ray task or the driver alike."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROW_FILE = "rung.json"  # the candidate's row at this rung, written once its search ended
MIN_SHARE = 16  # the search halves its rate down to the trace's own rate / MIN_SHARE at the lowest
FIGURES = ("ttft_ms.p50", "ttft_ms.p90", "tpot_ms.p50", "tpot_ms.p90", "prefix_hit_ratio", "slo_attainment")


@dataclass(frozen=True)
class RungJob:
    """Everything one candidate's search at one rung needs, plain data."""

    candidate: str
    settings: tuple[tuple[str, Any], ...]  # Candidate.describe(), for the row
    profile: str  # the candidate's sim profile (a TOML file)
    rung: int
    requests: int  # the trace's first N requests
    workload: str | None
    trace: str | None
    seed: int
    slo: str
    attainment: float
    precision: float
    start_rate: float | None  # the candidate's goodput at the previous rung (None: the trace's own rate)

    def key(self) -> dict[str, Any]:
        """What makes a finished search reusable on a rerun."""
        return {k: v for k, v in vars(self).items() if k not in ("settings", "start_rate")}


def run_rung(job: RungJob, out_dir: Path) -> dict[str, Any]:
    """The candidate's goodput search into `out_dir` (probe runs rate-*/, goodput.json/csv) and its row; the row
    is also written to out_dir/rung.json when the search ended (an interrupted one leaves no row)."""
    from kvbench.analysis.slo import parse_slo
    from kvbench.plan.goodput import ProbePlan, run_probe, search, trace_rate, write_result
    from kvbench.targets import resolve
    from kvbench.workload import load

    base = {"candidate": job.candidate, "rung": job.rung, "requests": job.requests, **dict(job.settings)}
    try:
        wl = load.select(Path(job.trace) if job.trace else None, job.workload, job.seed)
        spec = resolve(job.profile)
        slo = parse_slo(job.slo)
        own = trace_rate([r.arrival_ns for r in load.shape(wl, max_requests=job.requests).requests()])
        out_dir.mkdir(parents=True, exist_ok=True)
        plan = ProbePlan(wl, spec, slo, out_dir, own, "scale", job.requests, job.seed)
        start = job.start_rate or own  # a deployment failing at 1/16 of the trace's own rate is out of the race
        result = search(lambda r: run_probe(plan, r), start, job.attainment, job.precision, min_rate=own / MIN_SHARE)
    except KeyboardInterrupt:
        return base | {"status": "interrupted"}
    except Exception as e:  # a candidate that fails must not end the plan: its row says why
        return base | {"status": "error", "error": f"{type(e).__name__}: {e}"}
    row = base | {"status": "complete", **_figures(replace(result, gpus=dict(job.settings)["gpus"]), slo)}
    # probe directories relative to the search's: a Ray task ran it in a scratch directory elsewhere
    probes = tuple(replace(p, run_dir=Path(p.run_dir).name) for p in result.probes)
    write_result(replace(result, probes=probes, gpus=row["gpus"], slo=slo.as_ms()), out_dir)
    (out_dir / ROW_FILE).write_text(json.dumps(row | {"key": job.key()}, indent=1, default=str) + "\n")
    return row


def _figures(result: Any, slo: Any) -> dict[str, Any]:
    """Goodput (achieved req/s) and per GPU, the search's cost, and the figures of the best passing probe."""
    from kvbench.analysis.figures import summary

    best = result.probe_at(result.rate)
    figs = summary(best.run_dir, slo) if best is not None else {}
    tpot = figs.get("tpot_ms.p50")
    return {
        "goodput": result.goodput,
        "goodput_per_gpu": result.per_gpu,
        "nominal_rate": result.rate,
        "fail_rate": result.fail_rate,
        "probes": len(result.probes),
        "simulated_requests": sum(p.requests for p in result.probes),
        **{k: figs.get(k) for k in FIGURES},
        "user_tokens_per_s": 1000.0 / tpot if tpot else None,  # one user's decode speed at the median TPOT
        "probe": Path(best.run_dir).name if best is not None else None,  # the best passing probe's run
    }


def finished_row(job: RungJob, out_dir: Path) -> dict[str, Any] | None:
    """The row of a search of exactly this job that ended earlier, else None."""
    try:
        row = json.loads((out_dir / ROW_FILE).read_text())
    except (OSError, ValueError):
        return None
    key = row.pop("key", None)
    return row if json.dumps(key, sort_keys=True, default=str) == json.dumps(job.key(), sort_keys=True) else None
