"""Client lag figures for run.json: by hand, against DuckDB's quantile_cont on the same lags, and the warning."""

from __future__ import annotations

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.clientlag import client_lag

MS = 1_000_000


def test_figures_by_hand_and_the_warning(capsys):
    # lags 0, 10, 20, 30 ms: p50 = 15 (halfway between ranks 1 and 2), p99 at rank 0.99 * 3 = 2.97 -> 29.7
    lag = client_lag([30 * MS, 0, 20 * MS, 10 * MS], {"lag_warn_ms": 25.0})["client_lag"]
    assert (lag["requests"], lag["p50_ms"], lag["p99_ms"], lag["max_ms"]) == (4, 15.0, 29.7, 30.0)
    assert lag["behind"] is True and "p99 29.7 ms > 25 ms" in lag["warning"]
    assert "client fell behind" in capsys.readouterr().err
    on_time = client_lag([1 * MS], {})["client_lag"]  # default threshold 10 ms
    assert on_time["behind"] is False and "warning" not in on_time and on_time["p99_ms"] == 1.0
    assert client_lag([], {}) == {"client_lag": {"requests": 0}}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10**9), min_size=1, max_size=50))
def test_matches_duckdb_quantile_cont(values):
    # the figures the log's SQL would give: DuckDB's quantile_cont over the same lags (ms, 3 decimals)
    con = duckdb.connect()
    ((p50, p99, worst),) = con.execute(
        "SELECT quantile_cont(v, 0.5), quantile_cont(v, 0.99), max(v) FROM (SELECT unnest(?::BIGINT[]) AS v)", [values]
    ).fetchall()
    lag = client_lag(values, {"lag_warn_ms": 1e9})["client_lag"]
    for got, want in ((lag["p50_ms"], p50), (lag["p99_ms"], p99), (lag["max_ms"], worst)):
        assert abs(got - want / MS) <= 0.0005 + 1e-9  # both sides rounded to 3 decimals of a ms at most


def test_closed_loop_judges_refills_and_reports_the_opening_apart(capsys):
    # the opening burst (4 requests due at t = 0) queues behind its own connects: reported, not judged
    opening = [0, 10 * MS, 20 * MS, 30 * MS]
    lag = client_lag([1 * MS, 2 * MS], {}, opening)["client_lag"]
    assert lag["mode"] == "closed-loop" and lag["behind"] is False and lag["requests"] == 2
    assert lag["opening"] == {"requests": 4, "p50_ms": 15.0, "p99_ms": 29.7, "max_ms": 30.0}
    assert capsys.readouterr().err == ""
    slow = client_lag([0, 40 * MS], {"lag_warn_ms": 20.0}, [])["client_lag"]  # p99 at 0.99 x 40 = 39.6 ms
    assert slow["behind"] is True and "slot-free-to-send lag p99 39.6 ms > 20 ms" in slow["warning"]
    assert "opening" not in slow and "slow to refill" in capsys.readouterr().err
    assert client_lag([], {}, [5 * MS])["client_lag"]["opening"]["requests"] == 1
