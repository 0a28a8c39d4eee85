"""GPU prices of a plan: a deployment's dollars per hour from the user's price per GPU-hour of each GPU type, and
its goodput per dollar-hour, which ranks a priced plan (goodput per GPU does not compare an H100 with an H200)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kvbench.config import ConfigError

PER_GPU, PER_DOLLAR = "goodput_per_gpu", "goodput_per_dollar_hour"  # the figure a plan ranks by, unpriced / priced
Error = Callable[[tuple[str, ...], str], ConfigError]  # (key path under [prices], message) -> the error to raise


def check_prices(prices: Mapping[str, float], gpu_types: Iterable[str], error: Error) -> None:
    """No prices at all, or one for every GPU type searched; a key that names no GPU of the catalog is a typo."""
    from kvbench.sim.spec import gpu

    if not prices:
        return
    for name in prices:
        try:
            gpu(name)
        except ConfigError as e:
            raise error((name,), str(e)) from None
    missing = [g for g in dict.fromkeys(gpu_types) if g not in prices]
    if missing:
        given = ", ".join(prices)
        raise error((), f"no price for GPU type {', '.join(map(repr, missing))} searched (prices given: {given})")


def add_prices(rows: Iterable[dict[str, Any]], costs: Mapping[str, float]) -> None:
    """Add each row's dollars per hour (costs: candidate -> $/h) and goodput (req/s) per dollar-hour; rows of an
    unpriced plan (no costs) are left as they are."""
    for row in rows:
        cost = costs.get(row["candidate"])
        if cost is None:
            continue
        goodput = row.get("goodput")
        row["dollars_per_hour"] = cost
        row[PER_DOLLAR] = goodput / cost if goodput is not None else None


def ranked_by(prices: Mapping[str, float]) -> str:
    """The column a plan ranks and halves by: goodput per dollar-hour when prices are given, else per GPU."""
    return PER_DOLLAR if prices else PER_GPU
