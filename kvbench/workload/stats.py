"""Trace statistics (`kvbench trace info`): lengths, arrivals, prefix reuse and a global-LRU hit-ratio curve.

Definitions follow ../shared/traces/SOURCES.md §9: the infinite-cache block hit ratio is the sum over requests of
the leading run of hash ids seen in any earlier request, over the sum of hash ids; the LRU figure is one global
LRU of floor(capacity/block) blocks, where a request's hit is the leading run of resident ids, after which every
id of the request is inserted or touched (in prompt order). Percentiles use numpy's linear interpolation.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container, Iterable, Sequence

import numpy as np

from kvbench.records import Request
from kvbench.units import MOONCAKE_BLOCK_TOKENS, ns_to_s


def _pcts(values) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    if not len(a):
        return {"mean": float("nan"), "p50": float("nan"), "p99": float("nan"), "max": float("nan")}
    p50, p99 = np.percentile(a, [50, 99])
    return {"mean": float(a.mean()), "p50": float(p50), "p99": float(p99), "max": float(a.max())}


def _leading_run(ids: Sequence[int], held: Container[int]) -> int:
    """How many of `ids`, from the first, are in `held` (a prefix hit stops at the first miss)."""
    run = 0
    for h in ids:
        if h not in held:
            break
        run += 1
    return run


class _Lru:
    """One global LRU of `capacity` blocks, as the simulator's tiers keep them (sim/kvcache.Tier, without tiers
    below): a request hits its leading run of resident ids, then every id is inserted or refreshed in prompt order."""

    __slots__ = ("capacity", "blocks")

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity = max(capacity_blocks, 0)
        self.blocks: OrderedDict[int, None] = OrderedDict()  # oldest first

    def hit_then_insert(self, ids: Sequence[int]) -> int:
        blocks = self.blocks
        run = _leading_run(ids, blocks)
        for h in ids:
            blocks[h] = None
            blocks.move_to_end(h)
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)
        return run


class _Reuse:
    """Prefix reuse of a request stream: infinite cache (seen ids) and one LRU per capacity."""

    __slots__ = ("seen", "total_blocks", "hit_blocks", "hit_tokens", "lrus", "lru_hits")

    def __init__(self, lru_tokens: Iterable[int], block_tokens: int) -> None:
        self.seen: set[int] = set()
        self.total_blocks = self.hit_blocks = self.hit_tokens = 0
        self.lrus = {cap: _Lru(cap // block_tokens) for cap in lru_tokens}
        self.lru_hits = dict.fromkeys(self.lrus, 0)

    def add(self, r: Request) -> None:
        ids = r.hash_ids
        run = _leading_run(ids, self.seen)
        self.seen.update(ids)
        self.total_blocks += len(ids)
        self.hit_blocks += run
        self.hit_tokens += min(run * r.block_tokens, r.input_tokens)
        for cap, lru in self.lrus.items():
            self.lru_hits[cap] += lru.hit_then_insert(ids)

    def figures(self, input_total: int) -> dict:
        has = self.total_blocks > 0
        return {
            "total_blocks": self.total_blocks if has else None,
            "distinct_blocks": len(self.seen) if has else None,
            "block_hit_ratio": self.hit_blocks / self.total_blocks if has else None,
            "token_hit_ratio": self.hit_tokens / input_total if has and input_total else None,
            "lru_block_hit_ratio": {
                str(cap): hits / self.total_blocks if has else None for cap, hits in self.lru_hits.items()
            },
        }


def trace_stats(requests: Iterable[Request], lru_tokens: Iterable[int] = ()) -> dict:
    """All figures of the SOURCES.md table for one request stream (hash-based ones are None without hash ids)."""
    arrivals, ins, outs, reasons = [], [], [], []
    sessions: set[int] = set()
    caps = list(lru_tokens)
    reuse = None
    for r in requests:
        if reuse is None:
            reuse = _Reuse(caps, r.block_tokens)
        arrivals.append(r.arrival_ns)
        ins.append(r.input_tokens)
        outs.append(r.output_tokens)
        reasons.append(r.reason_tokens)
        if r.session_id >= 0:
            sessions.add(r.session_id)
        if r.hash_ids:
            reuse.add(r)
    t = np.asarray(arrivals, dtype=np.int64)
    gaps = np.diff(t).astype(np.float64)
    duration_s = ns_to_s(int(t[-1] - t[0])) if len(t) else 0.0
    return {
        "requests": len(t),
        "sessions": len(sessions),
        "duration_s": duration_s,
        "rate_per_s": len(t) / duration_s if duration_s > 0 else None,
        "interarrival_cv": float(gaps.std() / gaps.mean()) if len(gaps) and gaps.mean() > 0 else None,
        "input_tokens": _pcts(ins),
        "output_tokens": _pcts(outs),
        "reason_tokens_mean": float(np.mean(reasons)) if reasons else 0.0,
        **(reuse or _Reuse(caps, MOONCAKE_BLOCK_TOKENS)).figures(
            int(np.sum(np.asarray(ins, dtype=np.int64))) if ins else 0
        ),
    }


def _fmt_num(v, digits: int = 1) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, int) or float(v).is_integer():
        return f"{int(v):,}"
    return f"{v:,.{digits}f}"


def _fmt_pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:.2f} %"


def format_table(name: str, s: dict) -> str:
    """The statistics as an aligned two-column text table."""
    rows = [
        ("requests", _fmt_num(s["requests"])),
        ("sessions", _fmt_num(s["sessions"]) if s["sessions"] else "-"),
        ("duration", f"{s['duration_s']:,.1f} s"),
        ("mean request rate", "n/a" if s["rate_per_s"] is None else f"{s['rate_per_s']:.2f} req/s"),
        ("inter-arrival CV", "n/a" if s["interarrival_cv"] is None else f"{s['interarrival_cv']:.2f}"),
    ]
    for key, label in (("input_tokens", "input tokens"), ("output_tokens", "output tokens")):
        p = s[key]
        rows.append(
            (f"{label} mean / p50 / p99 / max", " / ".join(_fmt_num(p[k]) for k in ("mean", "p50", "p99", "max")))
        )
    if s["reason_tokens_mean"]:
        rows.append(("reason tokens mean", _fmt_num(s["reason_tokens_mean"])))
    rows += [
        ("total / distinct blocks", f"{_fmt_num(s['total_blocks'])} / {_fmt_num(s['distinct_blocks'])}"),
        ("infinite-cache hit ratio (blocks)", _fmt_pct(s["block_hit_ratio"])),
        ("infinite-cache hit ratio (tokens)", _fmt_pct(s["token_hit_ratio"])),
    ]
    for cap, ratio in s["lru_block_hit_ratio"].items():
        rows.append((f"global LRU {_fmt_tokens(int(cap))} tokens hit ratio", _fmt_pct(ratio)))
    width = max(len(k) for k, _ in rows)
    return "\n".join([name] + [f"  {k:<{width}}  {v}" for k, v in rows])


def _fmt_tokens(n: int) -> str:
    for div, suffix in ((10**9, "G"), (10**6, "M"), (10**3, "k")):
        if n >= div and n % (div // 10) == 0:
            return f"{n / div:g}{suffix}"
    return f"{n:,}"
