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

from kvbench.analysis.rates import Rates, rate_warning
from kvbench.config import ConfigError

if TYPE_CHECKING:  # the runner, targets and workloads load when a search runs: `kvbench report` reads goodput.json
    from rich.console import Console

    from kvbench.analysis.slo import Slo
    from kvbench.target import TargetSpec
    from kvbench.workload.load import Workload

MAX_DOUBLINGS = 16  # 2**16 x the start rate: a target that never fails is reported as "not bracketed"


SLO_PARTS = ("finished_ratio", "ttft_attainment", "tpot_attainment", "e2el_attainment", "tbt_attainment")
PART_NAMES = {"finished_ratio": "errors", "ttft_attainment": "ttft", "tpot_attainment": "tpot"} | {
    "e2el_attainment": "e2el",
    "tbt_attainment": "tbt",
}


@dataclass(frozen=True)
class Probe:
    rate: float  # requests/s asked for (nominal): the search's knob
    attainment: float  # good requests / requests sent, 0..1
    requests: int
    run_dir: str = ""
    achieved_rate: float | None = None  # arrivals/s measured from the log; None: not measured (taken as `rate`)
    parts: dict[str, float | None] = field(default_factory=dict)  # SLO_PARTS: each SLO's own attainment

    @property
    def achieved(self) -> float:
        return self.rate if self.achieved_rate is None else self.achieved_rate

    def failed(self, target: float) -> str:
        """What kept the probe below `target`: '' (it passed), the SLOs whose own attainment is below it
        ('ttft+tpot'; 'errors' when too few requests finished), or 'joint' (each alone passes, not all at once)."""
        if self.attainment >= target:
            return ""
        below = [PART_NAMES[k] for k in SLO_PARTS if (v := self.parts.get(k)) is not None and v < target]
        return "+".join(below) or "joint"


@dataclass(frozen=True)
class GoodputResult:
    target: float  # attainment target, 0..1
    precision: float  # relative width of the final bracket
    rate: float | None  # highest rate seen to pass (None: even the lowest probed rate failed)
    fail_rate: float | None  # lowest rate seen to fail (None: never failed, the search was capped)
    probes: tuple[Probe, ...] = ()
    gpus: int | None = None
    slo: dict = field(default_factory=dict)

    def probe_at(self, rate: float | None) -> Probe | None:
        return next((p for p in self.probes if p.rate == rate), None) if rate is not None else None

    @property
    def goodput(self) -> float | None:
        """The achieved arrival rate of the highest probe seen to pass (None: none passed)."""
        p = self.probe_at(self.rate)
        return None if self.rate is None else p.achieved if p is not None else self.rate

    @property
    def per_gpu(self) -> float | None:
        return None if self.goodput is None or not self.gpus else self.goodput / self.gpus

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
    fail = result.probe_at(result.fail_rate)
    doc = {
        "kind": "goodput",
        "target": result.target,
        "precision": result.precision,
        "goodput": result.goodput,  # achieved req/s of the highest passing probe
        "rate": result.rate,  # its nominal rate
        "fail_rate": result.fail_rate,  # the lowest failing probe's nominal rate ...
        "achieved_fail_rate": fail.achieved if fail is not None else None,  # ... and its achieved one
        "gpus": result.gpus,
        "per_gpu": result.per_gpu,
        "slo": result.slo,
        "curve": [asdict(p) | {"achieved_rate": p.achieved, "failed": p.failed(result.target)} for p in result.curve()],
    }
    jpath, cpath = out_dir / "goodput.json", out_dir / "goodput.csv"
    jpath.write_text(json.dumps(doc, indent=2) + "\n")
    cpath.write_text(curve_csv(result))
    return jpath, cpath


def curve_csv(result: GoodputResult) -> str:
    """goodput.csv: one line per probe, by rate: nominal and achieved rate, attainment, which SLO failed, each
    SLO's own attainment (empty: that SLO was not given), requests, run directory."""
    import csv
    import io

    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(["rate", "attainment", "achieved_rate", "failed", *SLO_PARTS, "requests", "run_dir"])
    for p in result.curve():
        parts = ["" if (v := p.parts.get(k)) is None else f"{v:.6f}" for k in SLO_PARTS]
        cells = [f"{p.rate:.6g}", f"{p.attainment:.6f}", f"{p.achieved:.6g}", p.failed(result.target), *parts]
        out.writerow([*cells, p.requests, p.run_dir])
    return buf.getvalue()


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


