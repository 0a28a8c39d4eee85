"""The report of a plan directory: what it asked, the ranking (deployments spelled out, the chosen one marked),
the Pareto fronts of each rung and the successive-halving rungs with the work they saved. Tables for HTML and
Markdown alike; figures in HTML only."""

from __future__ import annotations

from typing import Any

from kvbench.present import fmt
from kvbench.present.plandata import BY_LABEL, PlanData, deployment, gpu_types, last_requests, rung_rows, tiers
from kvbench.present.tables import Cell, Part, Section, Table

TOP = 20  # candidates in the ranking table; plan.parquet holds them all
CHOSEN = "★"
PRICED = {"goodput_per_dollar_hour": "req/s per $/h", "dollars_per_hour": "$/h"}  # first, in a priced plan
FIGURES = {  # plan.parquet column -> heading, here and in the terminal table of `kvbench plan`
    "goodput_per_gpu": "req/s/GPU",
    "goodput": "req/s",
    "gpus": "GPUs",
    "ttft_ms.p50": "TTFT p50 ms",
    "ttft_ms.p90": "TTFT p90 ms",
    "tpot_ms.p50": "TPOT p50 ms",
    "tpot_ms.p90": "TPOT p90 ms",
    "prefix_hit_ratio": "hit ratio",
}


def _columns(plan: PlanData) -> dict[str, str]:
    return (PRICED if "dollars_per_hour" in plan.table else {}) | FIGURES


def _fronts(row: Any) -> str:
    return ", ".join(name for name, key in (("user", "pareto_user"), ("TTFT", "pareto_ttft")) if bool(row.get(key)))


def ranking_table(plan: PlanData, top: int = TOP) -> Table:
    """The best `top` candidates: rank (★ the chosen one), deployment (pools and TP; below it the GPU type, router and
    cache tiers), the fronts it is on, its deepest rung and its figures at goodput."""
    columns = _columns(plan)
    head = ["#", "deployment: pools × TP; GPU, router, cache tiers", "fronts", "rung", *columns.values()]
    best = plan.manifest.get("best")
    rows = []
    for _, r in plan.ranked.head(top).iterrows():
        cls = "chosen" if r["candidate"] == best else ""
        rank = Cell(f"{int(r['rank'])} {CHOSEN}" if cls else str(int(r["rank"])), cls)
        name = Cell(deployment(r), cls, ci=f"{gpu_types(r)} · {r['router']} · {tiers(r)}")
        figures = [fmt.number(_value(r.get(c)), fmt.REPORT) for c in columns]
        rows.append([rank, name, _fronts(r) or "–", str(int(r["rung"]) + 1)])
        rows[-1] += figures if r["status"] == "complete" else [f"{r['status']}: {r.get('error') or ''}"]
    return Table(head, rows, num_from=3)


def _value(v: Any) -> Any:
    """numpy scalars as Python numbers (fmt treats them as text otherwise); NaN stays NaN."""
    return v.item() if hasattr(v, "item") else v


def pruned_table(plan: PlanData) -> Table | None:
    """Why candidates were dropped before anything ran, with how many for each reason."""
    if not len(plan.pruned):
        return None
    counts = plan.pruned.groupby("error", sort=False).size().sort_values(ascending=False, kind="stable")
    return Table(["pruned because", "candidates"], [[why, fmt.count(n)] for why, n in counts.items()])


def asked(plan: PlanData) -> str:
    """One sentence: model, budget, SLOs and attainment, what ranks, candidates searched and pruned, status."""
    m = plan.manifest
    slo = ", ".join(part.replace("=", " ≤ ") + " ms" for part in str(m.get("slo") or "").split(",") if part)
    prices = ", ".join(f"{g} ${fmt.short(p)}" for g, p in (m.get("prices") or {}).items())
    parts = [
        f"{m['model']} on at most {m['gpu_budget']} GPUs" if "model" in m else None,
        f"SLO {slo} for {fmt.share(m['attainment'])} of requests" if slo and "attainment" in m else None,
        f"ranked by {BY_LABEL[plan.by]}" + (f" at {prices} per GPU-hour" if prices else ""),
        f"{len(m.get('candidates') or [])} candidates searched, {m.get('pruned', 0)} pruned",
        f"status {m.get('status', 'running')}",
    ]
    return "; ".join(p for p in parts if p) + "."


def chosen_note(plan: PlanData) -> str:
    best = plan.manifest.get("best")
    if best is None:
        return "No deployment chosen: the plan did not finish, or no candidate met the SLOs at any probed rate."
    return f"{CHOSEN} chosen: {best}, written to {plan.path}/best.toml (kvbench replay --target {plan.path}/best.toml)."


