"""Helpers for the sim tests: build a SimTarget from an inline profile and run requests through it."""

from __future__ import annotations

import tempfile
from pathlib import Path

from kvbench.eventlog import EventLog
from kvbench.records import Event, Request
from kvbench.sim.target import SimTarget
from kvbench.target import RunContext, TargetSpec


def colocated(instances: int = 1, **extra) -> dict:
    p = {
        "kind": "sim",
        "model": "Llama-3.1-8B",
        "pools": {"main": {"role": "colocated", "instances": instances, "gpu": "H100"}},
    }
    p.update(extra)
    return p


def pd(p: int = 1, d: int = 1, **extra) -> dict:
    out = {
        "kind": "sim",
        "model": "Llama-3.1-8B",
        "pools": {
            "prefill": {"role": "prefill", "instances": p, "gpu": "H100"},
            "decode": {"role": "decode", "instances": d, "gpu": "H100"},
        },
    }
    out.update(extra)
    return out


def run_sim(params: dict, requests: list[Request], seed: int = 0, at: list[int] | None = None):
    """(events as Event records, steps rows, the target) after replaying `requests` at their arrival times."""
    d = tempfile.mkdtemp()
    log = EventLog(d)
    target = SimTarget(TargetSpec("sim", "test", params, ""), RunContext(seed, Path(d), log))
    for i, r in enumerate(requests):
        target.submit(r, r.arrival_ns if at is None else at[i])
    events: list[Event] = []
    target.run(lambda ev: events.append(Event(*ev)))
    return events, list(log.table("steps").rows), target


def by_kind(events, req_id: int) -> dict[str, Event]:
    return {e.kind: e for e in events if e.req_id == req_id}
