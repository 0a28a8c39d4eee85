"""`kvbench report` on hand-built runs: figures with hand-computed values, escaping of untrusted run text,
notes for figures without data, comparisons, Markdown, bad input; and the page rendered by headless Chromium."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from support.chromium import dump_dom

from kvbench.analysis.catalogue import Direction, Display
from kvbench.eventlog import EventLog, write_manifest
from kvbench.present.report import auto_bucket_s, build_report
from kvbench.present.rows import delta
from kvbench.records import Event

MS = 1_000_000  # ns per ms
EVIL = "<script>alert(1)</script>"
EVIL_NAME = '"><img src=x onerror=alert(2)>'


def _run(run_dir: Path, slow_ms: int = 0) -> Path:
    """Three requests. r0: arrive 0, first token 100 ms, last 300 ms, 5 tokens. r1: arrive 50 ms, ERROR at 80 ms
    with a hostile detail. r2: arrive 100 ms, first token 150 ms (+slow_ms), last 250 ms (+slow_ms), 3 tokens.
    TTFT = 100 and 50 (+slow) ms -> mean 75 ms at slow 0; TPOT r0 = 200/4 = 50 ms, r2 = 100/2 = 50 ms."""
    s = slow_ms * MS
    events = [
        Event(0, 0, "ARRIVE", tokens=10),
        Event(0, 0, "SEND"),
        Event(100 * MS, 0, "FIRST_TOKEN", "ep", 1),
        Event(300 * MS, 0, "LAST_TOKEN", "ep", 5),
        Event(300 * MS, 0, "FINISH", "ep", 5, 4),
        Event(50 * MS, 1, "ARRIVE", tokens=10),
        Event(50 * MS, 1, "SEND"),
        Event(80 * MS, 1, "ERROR", "ep", detail=f"server_error: {EVIL}"),
        Event(100 * MS, 2, "ARRIVE", tokens=10),
        Event(100 * MS, 2, "SEND"),
        Event(150 * MS + s, 2, "FIRST_TOKEN", "ep", 1),
        Event(250 * MS + s, 2, "LAST_TOKEN", "ep", 3),
        Event(250 * MS + s, 2, "FINISH", "ep", 3, 0),
    ]
    log = EventLog(run_dir)
    for e in sorted(events, key=lambda e: e.t_ns):
        log.emit(tuple(e))
    for req_id, arrival_ms, out, reuse in ((0, 0, 5, 5), (1, 50, 4, 0), (2, 100, 3, 0)):
        # req_id, session, turn, arrival, input 10, output, reasoning, block tokens, blocks, trace reuse, workload
        log.requests.append((req_id, -1, 0, arrival_ms * MS, 10, out, 0, 512, 1, reuse, "hand"))
    log.close()
    write_manifest(
        run_dir,
        {
            "schema_version": 1,
            "run_id": f"hand-{EVIL}",
            "status": "complete",
            "workload": {"name": EVIL_NAME, "source": "hand", "slo_ms": {"ttft": 120}},
            "target": {"kind": "openai", "name": f"http://x/{EVIL}"},
            "counts": {"last_t_ns": 300 * MS},
        },
    )
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("report")
    return _run(root / "base"), _run(root / "slow", slow_ms=40)


@pytest.fixture(scope="module")
def html_two(runs) -> str:
    return build_report(list(runs), "html")


def _cell(html: str, label: str) -> list[str]:
    row = re.search(rf"<tr><td>{re.escape(label)}</td>(.*?)</tr>", html)
    assert row, label
    return re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))


def test_summary_values_computed_by_hand(runs, html_two: str) -> None:
    summary = html_two.split('id="summary"')[1].split("</section>")[0]
    assert _cell(summary, "requests") == ["3", "3"]
    assert _cell(summary, "errors") == ["1", "1"]
    assert _cell(summary, "TTFT mean (ms)") == ["75", "95"]  # (100 + 50) / 2; slow: (100 + 90) / 2
    assert _cell(summary, "TPOT mean (ms)") == ["50", "50"]
    # SLO from run.json: ttft <= 120 ms. base: r0 (100) and r2 (50) good of 3; slow: r0 (100), r2 (90) good.
    assert _cell(summary, "SLO attainment") == ["66.67 %", "66.67 %"]
    # Finished r0 (10 prompt tokens, 4 cached, trace reuse 5) and r2 (10, 0 cached, 0): 4/20 and 5/20.
    assert _cell(summary, "prefix hit ratio, achieved") == ["20.00 %", "20.00 %"]
    assert _cell(summary, "prefix hit ratio, trace-implied") == ["25.00 %", "25.00 %"]
    comparison = html_two.split('id="comparison"')[1].split("</section>")[0]
    # Two requests a run: the bootstrap interval of +20 ms spans zero, so the change is not flagged.
    ttft = _cell(comparison, "TTFT mean (ms)")
    assert ttft[0] == "75" and ttft[1].startswith('<span class="same">+20 (+26.7%)</span><br><span class="ci">95% CI [')
    assert ttft[1].endswith(": no significant change</span>")


def test_untrusted_text_is_escaped_and_page_is_self_contained(html_two: str) -> None:
    assert "<script" not in html_two.lower() and "onerror=alert" not in html_two.replace("onerror=alert(2)&gt;", "")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html_two  # the failure detail, shown as text
    assert "&#34;&gt;&lt;img src=x onerror=alert(2)&gt;" in html_two  # the workload name (Jinja2 autoescape)
    assert "<link" not in html_two and not re.search(r"""(src|href)=["']?(https?:)?//""", html_two)
    imgs = re.findall(r'<img [^>]*src="([^"]{0,30})', html_two)
    assert imgs and all(src.startswith(("data:image/png;base64,", "data:image/svg+xml;base64,")) for src in imgs)


