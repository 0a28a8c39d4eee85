"""The report's parts on hand-built inputs: deployment, per-GPU rows, run order, CI cells, palettes, axis scales,
Prometheus label columns, the fidelity section and where `kvbench report` writes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from kvbench.analysis.catalogue import Direction, Display
from kvbench.config import ConfigError
from kvbench.present import plots
from kvbench.present.compare import Delta
from kvbench.present.deploy import deployment
from kvbench.present.figures_runs import label_columns
from kvbench.present.report import build_report, order_runs
from kvbench.present.rows import Row, summary_rows
from kvbench.present.tables import ci_cell

sys.path.insert(0, str(Path(__file__).parent))
from test_report import _run  # noqa: E402  (the three-request hand-built run)

PD = {
    "kind": "sim",
    "name": "pd",
    "params": {
        "model": "Llama-3.1-8B",
        "pools": {
            "prefill": {"role": "prefill", "instances": 2, "gpu": "H100", "tp": 2},
            "decode": {"role": "decode", "instances": 3, "gpu": "H100", "tp": 1},
        },
        "router": {"name": "least_loaded"},
    },
}


def test_deployment_reads_pools_gpus_tp_and_router() -> None:
    d = deployment({"target": PD})
    # GPUs: 2 prefill x TP 2 + 3 decode x TP 1 = 7
    assert (d.model, d.pools, d.gpus, d.gpu, d.tp, d.router) == (
        "Llama-3.1-8B", "2P3D", 7, "H100", "prefill 2, decode 1", "least_loaded"
    )  # fmt: skip
    assert d.text() == "Llama-3.1-8B, 2P3D, 7 x H100, TP prefill 2, decode 1, router least_loaded"
    colocated = {"params": {"pools": {"main": {"role": "colocated", "instances": 8, "gpu": "A100", "tp": 1}}}}
    assert deployment({"target": colocated}).text() == "8 colocated, 8 x A100, TP 1"
    assert deployment({"target": {"kind": "openai", "name": "http://x/v1"}}).text() == "not recorded"


def test_per_gpu_rows_follow_their_totals() -> None:
    rows = summary_rows([{"request_throughput": 8.0, "goodput": 6.0}, {"request_throughput": 3.0}], [4, None])
    by_label = {r.label: r.values for r in rows}
    assert by_label["request throughput per GPU (req/s)"] == ["2", "–"]  # 8 / 4 GPUs; unknown GPU count
    assert by_label["goodput per GPU (good req/s)"] == ["1.5", "–"]
    labels = [r.label for r in rows]
    assert labels.index("request throughput per GPU (req/s)") == labels.index("request throughput (req/s)") + 1
    assert not any("per GPU" in r.label for r in summary_rows([{"request_throughput": 8.0}], [None]))


def test_runs_sort_naturally_or_as_given_with_the_baseline_first(tmp_path: Path) -> None:
    dirs = [tmp_path / n for n in ("rate-10", "rate-5", "rate-20")]
    assert [d.name for d in order_runs(dirs, None, False)] == ["rate-5", "rate-10", "rate-20"]
    assert [d.name for d in order_runs(dirs, tmp_path / "rate-20", False)] == ["rate-20", "rate-5", "rate-10"]
    assert [d.name for d in order_runs(dirs, tmp_path / "rate-5", True)] == ["rate-5", "rate-10", "rate-20"]
    with pytest.raises(ConfigError, match="--baseline"):
        order_runs(dirs, tmp_path / "other", False)


def test_a_change_is_flagged_only_when_its_interval_excludes_zero() -> None:
    row = Row("ttft_ms.p99", "TTFT p99 (ms)", ["100", "120"], Direction.LOWER, [100.0, 120.0], Display.NUM)
    flagged = ci_cell(row, 120.0, Delta("ttft_ms.p99", 100.0, 120.0, 20.0, 0.2, (5.0, 35.0)))
    assert (flagged.text, flagged.cls, flagged.ci, flagged.mark) == ("+20 (+20.0%)", "worse", "95% CI [+5, +35]", " ❌")
    spans = ci_cell(row, 120.0, Delta("ttft_ms.p99", 100.0, 120.0, 20.0, 0.2, (-10.0, 50.0)))
    assert (spans.cls, spans.ci, spans.mark) == ("same", "95% CI [-10, +50]: no significant change", "")
    no_ci = ci_cell(row, 120.0, None)
    assert no_ci.cls == "same" and no_ci.ci.startswith("no CI")


def test_palette_never_repeats_a_colour() -> None:
    names = [f"run-{i}" for i in range(40)]
    colours = [tuple(round(c, 3) for c in v) for v in plots.palette_for(names).values()]
    assert len(set(colours)) == 40
    assert plots.palette_for(["a"])["a"] == (1 / 255, 115 / 255, 178 / 255)  # #0173b2, the first colour


def test_cdf_scale_is_one_for_the_figure_and_labelled() -> None:
    rows = [{"run": "a", "metric": "TTFT", "value_ms": v} for v in (1.0, 10.0, 1000.0)]  # 1000x: a heavy tail
    rows += [{"run": "a", "metric": "TPOT", "value_ms": v} for v in (10.0, 11.0, 12.0)]
    fig = plots.latency_cdfs(pd.DataFrame(rows))
    assert [ax.get_xscale() for ax in fig.axes[:2]] == ["log", "log"]  # TPOT too, though its own spread is small
    assert all("log scale" in ax.get_xlabel() for ax in fig.axes[:2])
    linear = plots.latency_cdfs(pd.DataFrame(rows[3:]))
    assert linear.axes[0].get_xscale() == "linear" and linear.axes[0].get_xlim()[0] == 0
    assert "from 0" in linear.axes[0].get_xlabel()


def test_latency_over_time_starts_at_zero() -> None:
    df = pd.DataFrame({"run": "a", "t_s": [0.0, 1.0, 2.0], "p50": [50.0, 60.0, 55.0]})
    ax = plots.over_time(df, [plots.Panel("TTFT (ms)", {"p50": "p50"})]).axes[0]
    assert ax.get_ylim()[0] == 0


def test_prometheus_labels_become_columns() -> None:
    labels = pd.Series(['model_name="m\\"x",le="+Inf"', "", 'engine="0"', 'model_name="m\\"x",le="+Inf"'])
    cols = label_columns(labels)
    assert cols.to_dict("list") == {
        "model_name": ['m"x', "", "", 'm"x'],
        "le": ["+Inf", "", "", "+Inf"],
        "engine": ["", "", "0", ""],
    }


def _as_sim(run: Path) -> Path:
    doc = json.loads((run / "run.json").read_text())
    doc["target"] = {"kind": "sim", "name": "pd-2p2d", "params": {}}
    (run / "run.json").write_text(json.dumps(doc))
    return run


def test_fidelity_section_for_a_sim_and_a_real_run(tmp_path: Path) -> None:
    sim, real = _as_sim(_run(tmp_path / "sim")), _run(tmp_path / "real", slow_ms=40)
    html = build_report([sim, real], "html")
    section = html.split('id="fidelity"')[1].split("</section>")[0]
    # TTFT p50: sim (100, 50 ms) -> 75; real (100, 90 ms) -> 95; error (75 - 95) / 95 = -21.1 %
    assert '<td>TTFT p50 (ms)</td><td class="num">75</td><td class="num">95</td>' in section
    assert "-21.1" in section.split("TTFT p50 (ms)")[1].split("</tr>")[0]
    assert section.count("<img ") == 2  # per-request scatter and CDF overlay
    assert 'id="fidelity"' not in build_report([real, _run(tmp_path / "real2")], "html")


def test_report_writes_report_md_by_default_and_stdout_with_dash(tmp_path: Path, monkeypatch, capsys) -> None:
    from kvbench.cli.app import main

    run = _run(tmp_path / "r")
    monkeypatch.chdir(tmp_path)
    for args in (["--format", "md"], ["--format", "md", "-o", "-"]):
        monkeypatch.setattr(sys, "argv", ["kvbench", "report", str(run), *args])
        with pytest.raises(SystemExit) as done:
            main()
        assert (done.value.code or 0) == 0
    assert (tmp_path / "report.md").read_text().startswith("# kvbench report\n")
    out = capsys.readouterr().out
    assert out.startswith("# kvbench report\n") and "| requests | 3 |" in out


def test_server_metrics_section_parses_labels_and_draws_families(tmp_path: Path) -> None:
    from kvbench.eventlog import EventLog, write_manifest
    from kvbench.records import Event

    run = tmp_path / "scraped"
    log = EventLog(run)
    for e in (Event(0, 0, "ARRIVE", tokens=10), Event(0, 0, "SEND"), Event(10**8, 0, "FIRST_TOKEN", "ep", 1)):
        log.emit(tuple(e))
    log.emit(tuple(Event(2 * 10**8, 0, "LAST_TOKEN", "ep", 2)))
    log.emit(tuple(Event(2 * 10**8, 0, "FINISH", "ep", 2, 0)))
    rows = [(t * 10**9, "vllm:num_requests_running", 'model_name="m",engine="0"', float(t)) for t in range(3)]
    rows += [(t * 10**9, "vllm:kv_cache_usage_perc", 'model_name="m"', 0.5) for t in range(3)]
    log.table("server_metrics").extend(rows)
    log.close()
    write_manifest(run, {"schema_version": 1, "run_id": "s", "status": "complete", "target": {"kind": "openai"}})
    html = build_report([run], "html")
    section = html.split('id="server"')[1].split("</section>")[0]
    # families in name order: label columns each uses, label sets, samples
    assert "<td>vllm:kv_cache_usage_perc</td><td>model_name</td>" in section
    assert "<td>vllm:num_requests_running</td><td>model_name, engine</td>" in section
    assert section.count("<img ") == 1 and "Scraped families over time" in section
