"""gate: rule parsing errors, verdicts by hand, Markdown and JUnit output, CLI exit codes 0 / 1 / 2."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from kvbench.config import ConfigError
from kvbench.present.compare import delta_for
from kvbench.present.gate import Rule, check, parse_rules, to_junit, to_markdown


def _rules(text: str):
    return parse_rules(tomllib.loads(text), "gates.toml", text)


def _doc(ttft_values, **metrics):
    v = np.asarray(ttft_values, dtype=float)
    m = {
        "ttft_ms.mean": float(v.mean()),
        "ttft_ms.p99": float(np.quantile(v, 0.99)),
        "ttft_ms.count": len(v),
        "requests": len(v),
    }
    m.update(metrics)
    return {"metrics": m, "samples": {"ttft_ms": {"n": len(v), "values": v.tolist()}}}


def test_parse_rules_defaults():
    (r1, r2) = _rules(
        '[[rule]]\nmetric = "ttft_ms"\nstatistic = "p99"\ntolerance_pct = 10\n'
        '[[rule]]\nmetric = "request_throughput"\ntolerance_abs = 0.5\nstrict = true\n'
    )
    assert r1 == Rule("ttft_ms.p99", "ttft_ms.p99", "lower", 10, None, 0, None, None, False)
    assert (r2.key, r2.direction, r2.tolerance_abs, r2.strict) == ("request_throughput", "higher", 0.5, True)


@pytest.mark.parametrize(
    "text, words",
    [
        ('[[rule]]\nmetric = "ttft_ms"\nstatistic = "p98"\n', "gates.toml:1 (rule 1): unknown metric 'ttft_ms.p98'"),
        (
            '[[rule]]\nmetric = "ttft_ms.p99"\n[[rule]]\nmetric = "latency"\n',
            "gates.toml:3 (rule 2): unknown metric 'latency'",
        ),
        ('[[rule]]\nmetric = "ttft_ms.p99"\ntolerance = 3\n', "gates.toml:3: unknown key 'rule.tolerance'"),
        ('[[rule]]\nmetric = "ttft_ms.p99"\ndirection = "down"\n', "direction must be"),
        ('[[rule]]\nmetric = "ttft_ms.p99"\ntolerance_pct = 5\ntolerance_abs = 1\n', "not both"),
        ('[[rule]]\nmetric = "ttft_ms.p99"\nmin_samples = 2.5\n', "min_samples must be a whole number"),
        ('[[rule]]\nmetric = "ttft_ms.p99"\nmax = "high"\n', "max must be a number"),
        ('title = "x"\n', "unknown key 'title'"),
        ("", "expected one or more [[rule]] tables"),
    ],
)
def test_rule_errors_name_file_line_and_key(text, words):
    with pytest.raises(ConfigError) as e:
        _rules(text)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_dynamic_metric_names_are_allowed():
    (r,) = _rules('[[rule]]\nmetric = "instance.decode-0.kv_occupancy_max"\nmax = 0.95\n')
    assert r.key == "instance.decode-0.kv_occupancy_max"


R = Rule("ttft p99", "ttft_ms.p99", "lower", tolerance_pct=10)


def test_within_tolerance_passes():
    v = check(R, _doc([100.0] * 20), _doc([105.0] * 20), delta_for)  # +5 % of 100 <= 10 %
    assert (v.passed, v.status, v.delta, v.allowed) == (True, "pass", 5.0, 10.0)


def test_clear_regression_fails():
    v = check(R, _doc([100.0] * 20), _doc([120.0] * 20), delta_for)  # +20 > 10 allowed, interval [20, 20]
    assert (v.passed, v.status, v.ci) == (False, "regression", (20.0, 20.0))


def test_noisy_difference_passes_unless_strict():
    rng = np.random.default_rng(11)
    cand, base = _doc(rng.exponential(100, 40)), _doc(rng.exponential(100, 40))  # means 100.6 vs 82.4
    rule = Rule("ttft mean", "ttft_ms.mean", "lower", tolerance_pct=0)
    d = delta_for("ttft_ms.mean", base, cand)
    assert d.delta > 0 and d.ci[0] < 0 < d.ci[1]  # worse on the point value, but the interval includes 0
    assert check(rule, base, cand, delta_for).status == "noisy"
    strict = Rule("ttft mean", "ttft_ms.mean", "lower", tolerance_pct=0, strict=True)
    assert check(strict, base, cand, delta_for).status == "regression"


def test_higher_is_better_and_no_interval_means_point_decision():
    rule = Rule("rps", "request_throughput", "higher", tolerance_pct=10)
    b, c = _doc([1.0], request_throughput=10.0), _doc([1.0], request_throughput=8.5)
    assert check(rule, b, c, delta_for).status == "regression"  # -15 % with no interval to call it noise
    c = _doc([1.0], request_throughput=9.5)
    assert check(rule, b, c, delta_for).passed


def test_limits_samples_and_missing_values():
    limit = Rule("abs", "ttft_ms.p99", "lower", max=150.0)
    assert check(limit, None, _doc([200.0] * 5), delta_for).status == "limit"
    assert check(limit, None, _doc([100.0] * 5), delta_for).passed  # no baseline: limits only
    few = Rule("n", "ttft_ms.p99", "lower", min_samples=10)
    v = check(few, _doc([1.0] * 20), _doc([1.0] * 5), delta_for)
    assert (v.passed, v.status) == (False, "samples") and "5 samples" in v.message
    miss = Rule("m", "tpot_ms.p99", "lower")
    assert check(miss, _doc([1.0]), _doc([1.0], **{"tpot_ms.p99": None}), delta_for).status == "missing"


def test_markdown_and_junit():
    verdicts = [
        check(R, _doc([100.0] * 20), _doc([105.0] * 20), delta_for),
        check(Rule("a|b", "ttft_ms.p99", "lower"), _doc([100.0] * 20), _doc([120.0] * 20), delta_for),
    ]
    md = to_markdown(verdicts, "gate")
    assert md.startswith("### gate: FAIL (1/2 rules pass)") and "| a\\|b |" in md and "❌ regression" in md
    root = ET.fromstring(to_junit(verdicts))
    assert (root.get("tests"), root.get("failures")) == ("2", "1")
    cases = root.findall("testcase")
    assert cases[0].find("failure") is None and cases[1].find("failure").get("type") == "regression"


def _gate(*args):
    return subprocess.run(
        [sys.executable, "-c", "from kvbench.cli.app import main; main()", "gate", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_exit_codes_and_outputs(tmp_path):
    from kvbench.records import Request
    from kvbench.run import RunOptions, execute
    from kvbench.targets import resolve
    from kvbench.workload.load import Workload

    reqs = [Request(i, i * 10_000_000, 100, 2) for i in range(30)]
    runs = {}
    for name, ttft in (("base", 50), ("same", 50), ("slow", 70)):
        runs[name], _ = execute(
            Workload("w", "t", "0", lambda: iter(reqs)),
            resolve(f"fixed:ttft_ms={ttft},itl_ms=10,servers=0"),
            RunOptions(out=tmp_path / name),
        )
    rules = tmp_path / "gates.toml"
    rules.write_text('[[rule]]\nmetric = "ttft_ms"\nstatistic = "p99"\ntolerance_pct = 10\nmin_samples = 20\n')
    p = _gate("--baseline", str(runs["base"]), "--candidate", str(runs["same"]), "--rules", str(rules))
    assert p.returncode == 0, p.stderr
    md, junit = tmp_path / "out" / "gate.md", tmp_path / "out" / "junit.xml"
    p = _gate(
        "--baseline",
        str(runs["base"]),
        "--candidate",
        str(runs["slow"]),
        "--rules",
        str(rules),
        "--markdown",
        str(md),
        "--junit",
        str(junit),
    )
    assert p.returncode == 1 and "regression" in md.read_text()
    assert ET.parse(junit).getroot().get("failures") == "1"
    p = _gate("--baseline", str(tmp_path / "missing.json"), "--candidate", str(runs["slow"]), "--rules", str(rules))
    assert p.returncode == 2 and "missing.json: no such run directory or summary.json" in p.stderr
    rules.write_text('[[rule]]\nmetric = "ttft_ms"\nstatistic = "p42"\n')
    p = _gate("--baseline", str(runs["base"]), "--candidate", str(runs["slow"]), "--rules", str(rules))
    assert p.returncode == 2 and "unknown metric 'ttft_ms.p42'" in p.stderr and p.stderr.count("\n") == 1


def test_committed_fixed_baseline_gates_a_fresh_run(tmp_path):
    # the committed example rules and baseline: a fresh fixed-target run of the same trace reproduces it exactly
    from pathlib import Path

    from kvbench.run import RunOptions, execute
    from kvbench.targets import resolve
    from kvbench.workload import load

    repo = Path(__file__).resolve().parents[2]
    run, _ = execute(
        load.select(repo / "traces" / "kimi-sample.jsonl", None),
        resolve("fixed:ttft_ms=50,itl_ms=10,servers=16"),
        RunOptions(out=tmp_path / "cand"),
    )
    base = repo / "reports" / "baselines" / "fixed-kimi-sample.summary.json"
    md = tmp_path / "gate.md"
    p = _gate(
        "--baseline",
        str(base),
        "--candidate",
        str(run),
        "--rules",
        str(repo / "reports" / "gates.toml"),
        "--markdown",
        str(md),
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "PASS (13/13 rules pass)" in md.read_text()
