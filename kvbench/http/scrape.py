"""Prometheus /metrics scraper: text exposition format -> rows of the server_metrics table at an interval."""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING

from kvbench.http.profile import EndpointProfile
from kvbench.target import RunContext
from kvbench.units import s_to_ns

if TYPE_CHECKING:
    import aiohttp


def parse_prometheus(text: str, prefixes: tuple[str, ...] = ()) -> list[tuple[str, str, float]]:
    """(name, labels, value) per sample line; `labels` is the text inside the braces, unparsed ("" if none).

    Comments and blank lines are skipped, so are samples whose family matches none of `prefixes` (empty = keep
    all) and lines that do not parse (a scrape must never stop a run).
    """
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] == "#":
            continue
        if prefixes and not line.startswith(prefixes):
            continue
        brace = line.find("{")
        if brace >= 0:
            close = line.rfind("}")
            if close < brace:
                continue
            name, labels, rest = line[:brace], line[brace + 1 : close], line[close + 1 :]
        else:
            name, _, rest = line.partition(" ")
            labels = ""
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])  # accepts NaN, +Inf, -Inf as Prometheus writes them
        except ValueError:
            continue
        if math.isnan(value) and fields[0] != "NaN":
            continue
        out.append((name.strip(), labels, value))
    return out


def preload(prof: EndpointProfile) -> None:
    """Import the scraper's HTTP client now if the profile scrapes. The target's prepare step calls this before the
    run's t0: importing aiohttp takes a few hundred ms, which inside the run would hold up the first requests."""
    if prof.scrape_interval_s > 0:
        import aiohttp  # noqa: F401


async def scrape_once(session: aiohttp.ClientSession, prof: EndpointProfile, ctx: RunContext) -> int:
    """Fetch and store one scrape; returns the rows written (0 on any failure)."""
    import aiohttp

    try:
        async with session.get(prof.root_url + prof.metrics_path) as resp:
            if resp.status != 200:
                return 0
            text = await resp.text(errors="replace")
    except (TimeoutError, aiohttp.ClientError, OSError, RuntimeError):  # RuntimeError: session closed
        return 0
    t_ns = time.monotonic_ns() - ctx.t0_ns
    rows = [(t_ns, n, lab, v) for n, lab, v in parse_prometheus(text, tuple(prof.metric_prefixes))]
    ctx.log.table("server_metrics").extend(rows)
    return len(rows)


async def scrape_loop(prof: EndpointProfile, ctx: RunContext) -> None:
    """Scrape at t0 + k * interval (absolute times, no drift) until cancelled; one final scrape on the way out."""
    import aiohttp  # imported by preload() before t0: only runs that scrape pay for it

    from kvbench.http.probe import auth_headers

    timeout = aiohttp.ClientTimeout(total=max(prof.scrape_interval_s, 1.0))
    async with aiohttp.ClientSession(headers=auth_headers(prof), timeout=timeout) as session:
        await _scrape_every(session, prof, ctx)


async def _scrape_every(session: aiohttp.ClientSession, prof: EndpointProfile, ctx: RunContext) -> None:
    interval_ns = s_to_ns(prof.scrape_interval_s)
    k = 0
    try:
        if (wait_ns := ctx.t0_ns - time.monotonic_ns()) > 0:  # the first scrape at t = 0, not in the margin
            await asyncio.sleep(wait_ns / 1e9)
        while True:
            await scrape_once(session, prof, ctx)
            k = max(k + 1, (time.monotonic_ns() - ctx.t0_ns) // interval_ns + 1)  # skip missed slots
            delay_ns = ctx.t0_ns + k * interval_ns - time.monotonic_ns()
            if delay_ns > 0:
                await asyncio.sleep(delay_ns / 1e9)
    except asyncio.CancelledError:
        await scrape_once(session, prof, ctx)
        raise
