"""Sweep specs: a TOML file naming a workload, a base target and axes, read into frozen dataclasses and expanded
into points (the axes' cross product, or a listed set), each a picklable job for a worker process or a Ray task.

An axis key is one of: `rate` (Poisson arrivals at R req/s; session workloads scale their session starts),
`time_scale`, `concurrency`, `seed`, `max_requests`, `target` (a --target string), `workload.KEY` (a key of the
workload spec, dotted), or any other dotted key, which is a --set key of the target profile.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, TypeVar

from kvbench.config import NonEmpty, Range, Source, load_toml, read


class _NamesWorkload(Protocol):
    @property
    def workload(self) -> str | None: ...
    @property
    def trace(self) -> str | None: ...


SpecT = TypeVar("SpecT", bound=_NamesWorkload)

RUN_KEYS = {"rate": float, "time_scale": float, "concurrency": int, "seed": int, "max_requests": int, "target": str}
WORKLOAD_PREFIX = "workload."


@dataclass(frozen=True)
class SweepFile:
    """The keys of a sweep spec as written."""

    name: str | None = None  # default: the file's stem
    description: str = ""
    workload: str | None = None  # a workload name or spec path (relative to this file)
    trace: str | None = None  # or a trace file (relative to this file)
    target: Annotated[str, NonEmpty()] = "sim"
    set: tuple[str, ...] = ()  # --set KEY=VALUE of every point
    seed: int = 0
    max_requests: Annotated[int, Range(1)] | None = None
    slo: str | None = None  # e.g. "ttft=2000,tpot=100"; default: the workload's own SLOs
    mode: Literal["product", "list"] = "product"
    axes: dict[str, Any] = field(default_factory=dict)  # key -> list of values (product)
    points: tuple[dict[str, Any], ...] = ()  # one table per point (list)


@dataclass(frozen=True)
class PointJob:
    """Everything one point's run needs, plain data (a worker process or a Ray task rebuilds the rest)."""

    name: str  # directory name under DIR/points/
    params: tuple[tuple[str, Any], ...]  # the point's axis values, in axis order
    workload: str | None  # resolved spec path
    trace: str | None  # resolved trace path
    workload_sets: tuple[str, ...]
    target: str
    target_sets: tuple[str, ...]
    seed: int
    max_requests: int | None
    rate: float | None
    time_scale: float
    concurrency: int | None
    slo: str | None

    def params_dict(self) -> dict[str, Any]:
        return dict(self.params)


@dataclass(frozen=True)
class Sweep:
    name: str
    source: str
    description: str
    axes: tuple[str, ...]  # parameter names, in order (the columns of sweep.parquet)
    jobs: tuple[PointJob, ...]


def read_spec_file(path: Path, cls: type[SpecT]) -> tuple[SpecT, Source]:
    """A sweep or plan spec read into `cls`, which names its workload by exactly one of `workload` and `trace`."""
    data, text = load_toml(path)
    src = Source(str(path), text)
    f = read(cls, data, src)
    if (f.workload is None) == (f.trace is None):
        raise src.error((), "give exactly one of `workload` (a name or spec path) or `trace` (a trace file)")
    return f, src


def load_sweep(path: str | Path) -> Sweep:
    """Read and check a sweep spec; every point's settings are checked before anything runs (see check_jobs)."""
    p = Path(path)
    f, src = read_spec_file(p, SweepFile)
    points = _points(f, src)
    axes = tuple(dict.fromkeys(k for pt in points for k in pt))
    jobs = tuple(_job(f, p.parent, pt) for pt in points)
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise src.error(("axes",), "two points have the same parameters")
    return Sweep(f.name or p.stem, str(p), f.description, axes, jobs)


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"pools": {"decode": {"instances": [1, 2]}}} -> {"pools.decode.instances": [1, 2]}: dotted keys may be
    written quoted or as nested tables."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out |= _flatten(v, f"{key}.")
        else:
            out[key] = v
    return out


def _points(f: SweepFile, src: Source) -> list[dict[str, Any]]:
    if f.mode == "list":
        if f.axes or not f.points:
            raise src.error(("points",), "mode = 'list' takes [[points]] tables (and no [axes])")
        points = [_flatten(pt) for pt in f.points]
    else:
        if f.points or not f.axes:
            raise src.error(("axes",), "mode = 'product' takes an [axes] table of value lists (and no [[points]])")
        axes = _flatten(f.axes)
        for k, values in axes.items():
            if not isinstance(values, list) or not values:
                raise src.bad(("axes", *k.split(".")), "a non-empty list of values", values)
        points = [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]
    for pt in points:
        for k, v in pt.items():
            _check_value(k, v, src, f)
    return points


def _check_value(key: str, value: Any, src: Source, f: SweepFile) -> None:
    where = ("axes" if f.mode == "product" else "points", *key.split("."))
    kind = RUN_KEYS.get(key)
    if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
        raise src.bad(where, "a number > 0", value)
    if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "seed" else 1)):
        raise src.bad(where, "a whole number >= 1" if key != "seed" else "a whole number >= 0", value)
    if kind is str and not (isinstance(value, str) and value):
        raise src.bad(where, "a non-empty string", value)
    if key.startswith(WORKLOAD_PREFIX) and f.workload is None:
        raise src.error(where, f"{key}: workload keys need `workload` (a spec), not a trace")
    if isinstance(value, float) and value != value:
        raise src.bad(where, "a number", value)


def point_name(params: dict[str, Any]) -> str:
    """A directory name readable and unique per parameters: 'rate=5,pools.decode.instances=2-1a2b3c4d'."""
    blob = json.dumps(params, sort_keys=True, default=str)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:8]
    text = ",".join(f"{k}={_short(v)}" for k, v in params.items())
    return f"{re.sub(r'[^A-Za-z0-9_.,=+-]', '_', text)[:80]}-{digest}"


def _short(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v).rsplit("/", 1)[-1]


def _sets(key: str, value: Any) -> list[str]:
    """KEY=VALUE settings as --set parses them: JSON's numbers, strings, booleans and lists are TOML literals; a
    table value sets each of its keys (dotted), as --set does."""
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _sets(f"{key}.{k}", v)]
    return [f"{key}={json.dumps(value)}"]


def _job(f: SweepFile, base: Path, pt: dict[str, Any]) -> PointJob:
    from kvbench.workload.inputs import find_workload

    def rel(path: str) -> str:
        return str(path if Path(path).is_absolute() else (base / path).resolve())

    workload = str(find_workload(f.workload, base)) if f.workload is not None else None
    sets = tuple(
        s for k, v in pt.items() if k not in RUN_KEYS and not k.startswith(WORKLOAD_PREFIX) for s in _sets(k, v)
    )
    wsets = tuple(
        s for k, v in pt.items() if k.startswith(WORKLOAD_PREFIX) for s in _sets(k[len(WORKLOAD_PREFIX) :], v)
    )
    return PointJob(
        name=point_name(pt),
        params=tuple(pt.items()),
        workload=workload,
        trace=rel(f.trace) if f.trace is not None else None,
        workload_sets=wsets,
        target=pt.get("target", f.target),
        target_sets=f.set + sets,
        seed=pt.get("seed", f.seed),
        max_requests=pt.get("max_requests", f.max_requests),
        rate=pt.get("rate"),
        time_scale=pt.get("time_scale", 1.0),
        concurrency=pt.get("concurrency"),
        slo=f.slo,
    )
