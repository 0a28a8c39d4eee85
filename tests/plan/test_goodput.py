"""Goodput search: the bracketing/bisection engine on step functions, and real probe runs on the fixed target
whose attainment curve is computed by hand."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.plan.goodput import Probe, read_result, search, trace_rate


def _step(threshold: float, calls: list[float]):
    def measure(rate: float) -> Probe:
        calls.append(rate)
        return Probe(rate, 1.0 if rate <= threshold else 0.5, 10)

    return measure


def test_search_doubles_then_bisects_to_precision() -> None:
    calls: list[float] = []
    res = search(_step(7.3, calls), start_rate=1.0, target=0.9, precision=0.05)
    # Doubling: 1, 2, 4 pass, 8 fails -> bracket [4, 8]. Geometric bisection halves log2(hi/lo) each probe:
    # 1 -> 1/2 -> 1/4 -> 1/8 -> 1/16 (2**(1/16) - 1 = 4.4 % <= 5 %): 4 more probes after the bracket.
    assert calls[:4] == [1.0, 2.0, 4.0, 8.0] and len(calls) == 8
    assert res.rate <= 7.3 < res.fail_rate and res.fail_rate / res.rate - 1 <= 0.05
    assert res.rate >= 7.3 / 1.05
    assert [p.rate for p in res.curve()] == sorted(calls)


def test_search_halves_when_start_fails_and_reports_none_when_nothing_passes() -> None:
    calls: list[float] = []
    res = search(_step(0.3, calls), start_rate=4.0, target=0.9, precision=0.1)
    assert calls[:5] == [4.0, 2.0, 1.0, 0.5, 0.25]  # 0.25 passes: bracket [0.25, 0.5]
    assert 0.3 / 1.1 <= res.rate <= 0.3 < res.fail_rate
    never = search(lambda r: Probe(r, 0.0, 1), start_rate=1.0, min_rate=0.2)
    assert never.rate is None and never.fail_rate == 0.25  # probes 1, 0.5, 0.25; 0.125 is below min_rate


def test_search_caps_doubling_when_target_never_fails() -> None:
    res = search(lambda r: Probe(r, 1.0, 1), start_rate=1.0)
    assert res.fail_rate is None and res.rate == 2.0**16 and len(res.probes) == 17


def test_trace_rate_is_gaps_over_span() -> None:
    assert trace_rate([0, 250_000_000, 500_000_000, 1_000_000_000]) == 3.0  # 3 gaps in 1 s
    with pytest.raises(ValueError):
        trace_rate([5, 5])


# The fixed target with servers=1: ttft 50 ms, itl 10 ms, 6 output tokens -> service S = 50 + 5*10 = 100 ms.
# A constant-gap trace (N = 100 requests, 200 ms apart: 5 req/s) time-scaled to gap g. For g >= S nothing queues
# and TTFT = 50 ms. For g < S the server is always busy: request k starts at k*S, so TTFT_k = k*(S - g) + 50 ms,
# good (ttft <= 150 ms) iff k*(S - g) <= 100 ms: count = min(N, floor(100 / (S - g)) + 1).
# >= 90 % good needs floor(100/(S-g)) >= 89, i.e. S - g <= 100/89 ms, g >= 98.876 ms: goodput = 10.1136 req/s.
N, GAP_MS, S_MS, SLACK_MS = 100, 200, 100.0, 100.0
GOODPUT = 1000 / (S_MS - SLACK_MS / 89)


def _hand_attainment(rate: float) -> float:
    g = 1000 / rate
    return 1.0 if g >= S_MS else min(N, math.floor(SLACK_MS / (S_MS - g)) + 1) / N


def _constant_trace(path: Path) -> Path:
    lines = [
        json.dumps({"timestamp": k * GAP_MS, "input_length": 10, "output_length": 6, "hash_ids": []}) for k in range(N)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_goodput_on_fixed_target_matches_hand_curve(tmp_path: Path) -> None:
    trace = _constant_trace(tmp_path / "const.jsonl")
    out = tmp_path / "gp"
    cmd = [
        sys.executable,
        "-c",
        "from kvbench.cli.app import main; main()",
        "goodput",
        "--trace",
        str(trace),
        "--target",
        "fixed:ttft_ms=50,itl_ms=10,servers=1",
        "--slo",
        "ttft=150,tpot=20",
        "--attainment",
        "0.9",
        "--precision",
        "0.02",
        "--gpus",
        "2",
        "--out",
        str(out),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    doc = read_result(out)
    for p in doc["curve"]:  # every probe was a real run whose attainment matches the queueing arithmetic
        assert p["attainment"] == pytest.approx(_hand_attainment(p["rate"]), abs=1e-9), p
        assert p["requests"] == N and (Path(p["run_dir"]) / "run.json").is_file()
    assert doc["curve"][0]["rate"] == pytest.approx(5.0)  # starts at the trace's own rate: 99 gaps in 19.8 s
    assert GOODPUT / 1.02 <= doc["rate"] <= GOODPUT <= doc["fail_rate"]
    assert doc["per_gpu"] == pytest.approx(doc["rate"] / 2)
    assert "goodput:" in res.stdout and (out / "goodput.csv").read_text().startswith("rate,attainment")
    # Without sessions every request arrives on schedule: the achieved rate is the nominal one (to the rounding of
    # arrival times to whole ns). TPOT is 10 ms <= 20 ms, so a failing probe fails on TTFT alone.
    assert doc["goodput"] == pytest.approx(doc["rate"], rel=1e-9)
    for p in doc["curve"]:
        assert p["achieved_rate"] == pytest.approx(p["rate"], rel=1e-9)
        assert p["parts"]["tpot_attainment"] == 1.0 and p["parts"]["ttft_attainment"] == p["attainment"]
        assert p["failed"] == ("" if p["attainment"] >= 0.9 else "ttft")


def test_goodput_bad_input_is_one_line_exit_2(tmp_path: Path) -> None:
    trace = _constant_trace(tmp_path / "const.jsonl")
    base = [
        sys.executable,
        "-c",
        "from kvbench.cli.app import main; main()",
        "goodput",
        "--trace",
        str(trace),
        "--target",
        "fixed:servers=1",
    ]
    for extra, needle in (
        (["--slo", "ttft=abc"], "ttft"),
        (["--slo", "ttft=100", "--attainment", "1.5"], "--attainment"),
        (["--slo", "ttft=100", "--arrivals", "gamma"], "--arrivals"),
    ):
        res = subprocess.run(base + extra + ["--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and needle in res.stderr and res.stderr.count("\n") == 1, res.stderr


def test_gpus_of_a_sim_cluster_are_instances_times_tp() -> None:
    from kvbench.plan.goodput import sim_gpus
    from kvbench.targets import resolve

    # kvbench/presets/adapters/pd-2p2d.toml: 2 prefill + 2 decode instances at tp 1 -> 4 GPUs; fixed targets have none.
    assert sim_gpus(resolve("sim:pd-2p2d")) == 4
    assert sim_gpus(resolve("fixed:servers=1")) is None
