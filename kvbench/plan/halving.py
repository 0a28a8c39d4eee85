"""Running a plan into DIR: the candidates built and pruned, successive halving over prefixes of the trace (every
candidate's goodput on the shortest, the best share on each longer one, the final few on the longest), the
ranking (by goodput per GPU, or per dollar-hour when the spec prices its GPUs), the Pareto fronts and the chosen
deployment as a preset. Finished searches are kept and reused."""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbench.config import ConfigError
from kvbench.plan.candidates import Candidate, enumerate_candidates, profile, prune
from kvbench.plan.pareto import mark_fronts, rank_key
from kvbench.plan.planspec import PlanSpec
from kvbench.plan.preset import to_toml
from kvbench.plan.prices import add_prices, ranked_by
from kvbench.plan.progress import Counts
from kvbench.plan.rung import RungJob, finished_row, run_rung
from kvbench.plan.tasks import run_tasks

MANIFEST, TABLE, RUNGS, BEST = "plan.json", "plan.parquet", "rungs.parquet", "best.toml"
Show = Callable[[str, Counts], None]  # a rung's label and its counts


@dataclass(frozen=True)
class PlanResult:
    rows: list[dict[str, Any]]  # one per candidate, ranked: its deepest rung, or why it was pruned
    rung_rows: list[dict[str, Any]]  # one per candidate and rung it ran
    best: dict[str, Any] | None
    work: dict[str, Any]


def counts(n: int, rungs: int, keep: float, final: int) -> list[int]:
    """Candidates per rung: all n on the first, ceil(keep x the previous) but at least `final` on the middle
    ones, `final` on the last (never more than the rung before)."""
    out = [n]
    for i in range(1, rungs):
        nxt = final if i == rungs - 1 else max(final, math.ceil(out[-1] * keep))
        out.append(min(out[-1], nxt))
    return out


def prepare(spec: PlanSpec, out: Path) -> tuple[list[Candidate], list[dict[str, Any]]]:
    """Make DIR, build every candidate's profile (DIR/candidates/NAME.toml) and prune; the live candidates and the
    rows of the pruned ones."""
    from kvbench.analysis.slo import parse_slo
    from kvbench.workload import load

    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST).is_file())):
        raise ConfigError(f"{out}: exists and is not an empty directory or an earlier plan's (no {MANIFEST})")
    (out / "candidates").mkdir(parents=True, exist_ok=True)
    f = spec.file
    wl = load.select(Path(spec.trace) if spec.trace else None, spec.workload, f.seed)
    requests = list(load.shape(wl, max_requests=f.halving.requests[-1]).requests())
    live, pruned = [], []
    cands = enumerate_candidates(spec)
    for cand in cands:
        params = profile(spec, cand)
        why = prune(spec, cand, params, requests, parse_slo(f.slo))
        if why:
            pruned.append({"candidate": cand.name, **cand.describe(), "status": "pruned", "error": why})
            continue
        (out / "candidates" / f"{cand.name}.toml").write_text(to_toml(params, f"kvbench plan {spec.name}"))
        live.append(cand)
    add_prices(pruned, costs(spec, cands))
    doc = {"name": spec.name, "source": spec.source, **_settings(spec)}
    doc |= {"candidates": [c.name for c in live], "pruned": len(pruned)}
    (out / MANIFEST).write_text(json.dumps(doc, indent=2) + "\n")
    return live, pruned


def _settings(spec: PlanSpec) -> dict[str, Any]:
    """What the plan asked, for plan.json (the report states it): model, budget, SLOs, halving, prices."""
    f = spec.file
    h = f.halving
    return {
        "model": f.model,
        "gpu_budget": f.gpu_budget,
        "slo": f.slo,
        "attainment": f.attainment,
        "halving": {"requests": list(h.requests), "keep": h.keep, "final": h.final},
        "prices": dict(f.prices),
        "ranked_by": ranked_by(f.prices),
    }


def costs(spec: PlanSpec, cands: list[Candidate]) -> dict[str, float]:
    """Each candidate's dollars per hour; empty in an unpriced plan."""
    prices = spec.file.prices
    return {c.name: c.dollars_per_hour(prices) for c in cands} if prices else {}


def run_plan(
    spec: PlanSpec, out: Path, workers: int | None = None, ray: str | None = None, show: Show | None = None
) -> PlanResult:
    """Successive halving over the rungs; DIR/plan.parquet and rungs.parquet are written also when interrupted
    (from the searches that ended), best.toml only when every rung ran."""
    live, pruned = prepare(spec, out)
    h = spec.file.halving
    sizes = counts(len(live), len(h.requests), h.keep, h.final)
    rung_rows: list[dict[str, Any]] = []
    alive: list[Candidate] = live
    start: dict[str, float] = {}  # each candidate's goodput at the previous rung: where its next search begins
    by, cost = ranked_by(spec.file.prices), costs(spec, live)
    completed = False
    try:
        for i, n_requests in enumerate(h.requests):
            jobs = [_job(spec, out, c, i, n_requests, start.get(c.name)) for c in alive]
            label = f"rung {i + 1}/{len(h.requests)}: {n_requests:,} requests"
            rows = _run_rung(jobs, out, workers, ray, show, label, rung_rows)
            start = {r["candidate"]: r["goodput"] for r in rows if r.get("goodput")}
            add_prices(rows, cost)
            if i + 1 < len(h.requests):
                best_first = sorted(rows, key=lambda r: rank_key(r, by))
                keep = {r["candidate"] for r in best_first[: sizes[i + 1]] if r.get("goodput")}
                alive = [c for c in alive if c.name in keep]
        completed = True
    finally:
        result = finish(spec, out, live, pruned, rung_rows, completed)
    return result