def test_figures_without_data_are_notes(html_two: str) -> None:
    # CDFs, latency, throughput, in flight, cache hits, failures over time; latency vs throughput, token histograms,
    # TTFT vs prompt and cached tokens
    assert html_two.count("<img ") == 9
    assert "No steps table" in html_two and "No KV transfers in these runs." in html_two


def test_markdown_summary_escapes_and_compares(runs) -> None:
    md = build_report(list(runs), "md")
    assert "<script" not in md and "| ERROR | server\\_error: &lt;script&gt;alert(1)&lt;/script&gt; | 1 |" in md
    assert "| TTFT mean (ms) | 75 | +20 (+26.7%), 95% CI \\[-10, +50\\]: no significant change |" in md
    assert "| requests | 3 | 3 |" in md


def test_report_is_deterministic(runs, html_two: str) -> None:
    assert build_report(list(runs), "html") == html_two  # figures too: PNGs carry no timestamp


def test_delta_directions() -> None:
    lower, higher = Direction.LOWER, Direction.HIGHER
    assert delta(100.0, 80.0, lower) == ("-20 (-20.0%)", "better")  # latency down
    assert delta(0.9, 0.95, higher, Display.PCT) == ("+5.00 pp", "better")
    assert delta(2, 2, higher, Display.INT) == ("+0 (+0.0%)", "same") and delta(None, 1.0, higher) == ("–", "same")


def test_auto_bucket_is_round_and_bounded() -> None:
    assert auto_bucket_s(240 * 10**9) == 1.0  # 240 s -> 240 one-second buckets
    assert auto_bucket_s(241 * 10**9) == 2.0 and auto_bucket_s(3600 * 10**9) == 20.0  # 3600/240 = 15 -> 20
    assert auto_bucket_s(0) == 0.001


def test_sim_run_report_has_heatmaps_and_kv_transfers(tmp_path: Path, conversation_trace: Path) -> None:
    from typer.testing import CliRunner

    from kvbench.cli.app import app

    run = tmp_path / "sim"
    res = CliRunner().invoke(
        app,
        ["replay", "--trace", str(conversation_trace), "--target", "sim:pd-2p2d", "-n", "150", "--out", str(run), "-q"],
    )
    assert res.exit_code == 0, res.output
    html = build_report([run], "html")
    for key in ("util-heatmap", "kv-heatmap", "kv-transfer"):
        assert re.search(rf'<figure id="{key}"><h3>[^<]*</h3><img ', html), key


def _kvbench(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """Run the real entry point in-process (ConfigError -> one line on stderr, exit 2): (exit code, stderr)."""
    from kvbench.cli.app import main

    monkeypatch.setattr(sys, "argv", ["kvbench", *args])
    with pytest.raises(SystemExit) as done:
        main()
    return done.value.code or 0, capsys.readouterr().err


def test_bad_input_is_one_line_exit_2(runs, tmp_path: Path, monkeypatch, capsys) -> None:
    for args, needle in (
        ([str(tmp_path)], "run.json"),
        ([str(runs[0]), "--format", "pdf"], "--format"),
        ([str(runs[0]), "--slo", "ttft=fast"], "--slo"),
        ([str(runs[0]), str(runs[0])], "twice"),
    ):
        code, err = _kvbench(monkeypatch, capsys, "report", *args, "-o", str(tmp_path / "r.html"))
        assert code == 2 and needle in err and err.count("\n") == 1, err


def test_cli_report_with_goodput_curve_renders_in_chromium(runs, tmp_path: Path, monkeypatch, capsys) -> None:
    from kvbench.plan.goodput import GoodputResult, Probe, write_result

    write_result(
        GoodputResult(
            0.9,
            0.05,
            10.0,
            10.4,
            (Probe(5, 1.0, 100), Probe(10, 0.95, 100), Probe(10.4, 0.5, 100)),
            slo={"ttft": 150.0},
        ),
        tmp_path / "gp",
    )
    out = tmp_path / "report.html"
    code, err = _kvbench(
        monkeypatch, capsys, "report", str(runs[0]), str(runs[1]), str(tmp_path / "gp"), "-o", str(out)
    )
    assert code == 0, err
    dom = dump_dom(out, tmp_path / "profile")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "CONSOLE" not in dom.stderr and "Uncaught" not in dom.stderr, dom.stderr[-2000:]
    assert dom.stdout.count("<img ") == 10 and 'id="goodput"' in dom.stdout  # 9 run figures + attainment curve
    assert "SLO attainment vs rate" in dom.stdout and "&lt;script&gt;" in dom.stdout