def rungs_table(plan: PlanData) -> Table:
    head = ["rung", "prefix (requests)", "candidates searched", "failed", "kept for next rung", "probe runs"]
    rows = [
        [str(r["rung"]), fmt.count(r["requests"]), fmt.count(r["searched"]), fmt.count(r["failed"])]
        + [fmt.count(r["kept"], fmt.EN_DASH), fmt.count(r["probes"])]
        + [fmt.count(r["simulated_requests"]), fmt.number(r["full_simulations"], fmt.ONE_DECIMAL)]
        for r in rung_rows(plan)
    ]
    return Table([*head, "simulated requests", "full-length simulations"], rows, num_from=1)


def work_note(plan: PlanData) -> str:
    """The work successive halving did against an exhaustive search (every candidate on the full length)."""
    w = plan.manifest.get("work") or {}
    done, all_ = w.get("full_simulations"), w.get("exhaustive_full_simulations")
    n = last_requests(plan)
    if done is None or n is None:
        return "The plan has not recorded its work yet."
    text = f"{fmt.number(done, fmt.ONE_DECIMAL)} full-length simulations ({n:,} requests each) in all"
    if not all_:
        return text + "; no search reached the last rung, so no exhaustive estimate."
    saved = f"successive halving did {fmt.share(done / all_)} of the work" if done <= all_ else "no work saved"
    return (
        f"{text}, against ~{fmt.number(all_, fmt.ONE_DECIMAL)} for an exhaustive search (every candidate searched on "
        f"the full length, at the mean probe runs of the last rung's searches): {saved}."
    )


FRONTS_CAPTION = (
    "Each grey point is a candidate at its goodput on the rung's prefix of the trace: {y} against one user's decode "
    "rate (left, higher is better) and TTFT p90 (right, lower is better), axes from zero. The blue line joins the "
    "Pareto front (no candidate of the rung is at least as good in both and better in one); the star is the chosen "
    "deployment. Rungs are drawn apart: their figures come from replays of different lengths."
)
WORK_TITLE = "Candidates and work per rung"
WORK_CAPTION = (
    "Left: candidates searched on each rung (the prefix length below). Right: what each rung simulated, in "
    "full-length simulations, beside the estimate for an exhaustive search of every candidate on the full length."
)


def fronts_section(plan: PlanData, key: str) -> Section:
    from kvbench.present.planplots import pareto_fronts
    from kvbench.present.plots import svg

    title, caption = "Pareto fronts per rung", FRONTS_CAPTION.format(y=BY_LABEL[plan.by])
    done = plan.rungs[plan.rungs["status"] == "complete"] if "status" in plan.rungs else plan.rungs
    if not len(done) or plan.by not in done or done[plan.by].isna().all():
        return Section(key, title, caption, note="No search has a goodput yet: no front to draw.")
    fig = pareto_fronts(done, plan.by, BY_LABEL[plan.by], plan.manifest.get("best"))
    return Section(key, title, caption, svg(fig))


def work_section(plan: PlanData, key: str) -> Section:
    from kvbench.present.planplots import halving_work
    from kvbench.present.plots import svg

    rows = rung_rows(plan)
    if not rows:
        return Section(key, WORK_TITLE, WORK_CAPTION, note="No search has ended yet.")
    exhaustive = (plan.manifest.get("work") or {}).get("exhaustive_full_simulations")
    return Section(key, WORK_TITLE, WORK_CAPTION, svg(halving_work(rows, exhaustive)))


def plan_parts(plans: list[PlanData], html: bool) -> list[Part]:
    """Per plan: the ranking (and the pruned), the fronts (HTML only) and the rungs with their work."""
    out: list[Part] = []
    for i, plan in enumerate(plans):
        key = "plan" if len(plans) == 1 else f"plan-{i + 1}"
        name = f": {plan.name}" if len(plans) > 1 else ""
        shown = len(plan.ranked)
        more = f" The top {TOP} of {shown:,} ranked candidates; plan.parquet holds them all." if shown > TOP else ""
        tables = [ranking_table(plan)] + [t for t in (pruned_table(plan),) if t is not None]
        out.append(Part(key, f"Plan {plan.name}", tables, note=chosen_note(plan) + more, intro=asked(plan)))
        if html:
            out.append(Part(f"{key}-fronts", f"Pareto fronts{name}", figures=[fronts_section(plan, f"{key}-front")]))
        figures = [work_section(plan, f"{key}-work")] if html else []
        rungs = Part(f"{key}-rungs", f"Successive halving{name}", [rungs_table(plan)], figures, work_note(plan))
        out.append(rungs)
    return out