def _job(spec: PlanSpec, out: Path, cand: Candidate, rung: int, n: int, start: float | None) -> RungJob:
    f = spec.file
    last = rung == len(f.halving.requests) - 1
    return RungJob(
        candidate=cand.name,
        settings=tuple(cand.describe().items()),
        profile=str((out / "candidates" / f"{cand.name}.toml").resolve()),
        rung=rung,
        requests=n,
        workload=spec.workload,
        trace=spec.trace,
        seed=f.seed,
        slo=f.slo,
        attainment=f.attainment,
        precision=f.halving.final_precision if last else f.halving.precision,
        start_rate=start,
    )


def rung_dir(out: Path, job: RungJob) -> Path:
    return out / "rungs" / f"{job.rung + 1}-{job.requests}" / job.candidate


def _run_rung(
    jobs: list[RungJob],
    out: Path,
    workers: int | None,
    ray: str | None,
    show: Show | None,
    label: str,
    sink: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """The rows of every job of one rung: searches finished earlier are reused, the rest run. Each row is also
    added to `sink` as it comes, so an interrupted plan still tables the searches that ended."""
    rows: dict[str, dict[str, Any]] = {}
    todo = []
    for job in jobs:
        row = finished_row(job, rung_dir(out, job))
        if row is not None:
            rows[job.candidate] = row
            sink.append(row)
        else:
            shutil.rmtree(rung_dir(out, job), ignore_errors=True)  # an unfinished search: start it afresh
            todo.append(job)
    c = Counts(len(jobs), done=len(rows), skipped=len(rows))
    tell = (lambda x: show(label, x)) if show is not None else (lambda x: None)
    tell(c)
    n_workers = workers or os.cpu_count() or 1
    for row in run_tasks(run_rung, todo, lambda j: rung_dir(out, j), n_workers, ray, c, tell):
        rows[row["candidate"]] = row
        sink.append(row)
        c.done += row["status"] == "complete"
        c.failed += row["status"] != "complete"
        tell(c)
    return [rows[j.candidate] for j in jobs if j.candidate in rows]


def finish(
    spec: PlanSpec,
    out: Path,
    live: list[Candidate],
    pruned: list[dict[str, Any]],
    rung_rows: list[dict[str, Any]],
    completed: bool = True,
) -> PlanResult:
    """Rank, mark the fronts, write plan.parquet, rungs.parquet and, when every rung ran, best.toml (the best
    candidate of the deepest rung that has a goodput), and the work successive halving did against an exhaustive
    search."""
    import pandas as pd

    by = ranked_by(spec.file.prices)
    add_prices(rung_rows, costs(spec, live))  # rows of a rung that was interrupted were not priced yet
    mark_fronts(rung_rows, by)
    deepest: dict[str, dict[str, Any]] = {}
    for r in rung_rows:
        deepest[r["candidate"]] = r  # rungs run in order: the last row seen is the deepest
    ranked = sorted(deepest.values(), key=lambda r: rank_key(r, by))
    for k, r in enumerate(ranked, 1):
        r["rank"] = k
    best = next((r for r in ranked if r.get("goodput")), None) if completed else None
    (out / BEST).unlink(missing_ok=True)  # an earlier run's choice must not outlive a rerun
    if best is not None:
        text = (out / "candidates" / f"{best['candidate']}.toml").read_text()
        (out / BEST).write_text(text.replace(f"# kvbench plan {spec.name}", f"# chosen by kvbench plan {spec.name}", 1))
    work = _work(spec, live, rung_rows)
    rows = ranked + pruned
    for name, table in ((TABLE, rows), (RUNGS, rung_rows)):
        if table:
            tmp = out / f"{name}.tmp"
            pd.DataFrame(table).to_parquet(tmp, index=False)
            os.replace(tmp, out / name)
    status = "complete" if completed else "interrupted"
    doc = json.loads((out / MANIFEST).read_text()) | {
        "status": status,
        "best": best and best["candidate"],
        "work": work,
    }
    (out / MANIFEST).write_text(json.dumps(doc, indent=2) + "\n")
    return PlanResult(rows, rung_rows, best, work)


def _work(spec: PlanSpec, live: list[Candidate], rung_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Simulated requests and probes spent, in full-length simulations (the last rung's request count), against
    an exhaustive search: every live candidate searched as the last rung's candidates were (their mean probes)."""
    n_last = spec.file.halving.requests[-1]
    done = [r for r in rung_rows if r.get("status") == "complete"]
    final = [r for r in done if r["requests"] == n_last]
    spent = sum(r["simulated_requests"] for r in done)
    mean_probes = sum(r["probes"] for r in final) / len(final) if final else None
    return {
        "candidates": len(live),
        "searches": len(done),
        "probes": sum(r["probes"] for r in done),
        "simulated_requests": spent,
        "full_simulations": spent / n_last,
        "exhaustive_full_simulations": len(live) * mean_probes if mean_probes is not None else None,
    }
