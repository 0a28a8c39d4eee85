"""DistServe goodput: the highest request rate whose SLO attainment stays >= a target, by bracketing then bisection.

The search assumes attainment does not increase with rate (true for a FIFO queue; roughly true for real servers,
whose noise can make a probe pass above a failing one: the answer is then the highest rate *seen* to pass
below the lowest rate seen to fail). Each probe is one real run into its own subdirectory (see `run_probe`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

MAX_DOUBLINGS = 16  # 2**16 x the start rate: a target that never fails is reported as "not bracketed"


@dataclass(frozen=True)
class Probe:
    rate: float  # requests/s offered
    attainment: float  # good requests / requests sent, 0..1
    requests: int
    run_dir: str = ""


@dataclass(frozen=True)
class GoodputResult:
    target: float  # attainment target, 0..1
    precision: float  # relative width of the final bracket
    rate: float | None  # highest rate seen to pass (None: even the lowest probed rate failed)
    fail_rate: float | None  # lowest rate seen to fail (None: never failed, the search was capped)
    probes: tuple[Probe, ...] = ()
    gpus: int | None = None
    slo: dict = field(default_factory=dict)

    @property
    def per_gpu(self) -> float | None:
        return None if self.rate is None or not self.gpus else self.rate / self.gpus

    def curve(self) -> list[Probe]:
        """Probes ordered by rate: the attainment curve that was measured."""
        return sorted(self.probes, key=lambda p: p.rate)


def search(measure: Callable[[float], Probe], start_rate: float, target: float = 0.9,
           precision: float = 0.05, min_rate: float | None = None) -> GoodputResult:
    """Bracket [pass, fail] by doubling/halving from `start_rate`, then bisect geometrically until
    fail/pass - 1 <= precision. `measure(rate)` runs one probe. Stops halving below `min_rate`."""
    if not start_rate > 0 or not 0 < target <= 1 or not precision > 0:
        raise ValueError("start_rate and precision must be > 0 and target in (0, 1]")
    floor = min_rate if min_rate is not None else start_rate / 2 ** MAX_DOUBLINGS
    probes: list[Probe] = []

    def passes(rate: float) -> bool:
        probes.append(measure(rate))
        return probes[-1].attainment >= target

    lo, hi = _bracket(passes, start_rate, floor)
    while lo is not None and hi is not None and hi / lo - 1 > precision:
        mid = math.sqrt(lo * hi)  # geometric midpoint: halves the *relative* bracket each probe
        if passes(mid):
            lo = mid
        else:
            hi = mid
    return GoodputResult(target, precision, lo, hi, tuple(probes))


def _bracket(passes: Callable[[float], bool], start: float, floor: float) -> tuple[float | None, float | None]:
    if passes(start):
        lo = start
        for _ in range(MAX_DOUBLINGS):
            if not passes(lo * 2):
                return lo, lo * 2
            lo *= 2
        return lo, None
    hi = start
    while hi / 2 >= floor:
        if passes(hi / 2):
            return hi / 2, hi
        hi /= 2
    return None, hi


def trace_rate(arrivals_ns: list[int]) -> float:
    """Mean request rate (requests/s) of arrival times: (n - 1) gaps over the span."""
    from kvbench.units import ns_to_s

    if len(arrivals_ns) < 2 or arrivals_ns[-1] <= arrivals_ns[0]:
        raise ValueError("need at least two distinct arrival times to know a trace's rate")
    return (len(arrivals_ns) - 1) / ns_to_s(arrivals_ns[-1] - arrivals_ns[0])


def write_result(result: GoodputResult, out_dir: Path) -> tuple[Path, Path]:
    """goodput.json (result and curve) and goodput.csv (the curve) in `out_dir`; `kvbench report` draws them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {"kind": "goodput", "target": result.target, "precision": result.precision, "rate": result.rate,
           "fail_rate": result.fail_rate, "gpus": result.gpus, "per_gpu": result.per_gpu, "slo": result.slo,
           "curve": [asdict(p) for p in result.curve()]}
    jpath, cpath = out_dir / "goodput.json", out_dir / "goodput.csv"
    jpath.write_text(json.dumps(doc, indent=2) + "\n")
    lines = ["rate,attainment,requests,run_dir"] + [
        f"{p.rate:.6g},{p.attainment:.6f},{p.requests},{p.run_dir}" for p in result.curve()]
    cpath.write_text("\n".join(lines) + "\n")
    return jpath, cpath


def read_result(path: Path) -> dict:
    """A goodput.json (or the directory holding one), as written by `write_result`."""
    from kvbench.config import ConfigError

    p = path / "goodput.json" if path.is_dir() else path
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{p}: not a goodput result ({e})") from None
    if not isinstance(doc, dict) or doc.get("kind") != "goodput" or not isinstance(doc.get("curve"), list):
        raise ConfigError(f"{p}: not a goodput result (expected kind 'goodput' and a 'curve' list)")
    return doc
