"""The metric catalogue drives every list of metrics: summary.json's keys, the bootstrap samples, the gate's known
keys and directions, compare's headline, the report's rows and the terminal tables; a row added to it (with its
SQL) flows through all of them."""

from __future__ import annotations

import io
import re
import shutil
import tomllib
from pathlib import Path

import pytest
from support.metrics_logs import real_run

from kvbench.analysis import catalogue, sqlfiles
from kvbench.analysis.catalogue import CATALOGUE, PLACEHOLDERS, STATS, Direction, Display, Metric, Shape
from kvbench.analysis.figures import figures
from kvbench.analysis.runset import open_runs
from kvbench.present import summary
from kvbench.present.compare import compare, delta_for
from kvbench.present.gate import check, parse_rules
from kvbench.present.report import build_report
from kvbench.present.rows import delta, summary_rows


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> Path:
    """Hand-built real-endpoint run: finished, errors, a rejection, a cancellation, one still running."""
    return real_run(tmp_path_factory.mktemp("cat") / "real")


@pytest.fixture(scope="module")
def sim(tmp_path_factory, conversation_trace: Path) -> Path:
    """A simulator replay (PD cluster: instances, KV tiers, transfers)."""
    from kvbench.run import RunOptions, execute
    from kvbench.targets import resolve
    from kvbench.workload import load

    wl = load.shape(load.select(conversation_trace, None), max_requests=150)
    run_dir, _ = execute(wl, resolve("sim:pd-2p2d"), RunOptions(out=tmp_path_factory.mktemp("cat") / "sim"))
    return run_dir


@pytest.fixture(scope="module")
def docs(real: Path, sim: Path) -> dict[str, dict]:
    return {"real": summary.build(real), "sim": summary.build(sim)}


def _rules(keys: list[str]):
    text = "".join(f'[[rule]]\nmetric = "{k}"\n' for k in keys)
    return parse_rules(tomllib.loads(text), "gates.toml", text)


def test_rows_are_well_formed():
    keys = [m.key for m in CATALOGUE]
    assert len(keys) == len(set(keys))
    for m in CATALOGUE:
        assert (m.shape is Shape.PER_ROW) == ("{" in m.key), m.key
        assert set(re.findall(r"\{(\w+)\}", m.key)) <= set(PLACEHOLDERS), m.key
        assert (sqlfiles.SQL_DIR / f"{m.sql}.sql").is_file(), m.sql
        for which in (m.headline, m.report):
            assert isinstance(which, bool) or (m.distribution and set(which) <= set(STATS)), m.key
        # the column's suffix says its unit: times are ns in SQL, rates per ns
        if m.unit in ("ms", "s"):
            assert m.column.endswith("_ns"), m.key
        if m.unit.endswith("/s"):
            assert m.column.endswith("_per_ns"), m.key


def test_every_row_reads_a_column_its_sql_returns(sim: Path):
    con = open_runs([sim])
    try:
        figures(con)  # builds the temp tables the files read
        bound = {"percentiles": [0.5], "run": sim.name, "duration_ns": 1}
        columns = {m.sql: {d[0] for d in sqlfiles.execute(con, m.sql, bound).description} for m in CATALOGUE}
    finally:
        con.close()
    for m in CATALOGUE:
        wanted = {
            Shape.QUANTILES: {f"{m.column}_{s}" for s in ("count", "mean", "q", "max")},
            Shape.POOLED: {m.column, "n"},
        }.get(m.shape, {m.column} | set(re.findall(r"\{(\w+)\}", m.key)))
        assert wanted <= columns[m.sql], (m.key, wanted - columns[m.sql])


def test_summary_json_holds_every_catalogue_key_and_only_those(docs: dict[str, dict]):
    fixed = set(catalogue.fixed_keys())
    for doc in docs.values():
        assert fixed <= set(doc["metrics"])
        assert all(catalogue.is_known(k) for k in doc["metrics"])
        assert set(doc["samples"]) == set(catalogue.samples())
    made = {catalogue.lookup(k)[0].key for doc in docs.values() for k in doc["metrics"]}
    assert {m.key for m in catalogue.per_row()} <= made  # every per-row pattern appears in one of the two runs
    m = docs["real"]["metrics"]  # trace reuse of the finished requests on ep: (512 + 0 + 1024) / (1024 + 512 + 1024)
    assert (m["failures.ERROR.server_error"], m["errors"], m["trace_hit_ratio.instance.ep"]) == (1, 1, 0.6)


