"""compare: deltas and seeded bootstrap intervals, on hand-made samples and on fixed-target runs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from kvbench.analysis.bootstrap import delta_ci
from kvbench.analysis.figures import weighted_quantiles
from kvbench.present.compare import compare, delta_for, split_key
from kvbench.records import Request
from kvbench.run import RunOptions, execute
from kvbench.targets import resolve
from kvbench.workload.load import Workload

MS = 1_000_000


def _doc(values, n=None, key="ttft_ms"):
    v = np.asarray(values, dtype=float)
    return {
        "metrics": {
            f"{key}.mean": float(v.mean()),
            f"{key}.p99": float(np.quantile(v, 0.99)),
            f"{key}.count": n or len(v),
        },
        "samples": {key: {"n": n or len(v), "values": v.tolist()}},
    }


def test_weighted_quantiles_equal_numpy_on_repeated_values():
    rng = np.random.default_rng(0)
    values = np.sort(rng.uniform(0, 100, 50))
    weights = rng.integers(1, 20, 50)
    ps = [0.0, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0]
    assert weighted_quantiles(values, weights, ps) == pytest.approx(np.quantile(np.repeat(values, weights), ps))


def test_split_key():
    assert split_key("ttft_ms.p99.9") == ("ttft_ms", "p99.9")
    assert split_key("slo_attainment") == ("slo_attainment", "mean")


def test_constant_shift_is_significant_and_exact():
    # every candidate value is 20 ms more and there is no spread: every resample gives delta 20 exactly
    d = delta_for("ttft_ms.p99", _doc([50.0] * 30), _doc([70.0] * 30))
    assert (d.delta, d.ci, d.significant) == (20.0, (20.0, 20.0), True)
    assert d.rel == pytest.approx(0.4)


def test_same_distribution_is_noise_and_seeded():
    rng = np.random.default_rng(7)
    base, cand = _doc(rng.exponential(100, 200)), _doc(rng.exponential(100, 200))
    d1 = delta_for("ttft_ms.mean", base, cand)
    d2 = delta_for("ttft_ms.mean", base, cand)
    assert d1 == d2  # seeded: same inputs, same interval
    assert d1.ci[0] < 0 < d1.ci[1] and d1.significant is False


def test_subsample_interval_scales_with_sqrt_m_over_n():
    # the same 100 values standing for 100 or for 400 requests: deviations scale by sqrt(100/400) = 0.5
    v = np.random.default_rng(3).normal(100, 10, 100)
    small = delta_ci({"n": 100, "values": v}, {"n": 100, "values": v}, "mean", 0.0, seed=5)
    large = delta_ci({"n": 400, "values": v}, {"n": 400, "values": v}, "mean", 0.0, seed=5)
    assert (large[1] - large[0]) == pytest.approx(0.5 * (small[1] - small[0]))


def test_metrics_without_samples_have_no_interval():
    b = {"metrics": {"request_throughput": 10.0}}
    c = {"metrics": {"request_throughput": 8.0}}
    (d,) = compare(b, c, ["request_throughput"])
    assert (d.delta, d.rel, d.ci, d.significant) == (-2.0, -0.2, None, None)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    # no queueing (servers=0), 2-token outputs: TTFT = ttft_ms exactly, so the runs differ by 20 ms everywhere
    reqs = [Request(i, i * 10 * MS, 100, 2) for i in range(50)]
    out = []
    for name, ttft in (("base", 50), ("cand", 70)):
        wl = Workload("w", "t", "0", lambda: iter(reqs))
        run_dir, _ = execute(
            wl,
            resolve(f"fixed:ttft_ms={ttft},itl_ms=10,servers=0"),
            RunOptions(out=tmp_path_factory.mktemp("c") / name),
        )
        out.append(run_dir)
    return out


def test_cli_compare_runs(two_runs):
    base, cand = two_runs
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            "from kvbench.cli.app import main; main()",
            "compare",
            str(base),
            str(cand),
            "--json",
            "--resamples",
            "200",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    import json

    deltas = {d["metric"]: d for d in json.loads(p.stdout)["deltas"]}
    assert deltas["ttft_ms.p99"]["delta"] == pytest.approx(20) and deltas["ttft_ms.p99"]["ci"] == [20.0, 20.0]
    assert deltas["tpot_ms.mean"]["delta"] == 0 and deltas["e2e_ms.mean"]["delta"] == pytest.approx(20)


def test_verdict_names_a_change_only_when_its_interval_excludes_zero() -> None:
    from kvbench.present.compare import Delta, verdict

    # TTFT is better lower: +20 ms with CI [5, 35] is worse; CI [-10, 50] spans zero; no samples, no interval.
    assert verdict(Delta("ttft_ms.p99", 100.0, 120.0, 20.0, 0.2, (5.0, 35.0))) == "worse"
    assert verdict(Delta("ttft_ms.p99", 100.0, 80.0, -20.0, -0.2, (-35.0, -5.0))) == "better"
    assert verdict(Delta("ttft_ms.p99", 100.0, 120.0, 20.0, 0.2, (-10.0, 50.0))) == "no significant change"
    assert verdict(Delta("request_throughput", 1.0, 2.0, 1.0, 1.0, None)) == "changed, no CI"
    assert verdict(Delta("ttft_ms.p99", 100.0, 100.0, 0.0, 0.0, (0.0, 0.0))) == ""