def goodput_of(doc: dict[str, Any]) -> float | None:
    """A goodput.json's goodput: the achieved rate (results written before it was recorded: the nominal one)."""
    return doc["goodput"] if "goodput" in doc else doc.get("rate")


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
    """One real run at `rate` requests/s into its own subdirectory; attainment (all SLOs, and each alone) and the
    achieved arrival rate from the run's SQL figures. Session workloads: the rate of session starts is scaled."""
    from dataclasses import replace

    from kvbench.analysis.figures import summary
    from kvbench.run import RunOptions, execute
    from kvbench.workload import load

    wl, scale = plan.workload, rate / plan.base_rate
    if plan.arrivals == "poisson":
        wl, scale = load.retime_poisson(wl, rate, plan.seed), 1.0
    wl = load.shape(wl, time_scale=scale, max_requests=plan.max_requests)
    wl = replace(wl, shaping={**wl.shaping, "nominal_rate_per_s": rate})
    run_dir = plan.out_dir / f"rate-{rate:.6g}"
    _, stats = execute(wl, plan.spec, RunOptions(plan.seed, None, run_dir))
    if stats.status == "interrupted":  # Ctrl-C during a probe ends the search (exit 130), the runs are kept
        raise KeyboardInterrupt
    m = summary(run_dir, plan.slo)
    parts = {k: m.get(k) for k in SLO_PARTS}
    return Probe(rate, m.get("slo_attainment") or 0.0, m["requests"], str(run_dir), m.get("arrival_rate"), parts)


def sim_gpus(spec: TargetSpec) -> int | None:
    """GPUs of a sim cluster: instances x tensor-parallel degree summed over its pools (None for other targets)."""
    if getattr(spec, "kind", None) != "sim":
        return None
    from kvbench.sim.cluster import parse_cluster

    return sum(p.instances * p.instance_gpus for p in parse_cluster(spec.params, spec.source).pools)


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
    result = replace(result, gpus=gpus or sim_gpus(plan.spec), slo=_slo_dict(plan.slo))
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
        failed = p.failed(attainment)
        verdict = f"[red]fail[/] ({failed})" if failed else "[green]pass[/]"
        console.print(
            f"  {rate:>10,.4f} → {p.achieved:>10,.4f} req/s (nominal → achieved)  attainment {p.attainment:7.2%}  "
            f"{verdict}  ({p.requests:,} requests)",
            soft_wrap=True,
        )
        warning = rate_warning(Rates(p.achieved_rate, rate, None, "asked"))
        if warning:
            console.print(f"  [yellow]warning:[/] {warning}", highlight=False, soft_wrap=True)
        return p

    return measure


def _slo_dict(slo: Slo | None) -> dict[str, float]:
    return slo.as_ms() if slo is not None else {}  # vLLM keys: ttft, tpot, e2el (+ tbt), in ms


def format_result(result: GoodputResult) -> str:
    """The measured curve and the answer, as plain text: rates are achieved (arrivals measured in the log), with
    the nominal rate each probe asked for beside them."""
    lines = ["nominal (req/s)   achieved (req/s)   attainment   failed"]
    lines += [
        f"{p.rate:15.4f}   {p.achieved:16.4f}   {p.attainment:10.2%}   {p.failed(result.target) or '-'}"
        for p in result.curve()
    ]
    slo = ", ".join(f"{k}<={v:g}ms" for k, v in result.slo.items())
    if result.rate is None or result.goodput is None:
        lines.append(f"goodput: none — attainment < {result.target:.0%} even at {result.fail_rate:.4g} req/s ({slo})")
        return "\n".join(lines)
    fail = result.probe_at(result.fail_rate)
    bound = f"fails at {fail.achieved:.4g}" if fail is not None else "never failed: upper bound not found"
    per_gpu = f", {result.per_gpu:.4g} req/s per GPU ({result.gpus} GPUs)" if result.per_gpu is not None else ""
    lines.append(
        f"goodput: {result.goodput:.4g} req/s achieved (nominal {result.rate:.4g}) at >= {result.target:.0%} "
        f"attainment{per_gpu} [{bound}; precision {result.precision:.0%}] ({slo})"
    )
    return "\n".join(lines)
