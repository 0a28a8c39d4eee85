"""A run's deployment as the report shows it (model, GPU type and count, TP, pools as XpYd, router), from run.json."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Deployment:
    model: str | None
    gpu: str | None  # GPU types, "H100" or "H100 + A100"
    gpus: int | None  # instances x TP summed over the pools; None when run.json does not say (real endpoints)
    tp: str | None  # "1", or per pool "prefill 2, decode 1"
    pools: str | None  # "2P2D", "8 colocated"
    router: str | None

    def text(self) -> str:
        parts = [self.model, self.pools, f"{self.gpus} x {self.gpu}" if self.gpus else self.gpu]
        parts += [f"TP {self.tp}" if self.tp else None, f"router {self.router}" if self.router else None]
        return ", ".join(p for p in parts if p) or "not recorded"


ROLE_LETTER = {"prefill": "P", "decode": "D"}


def _pools_text(pools: list[tuple[str, dict[str, Any]]]) -> str | None:
    if not pools:
        return None
    counts: dict[str, int] = {}
    for _, p in pools:
        role = str(p.get("role", "colocated"))
        counts[role] = counts.get(role, 0) + int(p.get("instances", 1))
    if set(counts) <= set(ROLE_LETTER):  # disaggregated: the XpYd every paper writes
        return "".join(f"{counts[r]}{ROLE_LETTER[r]}" for r in ("prefill", "decode") if r in counts)
    return ", ".join(f"{n} {role}" for role, n in counts.items())


def _tp_text(pools: list[tuple[str, dict[str, Any]]]) -> str | None:
    tps = [(str(p.get("role", name)), int(p.get("tp", 1))) for name, p in pools]
    if not tps:
        return None
    if len({tp for _, tp in tps}) == 1:
        return str(tps[0][1])
    return ", ".join(f"{role} {tp}" for role, tp in tps)


def deployment(manifest: dict[str, Any]) -> Deployment:
    """What run.json's target says about the serving deployment; fields it does not hold are None."""
    target = manifest.get("target") or {}
    params = target.get("params") or {}
    raw_pools: dict[str, Any] = params["pools"] if isinstance(params.get("pools"), dict) else {}
    pools = [(str(k), v) for k, v in raw_pools.items() if isinstance(v, dict)]
    gpus = sum(int(p.get("instances", 1)) * int(p.get("tp", 1)) for _, p in pools) if pools else None
    types = list(dict.fromkeys(str(p["gpu"]) for _, p in pools if p.get("gpu")))
    router = params.get("router")
    return Deployment(
        model=params.get("model") or target.get("model"),
        gpu=" + ".join(types) or params.get("gpu"),
        gpus=gpus or params.get("gpus"),
        tp=_tp_text(pools) or (str(params["tp"]) if params.get("tp") else None),
        pools=_pools_text(pools),
        router=router.get("name") if isinstance(router, dict) else router,
    )
