"""A plan directory as the report reads it: plan.json, the ranking (plan.parquet), the rungs (rungs.parquet), each
candidate's deployment spelled out, and what successive halving ran per rung against an exhaustive search."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.config import ConfigError
from kvbench.plan.halving import MANIFEST, RUNGS, TABLE
from kvbench.plan.prices import PER_DOLLAR, PER_GPU

if TYPE_CHECKING:
    import pandas

TIERS = {"hbm": "HBM", "dram": "HBM + DRAM", "pool": "HBM + DRAM + pool"}
BY_LABEL = {PER_GPU: "goodput per GPU (req/s/GPU)", PER_DOLLAR: "goodput per dollar-hour (req/s per $/h)"}


def is_plan_dir(path: Path) -> bool:
    """A directory `kvbench plan` wrote (its plan.json), as opposed to a run or a goodput search."""
    return path.is_dir() and (path / MANIFEST).is_file() and not (path / "run.json").is_file()


@dataclass(frozen=True)
class PlanData:
    name: str
    path: str
    manifest: dict[str, Any]  # plan.json
    table: pandas.DataFrame  # plan.parquet: the ranked candidates, then the pruned ones
    rungs: pandas.DataFrame  # rungs.parquet: one row per candidate and rung it ran (empty before any ended)

    @property
    def by(self) -> str:
        """The column the plan ranked by: goodput per dollar-hour when it priced its GPUs, else per GPU."""
        return self.manifest.get("ranked_by") or (PER_DOLLAR if PER_DOLLAR in self.table else PER_GPU)

    @property
    def ranked(self) -> pandas.DataFrame:
        """The candidates that ran a search, best first."""
        if "rank" not in self.table:
            return self.table.iloc[0:0]
        return self.table[self.table["rank"].notna()].sort_values("rank")

    @property
    def pruned(self) -> pandas.DataFrame:
        return self.table[self.table["status"] == "pruned"] if "status" in self.table else self.table.iloc[0:0]


def read_plan(path: Path) -> PlanData:
    """The plan at `path`; ConfigError (one line) when it is not a readable plan directory."""
    import pandas as pd

    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path / MANIFEST}: not a readable plan manifest ({e})") from None
    if not (path / TABLE).is_file():
        raise ConfigError(f"{path}: the plan has no {TABLE} yet (no search ended)")
    try:
        table = pd.read_parquet(path / TABLE)
        rungs = pd.read_parquet(path / RUNGS) if (path / RUNGS).is_file() else pd.DataFrame()
    except Exception as e:  # pyarrow errors on a damaged file: name it, keep one line
        raise ConfigError(f"{path}: cannot read the plan's tables ({str(e).splitlines()[0]})") from None
    return PlanData(str(manifest.get("name") or path.resolve().name), str(path), manifest, table, rungs)


def deployment(row: Any) -> str:
    """'8 × TP2 colocated' (replicas × TP) or '10P × TP1 + 3D × TP2' (xPyD with each pool's TP)."""
    tps = str(row["tp"]).split("/")
    if row["layout"] == "colocated":
        return f"{int(row['replicas'])} × TP{tps[0]} colocated"
    return f"{int(row['prefill'])}P × TP{tps[0]} + {int(row['decode'])}D × TP{tps[-1]}"


def gpu_types(row: Any) -> str:
    """'H100', or per pool 'P H100, D H200' when a PD candidate mixes types."""
    types = str(row["gpu_type"]).split("/")
    return types[0] if len(set(types)) == 1 else f"P {types[0]}, D {types[-1]}"


def tiers(row: Any) -> str:
    return TIERS.get(str(row["tiers"]), str(row["tiers"]))


def last_requests(plan: PlanData) -> int | None:
    """The longest prefix (the last rung's requests): what a full-length simulation means."""
    asked = (plan.manifest.get("halving") or {}).get("requests")
    if asked:
        return int(asked[-1])
    return int(plan.rungs["requests"].max()) if len(plan.rungs) else None


def rung_rows(plan: PlanData) -> list[dict[str, Any]]:
    """Per rung: its prefix length, candidates searched (completed, failed), kept for the next rung, probe runs,
    simulated requests and those in full-length simulations."""
    if not len(plan.rungs):
        return []
    n_last = last_requests(plan)
    out: list[dict[str, Any]] = []
    groups = list(plan.rungs.groupby("rung", sort=True))
    for k, (rung, g) in enumerate(groups):
        done = g[g["status"] == "complete"]
        simulated = int(done["simulated_requests"].sum())
        out.append(
            {
                "rung": int(rung) + 1,
                "requests": int(g["requests"].iloc[0]),
                "searched": len(g),
                "failed": int((g["status"] != "complete").sum()),
                "kept": len(groups[k + 1][1]) if k + 1 < len(groups) else None,
                "probes": int(done["probes"].sum()),
                "simulated_requests": simulated,
                "full_simulations": simulated / n_last if n_last else None,
            }
        )
    return out
