"""`kvbench summary` end to end: a real replay on the fixed target, figures computed by hand, summary.json, CLI."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import textwrap

import pytest

from kvbench.eventlog import read_manifest, write_manifest
from kvbench.present import summary
from kvbench.records import Request
from kvbench.run import RunOptions, execute
from kvbench.targets import resolve
from kvbench.workload.load import Workload

MS = 1_000_000


@pytest.fixture(scope="module")
def fixed_run(tmp_path_factory):
    # 8 requests at i * 100 ms, outputs 1 2 3 4 1 2 3 4 tokens; no queueing (servers=0); every 4th released fails
    reqs = [Request(i, i * 100 * MS, 100 * (i + 1), [1, 2, 3, 4][i % 4]) for i in range(8)]
    wl = Workload("hand", "test", "0", lambda: iter(reqs), slo_ms={"ttft": 40.0})
    run_dir, stats = execute(
        wl,
        resolve("fixed:ttft_ms=50,itl_ms=10,servers=0,fail_every=4"),
        RunOptions(out=tmp_path_factory.mktemp("s") / "run"),
    )
    assert stats.status == "complete"
    return run_dir


def test_fixed_target_figures_by_hand(fixed_run):
    m = summary.build(fixed_run)["metrics"]
    # finished 0 1 2 4 5 6 (3 and 7 fail at release + 50); TTFT 50 each, E2E 50 + 10 (n - 1)
    assert (m["finished"], m["errors"], m["requests"]) == (6, 2, 8)
    assert (m["ttft_ms.mean"], m["ttft_ms.p99"]) == (50, 50)
    assert (m["tpot_ms.count"], m["tpot_ms.mean"]) == (4, 10)  # one-token requests 0 and 4 have none
    assert (m["itl_ms.count"], m["itl_ms.p99"]) == (6, 10)  # 0 + 1 + 2 + 0 + 1 + 2 evenly spaced gaps
    assert (m["e2e_ms.mean"], m["e2e_ms.max"]) == (60, 70)  # 50 60 70 50 60 70
    assert m["duration_s"] == pytest.approx(0.75)  # last terminal: request 7 fails at 700 + 50
    assert m["request_throughput"] == pytest.approx(6 / 0.75)
    assert m["output_token_throughput"] == pytest.approx(12 / 0.75)  # 1+2+3+1+2+3
    assert m["failures.ERROR.server_error"] == 2


def test_workload_slo_used_by_default_and_overridden(fixed_run):
    doc = summary.build(fixed_run)
    assert doc["slo_ms"] == {"ttft": 40.0} and doc["metrics"]["good"] == 0  # TTFT 50 > 40
    from kvbench.analysis.metrics import parse_slo

    doc = summary.build(fixed_run, parse_slo("ttft=60,e2el=60"))
    assert doc["metrics"]["good"] == 4  # E2E <= 60: requests 0 1 4 5
    assert doc["metrics"]["slo_attainment"] == pytest.approx(4 / 8)


def test_summary_json_and_printed_table(fixed_run):
    out = io.StringIO()
    summary.print_run_summary(fixed_run, file=out)
    text = out.getvalue()
    assert "TTFT" in text and "ITL" in text and "8 (6 finished, 2 errors" in text
    doc = summary.load(fixed_run / "summary.json")
    assert doc["metrics"]["ttft_ms.p50"] == 50 and doc["status"] == "complete"
    assert doc["samples"]["ttft_ms"] == {"n": 6, "values": [50.0] * 6}
    assert doc["timeseries"]["bucket_s"] == 1.0 and doc["timeseries"]["arrivals"] == [8.0]


def test_killed_run_is_reported_and_running_requests_counted(tmp_path, fixed_run):
    import shutil

    run = shutil.copytree(fixed_run, tmp_path / "killed")
    manifest = read_manifest(run)
    manifest["status"] = "running"
    write_manifest(run, manifest)
    doc = summary.build(run)
    assert doc["status"] == "killed" and doc["metrics"]["running"] == 0


def test_cli_summary_json_writes_file(tmp_path, fixed_run):
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            "from kvbench.cli.app import main; main()",
            "summary",
            str(fixed_run),
            "--json",
            "--bucket",
            "0.25",
            "--slo",
            "ttft=60",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc == json.loads((fixed_run / "summary.json").read_text())
    assert doc["slo_ms"] == {"ttft": 60.0} and doc["metrics"]["good"] == 6
    # 250 ms buckets: 0 100 200 | 300 400 | 500 600 700 | (request 7 ends at 750: a bucket with no arrival)
    assert doc["timeseries"]["arrivals"] == [3.0, 2.0, 3.0, 0.0]


def _table_rows(text: str) -> dict[str, list[str]]:
    return {
        c[0]: c[1:]
        for c in ([x.strip() for x in line.strip("│").split("│")] for line in text.splitlines() if line.startswith("│"))
    }


def test_per_instance_figures_print_as_one_table(tmp_path):
    from support.metrics_logs import sim_run

    run = sim_run(tmp_path / "sim")
    out = io.StringIO()
    summary.print_run_summary(run, file=out)
    text = out.getvalue()
    assert "instance." not in text and "prefix_hit_ratio." not in text  # no line per flat key
    assert re.search(r"hits by tier +dram 0\.167 *$", text, re.M)  # 256 cached from dram / 1536 prompt tokens
    rows = _table_rows(text)
    # d0: 10 + 3 + 2 steps, busy 220 of 300 ms, batch (4*100 + 2*60 + 1*60) / 220, KV (50+18+6)/220, max 0.5,
    #     B prefilled there with 0 of 512 cached (trace 0); d1: 1 step over 150 ms, batch 1, KV 5 %, no prefill;
    #     p0: no steps, A's 256 of 1024 cached (trace 512)
    assert rows["d0"] == ["15", "0.733", "2.636", "0.336", "0.500", "0.000", "0.000"]
    assert rows["d1"] == ["1", "0.500", "1.000", "0.050", "0.050", "—", "—"]
    assert rows["p0"] == ["—", "—", "—", "—", "—", "0.250", "0.500"]
    m = summary.load(run / "summary.json")["metrics"]  # summary.json keeps the flat keys gates use
    assert m["instance.d0.steps"] == 15 and m["prefix_hit_ratio.instance.p0"] == 0.25
    assert m["prefix_hit_ratio.tier.dram"] == pytest.approx(256 / 1536)


def test_instances_in_natural_order_one_line_each():
    m = {f"instance.decode-{i}.{f}": 1.0 for i in range(16) for f in ("utilisation", "batch")}
    table = summary.instances_table(m)
    out = io.StringIO()
    from rich.console import Console

    Console(file=out, width=120).print(table)
    names = [line.split("│")[1].strip() for line in out.getvalue().splitlines() if line.startswith("│")]
    assert names == [f"decode-{i}" for i in range(16)]  # decode-2 before decode-10
    assert [c.header for c in table.columns] == ["instance", "utilisation", "mean batch"]
    assert summary.instances_table({"ttft_ms.p50": 1.0}) is None


def test_summary_of_a_sim_run_imports_no_pandas(tmp_path, conversation_trace):
    code = f"""
        import sys
        from pathlib import Path
        from kvbench.run import RunOptions, execute
        from kvbench.targets import resolve
        from kvbench.workload.load import from_trace, shape
        from kvbench.present.summary import build
        run_dir, _ = execute(shape(from_trace(Path({str(conversation_trace)!r})), max_requests=30),
                             resolve("sim"), RunOptions(seed=0, out=Path({str(tmp_path / "run")!r})))
        doc = build(run_dir)
        print(doc["metrics"]["finished"], "pandas" in sys.modules)
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["30", "False"]