def test_gate_knows_every_key_and_defaults_to_the_catalogue_direction(docs: dict[str, dict]):
    keys = sorted({k for doc in docs.values() for k in doc["metrics"]})
    for rule in _rules(keys):
        metric = catalogue.lookup(rule.key)[0]
        want = Direction.NEITHER if metric.distribution and rule.key.endswith(".count") else metric.direction
        assert rule.direction == want == catalogue.direction_of(rule.key), rule.key
    assert {r.direction for r in _rules(["ttft_ms.p99", "request_throughput", "trace_hit_ratio"])} == set(Direction)


def test_directions_agree_in_the_report_and_the_gate(docs: dict[str, dict]):
    rows = summary_rows([docs["real"]["metrics"], docs["sim"]["metrics"]])
    gate = {r.key: r.direction for r in _rules([row.key for row in rows])}
    assert rows and all(row.direction == gate[row.key] for row in rows)
    trace = next(row for row in rows if row.key == "trace_hit_ratio")
    assert trace.direction is Direction.NEITHER
    assert delta(0.5, 0.6, trace.direction, trace.display)[1] == "same"  # a workload fact: neither better nor worse


def test_trace_hit_ratio_gate_fails_on_a_change_either_way():
    (rule,) = parse_rules(tomllib.loads(t := '[[rule]]\nmetric = "trace_hit_ratio"\ntolerance_abs = 0.05\n'), "g", t)
    base = {"metrics": {"trace_hit_ratio": 0.5, "requests": 10}}
    verdict = {c: check(rule, base, {"metrics": {"trace_hit_ratio": c, "requests": 10}}, delta_for) for c in (0.6, 0.4)}
    assert [(v.status, v.message) for v in verdict.values()] == [
        ("regression", "changed by 0.1, allowed 0.05"),
        ("regression", "changed by 0.1, allowed 0.05"),
    ]
    assert check(rule, base, {"metrics": {"trace_hit_ratio": 0.53, "requests": 10}}, delta_for).passed


def test_compare_report_and_terminal_follow_the_catalogue(docs: dict[str, dict]):
    doc = docs["sim"]
    assert [d.metric for d in compare(doc, doc, resamples=10)] == catalogue.headline_keys()
    report_keys = [k for k, _, _ in catalogue.report_rows()]
    assert [r.key for r in summary_rows([doc["metrics"]])] == [k for k in report_keys if doc["metrics"][k] is not None]
    out = io.StringIO()
    summary.print_summary(doc, out)
    labels = [line.split("│")[1].strip() for line in out.getvalue().splitlines() if line.startswith("│")]
    m = doc["metrics"]
    assert m["client_lag_ms.count"] and m["client_lag_ms.max"] == 0  # a sim run: its all-zero lag row is left out
    shown = [x for x in catalogue.distributions() if m[f"{x.key}.count"] and x.key != "client_lag_ms"]
    assert labels[: len(shown)] == [f"{m.label} ({m.note})" if m.note else m.label for m in shown]


NEW_SQL = """-- prompt_stats: the longest prompt of a finished request, per run.
SELECT run, max(input_tokens) AS longest_tokens FROM per_request WHERE status = 'FINISH' GROUP BY run ORDER BY run;
"""
NEW_ROWS = (
    Metric("longest_prompt", "longest prompt", "tokens", Direction.NEITHER, "prompt_stats", "longest_tokens",
           display=Display.INT, headline=True, report=True),  # a new SQL file
    Metric("cached_tokens", "cached prompt tokens", "tokens", Direction.HIGHER, "run_totals", "cached_tokens",
           display=Display.INT, headline=True, report=True),  # a column run_totals.sql already has
)  # fmt: skip


def test_a_new_catalogue_row_and_its_sql_flow_everywhere(real: Path, tmp_path: Path, monkeypatch):
    sql_dir = shutil.copytree(sqlfiles.SQL_DIR, tmp_path / "sql")
    (sql_dir / "prompt_stats.sql").write_text(NEW_SQL)
    monkeypatch.setattr(sqlfiles, "SQL_DIR", sql_dir)
    monkeypatch.setattr(catalogue, "CATALOGUE", CATALOGUE + NEW_ROWS)
    doc = summary.build(real)
    # finished: request 0 (1024 prompt tokens, 512 cached), 1 (512, 0 cached), 5 (1024, 256 cached)
    assert (doc["metrics"]["longest_prompt"], doc["metrics"]["cached_tokens"]) == (1024, 768)
    rules = _rules(["longest_prompt", "cached_tokens"])
    assert [r.direction for r in rules] == [Direction.NEITHER, Direction.HIGHER]
    deltas = {d.metric: d for d in compare(doc, doc, resamples=10)}
    assert deltas["longest_prompt"].delta == 0 and deltas["cached_tokens"].delta == 0
    md = build_report([real], "md")
    assert "| longest prompt | 1,024 |" in md and "| cached prompt tokens | 768 |" in md
