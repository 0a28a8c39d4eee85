"""DistServe goodput: the highest request rate whose SLO attainment stays >= a target, by bracketing then bisection.

The search assumes attainment does not increase with rate (true for a FIFO queue; roughly true for real servers,
whose noise can make a probe pass above a failing one: the answer is then the highest rate *seen* to pass
below the lowest rate seen to fail). Each probe is one real run into its own subdirectory (see `run_probe`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.config import ConfigError

if TYPE_CHECKING:  # the runner, targets and workloads load when a search runs: `kvbench report` reads goodput.json
    from rich.console import Console

    from kvbench.analysis.slo import Slo
    from kvbench.target import TargetSpec
    from kvbench.workload.load import Workload

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


def search(
    measure: Callable[[float], Probe],
    start_rate: float,
    target: float = 0.9,
    precision: float = 0.05,
    min_rate: float | None = None,
) -> GoodputResult:
    """Bracket [pass, fail] by doubling/halving from `start_rate`, then bisect geometrically until
    fail/pass - 1 <= precision. `measure(rate)` runs one probe. Stops halving below `min_rate`."""
    if not start_rate > 0 or not 0 < target <= 1 or not precision > 0:
        raise ValueError("start_rate and precision must be > 0 and target in (0, 1]")
    floor = min_rate if min_rate is not None else start_rate / 2**MAX_DOUBLINGS
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
    doc = {
        "kind": "goodput",
        "target": result.target,
        "precision": result.precision,
        "rate": result.rate,
        "fail_rate": result.fail_rate,
        "gpus": result.gpus,
        "per_gpu": result.per_gpu,
        "slo": result.slo,
        "curve": [asdict(p) for p in result.curve()],
    }
    jpath, cpath = out_dir / "goodput.json", out_dir / "goodput.csv"
    jpath.write_text(json.dumps(doc, indent=2) + "\n")
    lines = ["rate,attainment,requests,run_dir"] + [
        f"{p.rate:.6g},{p.attainment:.6f},{p.requests},{p.run_dir}" for p in result.curve()
    ]
    cpath.write_text("\n".join(lines) + "\n")
    return jpath, cpath


def read_result(path: Path) -> dict[str, Any]:
    """A goodput.json (or the directory holding one), as written by `write_result`."""
    p = path / "goodput.json" if path.is_dir() else path
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{p}: not a goodput result ({e})") from None
    if not isinstance(doc, dict) or doc.get("kind") != "goodput" or not isinstance(doc.get("curve"), list):
        raise ConfigError(f"{p}: not a goodput result (expected kind 'goodput' and a 'curve' list)")
    return doc


@dataclass(frozen=True)
class ProbePlan:
    """How one probe run is made: the workload and target, how rates are applied, where runs go."""

    workload: Workload
    spec: TargetSpec
    slo: Slo
    out_dir: Path
    base_rate: float  # the trace's own rate (requests/s) over the requests a probe replays
    arrivals: str = "scale"  # scale | poisson
    max_requests: int | None = None
    seed: int = 0


def run_probe(plan: ProbePlan, rate: float) -> Probe:
    """One real run at `rate` requests/s into its own subdirectory; attainment from the per-request SQL view."""
    from kvbench.analysis.metrics import open_runs, per_request
    from kvbench.run import RunOptions, execute
    from kvbench.workload import load

    wl, scale = plan.workload, rate / plan.base_rate
    if plan.arrivals == "poisson":
        wl, scale = load.retime_poisson(wl, rate, plan.seed), 1.0
    wl = load.shape(wl, time_scale=scale, max_requests=plan.max_requests)
    run_dir = plan.out_dir / f"rate-{rate:.6g}"
    _, stats = execute(wl, plan.spec, RunOptions(plan.seed, None, run_dir))
    if stats.status == "interrupted":  # Ctrl-C during a probe ends the search (exit 130), the runs are kept
        raise KeyboardInterrupt
    con = open_runs([run_dir])
    try:
        df = per_request(con, plan.slo)
    finally:
        con.close()
    attained = float(df["good"].fillna(False).astype(bool).mean()) if len(df) else 0.0
    return Probe(rate, attained, len(df), str(run_dir))


def _sim_gpus(spec: TargetSpec) -> int | None:
    """GPUs of a sim cluster: instances x tensor-parallel degree summed over its pools (None for other targets)."""
    if getattr(spec, "kind", None) != "sim":
        return None
    from kvbench.sim.cluster import parse_cluster

    return sum(p.instances * p.tp for p in parse_cluster(spec.params, spec.source).pools)


def _is_search(out: Path) -> bool:
    """The output of a goodput search: goodput.json, or only probe runs (rate-*/) when it was interrupted."""
    return (out / "goodput.json").is_file() or all(p.is_dir() and p.name.startswith("rate-") for p in out.iterdir())


def _out_dir(out: Path | None, overwrite: bool = False) -> Path:
    """The search's directory, empty (probe runs must not mix with an earlier search's): a non-empty one is
    refused, or replaced with `overwrite`, as `kvbench replay --out` does."""
    from datetime import datetime

    from kvbench.rundir import claim, fresh

    if out is None:
        return claim(fresh(Path("reports") / f"goodput-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}"), False)
    return claim(out, overwrite, _is_search, "a goodput search")


def _plan(
    *,
    trace: Path | None,
    workload: str | None,
    target: str,
    overrides: list[str],
    slo: str,
    arrivals: str,
    max_requests: int | None,
    seed: int,
    out: Path | None,
    overwrite: bool = False,
) -> ProbePlan:
    from kvbench.analysis.slo import parse_slo
    from kvbench.targets import resolve
    from kvbench.workload import load

    if arrivals not in ("scale", "poisson"):
        raise ConfigError(f"--arrivals must be scale or poisson, got {arrivals!r}")
    wl = load.select(trace, workload, seed)
    spec = resolve(target, overrides)
    arrivals_ns = [r.arrival_ns for r in load.shape(wl, max_requests=max_requests).requests()]
    try:
        base = trace_rate(arrivals_ns)  # also the first probe's rate unless --start-rate says otherwise
    except ValueError as e:
        if arrivals == "scale":
            raise ConfigError(f"{wl.source}: {e}; use --arrivals poisson") from None
        base = 1.0
    return ProbePlan(wl, spec, parse_slo(slo), _out_dir(out, overwrite), base, arrivals, max_requests, seed)


def goodput_command(
    *,
    trace: Path | None,
    workload: str | None,
    target: str,
    overrides: list[str],
    slo: str,
    attainment: float,
    precision: float,
    max_requests: int | None,
    start_rate: float | None,
    arrivals: str,
    gpus: int | None,
    out: Path | None,
    seed: int,
    overwrite: bool = False,
) -> int:
    """`kvbench goodput`: search, print the curve, write goodput.json/csv. Exit 1 if no probed rate passed."""
    from dataclasses import replace

    from rich.console import Console

    if not 0 < attainment <= 1 or not 0 < precision < 1:
        raise ConfigError(f"--attainment must be in (0, 1] and --precision in (0, 1), got {attainment}, {precision}")
    if start_rate is not None and not start_rate > 0:
        raise ConfigError(f"--start-rate must be > 0 requests/s, got {start_rate}")
    plan = _plan(
        trace=trace,
        workload=workload,
        target=target,
        overrides=overrides,
        slo=slo,
        arrivals=arrivals,
        max_requests=max_requests,
        seed=seed,
        out=out,
        overwrite=overwrite,
    )
    console = Console(stderr=True)
    result = search(_measure(plan, attainment, console), start_rate or plan.base_rate, attainment, precision)
    result = replace(result, gpus=gpus or _sim_gpus(plan.spec), slo=_slo_dict(plan.slo))
    jpath, cpath = write_result(result, plan.out_dir)
    print(format_result(result))
    console.print(f"curve → {cpath}, {jpath}; probe runs in {plan.out_dir}/")
    return 0 if result.rate is not None else 1


def _measure(plan: ProbePlan, attainment: float, console: Console) -> Callable[[float], Probe]:
    """One probe per call, shown while it runs and printed with its verdict when done."""
    done: list[Probe] = []

    def measure(rate: float) -> Probe:
        with console.status(f"probe {len(done) + 1}: {rate:,.4g} req/s"):
            p = run_probe(plan, rate)
        done.append(p)
        verdict = "[green]pass[/]" if p.attainment >= attainment else "[red]fail[/]"
        console.print(f"  {rate:>12,.4f} req/s  attainment {p.attainment:7.2%}  {verdict}  ({p.requests:,} requests)")
        return p

    return measure


def _slo_dict(slo: Slo | None) -> dict[str, float]:
    return slo.as_ms() if slo is not None else {}  # vLLM keys: ttft, tpot, e2el (+ tbt), in ms


def format_result(result: GoodputResult) -> str:
    """The measured curve and the answer, as plain text."""
    lines = ["rate (req/s)   attainment", *(f"{p.rate:12.4f}   {p.attainment:9.2%}" for p in result.curve())]
    slo = ", ".join(f"{k}<={v:g}ms" for k, v in result.slo.items())
    if result.rate is None:
        lines.append(f"goodput: none — attainment < {result.target:.0%} even at {result.fail_rate:.4g} req/s ({slo})")
        return "\n".join(lines)
    bound = (
        f"fails at {result.fail_rate:.4g}" if result.fail_rate is not None else "never failed: upper bound not found"
    )
    per_gpu = f", {result.per_gpu:.4g} req/s per GPU ({result.gpus} GPUs)" if result.per_gpu is not None else ""
    lines.append(
        f"goodput: {result.rate:.4g} req/s at >= {result.target:.0%} attainment{per_gpu} "
        f"[{bound}; precision {result.precision:.0%}] ({slo})"
    )
    return "\n".join(lines)
