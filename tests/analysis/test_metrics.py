"""Metrics over hand-built event logs: every figure checked against arithmetic done by hand (in the comments)."""

from __future__ import annotations

import math

import pytest
from support.metrics_logs import ev, real_run, req, sim_run, write_run

from kvbench.analysis.metrics import (
    Slo,
    instance_load,
    itl_gaps,
    kv_transfers,
    open_runs,
    parse_slo,
    per_request,
    summary,
    timeseries,
)
from kvbench.config import ConfigError


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    return real_run(tmp_path_factory.mktemp("m") / "real")


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    return sim_run(tmp_path_factory.mktemp("m") / "sim")


def approx(x):
    return pytest.approx(x, rel=1e-9, abs=1e-12)


def test_per_request_rows_by_hand(real):
    df = per_request(open_runs([real])).set_index("req_id")
    assert list(df["status"]) == ["FINISH", "FINISH", "ERROR", "REJECT", "RUNNING", "FINISH", "CANCEL"]
    assert df.loc[2, "reason"] == "server_error" and df.loc[3, "reason"] == "rate_limited"
    assert df.loc[6, "reason"] == "session" and df.loc[6, "arrival_ns"] == 320_000_000  # from the requests row
    assert df.loc[0, "ttft_ns"] == 100_000_000  # first 100 - intended arrival 0
    assert df.loc[0, "lag_ns"] == 1_000_000  # send 1 - arrival 0
    assert df.loc[0, "tpot_ns"] == 20_000_000  # (160 - 100) / (4 - 1)
    assert df.loc[0, "tbt_ns"] == 30_000_000  # 3 gaps -> k = ceil(0.3) = 1 -> the longest, 30
    assert df.loc[5, "tpot_ns"] == approx(155e6 / 11)  # (555 - 400) / (12 - 1)
    assert df.loc[5, "tbt_ns"] == 55_000_000  # 11 gaps -> k = 2 -> (60 + 50) / 2
    assert math.isnan(df.loc[1, "tpot_ns"]) and math.isnan(df.loc[1, "tbt_ns"])  # one token: no TPOT, no TBT
    assert df.loc[4, "output_tokens"] == 2  # still running: tokens of FIRST_TOKEN + CHUNK so far
    assert list(df["good"]) == [True, True, False, False, False, True, False]  # no SLO: good = finished


def test_summary_real_run_by_hand(real):
    m = summary(real)
    # 7 requests: finished 0, 1, 5; error 2; rejected 3; running 4; cancelled 6
    assert (m["requests"], m["finished"], m["errors"], m["rejected"], m["running"], m["cancelled"]) == (
        7,
        3,
        1,
        1,
        1,
        1,
    )
    assert m["duration_s"] == approx(0.56)  # first ARRIVE 0 -> last terminal event 560 ms
    assert m["request_throughput"] == approx(3 / 0.56)
    assert m["output_token_throughput"] == approx((4 + 1 + 12) / 0.56)
    assert m["total_token_throughput"] == approx((1024 + 512 + 1024 + 17) / 0.56)
    # TTFT over finished [100, 200, 100]: mean 133.3; p90 at h = 0.9 * 2 = 1.8 -> 100 + 0.8 * 100 = 180
    assert (m["ttft_ms.count"], m["ttft_ms.mean"], m["ttft_ms.p50"], m["ttft_ms.p90"], m["ttft_ms.max"]) == (
        3,
        approx(400 / 3),
        100,
        approx(180),
        200,
    )
    assert m["tpot_ms.count"] == 2 and m["tpot_ms.p50"] == approx((20 + 155 / 11) / 2)
    assert (m["e2e_ms.mean"], m["e2e_ms.max"]) == (approx((160 + 200 + 255) / 3), 255)
    assert m["client_lag_ms.mean"] == approx(11 / 3)  # lags 1, 0, 10
    assert (m["tbt_ms.count"], m["tbt_ms.mean"]) == (2, approx(42.5))  # 30 and 55
    # ITL pooled over finished: 10 20 30 and 9 x 5, 50, 60 (14 gaps; running request 4 left out)
    assert m["itl_ms.count"] == 14 and m["itl_ms.mean"] == approx(215 / 14)
    assert m["itl_ms.p50"] == approx(5)  # h = 6.5: sorted[6] = sorted[7] = 5
    assert m["itl_ms.p90"] == approx(44)  # h = 11.7: 30 + 0.7 * (50 - 30)
    assert m["itl_ms.max"] == 60
    assert m["prefix_hit_ratio"] == approx(768 / 2560) and m["trace_hit_ratio"] == approx(1536 / 2560)
    assert (m["failures.ERROR.server_error"], m["failures.REJECT.rate_limited"], m["failures.CANCEL.session"]) == (
        1,
        1,
        1,
    )
    assert m["slo_attainment"] == approx(3 / 7) and m["goodput"] == approx(3 / 0.56)
    assert m["kv_transfer.count"] == 0 and m["queue_ms.count"] == 0


@pytest.mark.parametrize(
    "slo, good",
    [
        ("ttft=150", 2),  # requests 0 and 5 (TTFT 100); 1 has 200
        ("ttft=150,tpot=15", 1),  # request 0 has TPOT 20 > 15
        ("tbt=40", 2),  # 0 (TBT 30) and 1 (one token: no TBT, meets); 5 has 55
        ("e2el=200", 2),  # E2E 160, 200 (<= meets), 255
    ],
)
def test_slo_attainment_and_goodput(real, slo, good):
    m = summary(real, parse_slo(slo))
    assert m["good"] == good
    assert m["slo_attainment"] == approx(good / 7)  # every request in the log is in the denominator
    assert m["goodput"] == approx(good / 0.56)


def test_sim_itl_from_steps_by_hand(sim):
    con = open_runs([sim])
    df = per_request(con).set_index("req_id")
    # A decodes on d0 from 45 to 230: the steps that start and end inside: [50,60)..[90,100) (5 of 10 ms; the
    # step [40,50) was running when A joined), [100,120) [120,140) [140,160) (3 of 20), [200,230) (1 of 30);
    # 9 gaps, TBT k = ceil(0.9) = 1 -> 30. B (colocated) from 100 to 140: [100,120) [120,140) -> 2 gaps, TBT 20.
    assert df.loc[0, "tbt_ns"] == 30_000_000 and df.loc[1, "tbt_ns"] == 20_000_000
    gaps = itl_gaps(con)
    assert dict(zip(gaps["gap_ns"] // 1_000_000, gaps["n"])) == {10: 5, 20: 5, 30: 1}
    m = summary(sim)
    assert m["itl_ms.count"] == 11 and m["itl_ms.mean"] == approx(180 / 11)
    assert (m["itl_ms.p50"], m["itl_ms.p99"]) == (approx(20), approx(29))  # h=5: 20; h=9.9: 20 + 0.9 * 10
    assert m["tpot_ms.mean"] == approx((19 + 20) / 2)  # (230-40)/10 and (140-100)/2
    assert (m["queue_ms.mean"], m["queue_ms.max"]) == (approx(9), 10)  # A: 10 - ROUTE 2; B: 60 - SEND 50
    assert (m["preemptions"], m["preempted"]) == (1, 1)


def test_sim_cache_kv_and_instances_by_hand(sim):
    m = summary(sim)
    assert m["prefix_hit_ratio"] == approx(256 / 1536)
    assert m["prefix_hit_ratio.tier.dram"] == approx(256 / 1536)
    assert m["prefix_hit_ratio.instance.p0"] == approx(0.25) and m["trace_hit_ratio.instance.p0"] == approx(0.5)
    assert m["prefix_hit_ratio.instance.d0"] == 0
    # transfers: dram 12..20 (2 MB, all inside A's TTFT window 0..40), rdma 40..45 (1 MB, after the first token)
    assert (m["kv_transfer.count"], m["kv_transfer.bytes"]) == (2, 3_000_000)
    assert m["kv_transfer.time_s"] == approx(0.013) and m["kv_transfer.ttft_share"] == approx(8 / (40 + 50))
    # duration 0..300; d0 busy 100 + 60 + 60 = 220
    assert m["instance.d0.utilisation"] == approx(220 / 300)
    assert m["instance.d0.batch"] == approx((4 * 100 + 2 * 60 + 1 * 60) / 220)
    assert m["instance.d0.kv_occupancy"] == approx((0.5 * 100 + 0.3 * 60 + 0.1 * 60) / 220)
    assert m["instance.d0.kv_occupancy_max"] == approx(0.5) and m["instance.d1.utilisation"] == approx(0.5)
    xfers = kv_transfers(open_runs([sim]))
    assert list(xfers["tier"]) == ["dram", "rdma"] and list(xfers["in_ttft_ns"]) == [8_000_000, 0]


def test_instance_load_buckets_by_hand(sim):
    df = instance_load(open_runs([sim]), 0.1)
    d0 = df[df["instance"] == "d0"].set_index("bucket")
    assert list(d0["utilisation"]) == [approx(1.0), approx(0.6), approx(0.6)]
    assert list(d0["steps"]) == [approx(10), approx(3), approx(2)]
    assert list(d0["batch"]) == [4, 2, 1]


def test_timeseries_by_hand(real):
    ts = timeseries(open_runs([real]), 0.1).set_index("bucket")
    # arrivals by intended arrival: [0,100): 0, 1; [100,200): 2, 3; [200,300): 4; [300,400): 5, 6 (cancel at 320)
    assert list(ts["arrivals"]) == [2, 2, 1, 2, 0, 0]
    # ends: 3 @151 (b1), 0 @160 (b1), 1 @250 (b2), 2 @300 (b3), 6 @320 (b3), 5 @560 (b5); 4 never ends
    assert list(ts["finished"]) == [0, 1, 1, 0, 0, 1]
    assert list(ts["errors"]) == [0, 1, 0, 2, 0, 0]
    assert list(ts["in_flight"]) == [2, 2, 2, 2, 2, 1]
    assert ts.loc[5, "output_tok_s"] == approx(12 / 0.1)
    assert ts.loc[0, "ttft_p50_ms"] == approx(150)  # TTFT 100 and 200 of arrivals in bucket 0


def test_zero_requests(tmp_path):
    run = write_run(tmp_path / "empty", [], [])
    m = summary(run)
    assert (m["requests"], m["finished"], m["duration_s"]) == (0, 0, 0.0)
    assert m["request_throughput"] is None and m["slo_attainment"] is None and m["ttft_ms.p99"] is None
    assert m["itl_ms.count"] == 0


def test_run_without_requests_table_takes_prompt_lengths_from_arrive(tmp_path):
    import shutil

    run = real_run(tmp_path / "partial")
    shutil.rmtree(run / "requests")  # a foreign or partial log: events only
    df = per_request(open_runs([run])).set_index("req_id")
    # ARRIVE tokens: 0 -> 1024, 1 -> 512, 2..4 -> 256, 5 -> 1024; request 6 has no ARRIVE (cancelled unsent)
    assert list(df["input_tokens"].astype("Float64").fillna(-1)) == [1024, 512, 256, 256, 256, 1024, -1]
    m = summary(run)
    assert m["prefix_hit_ratio"] == approx((512 + 0 + 256) / (1024 + 512 + 1024))  # cached of finished 0, 1, 5
    assert m["trace_hit_ratio"] is None  # trace reuse lives only in the requests table
    assert m["total_token_throughput"] == approx((2560 + 17) / 0.56)


def test_several_runs_have_a_run_column(real, sim):
    con = open_runs([real, sim])
    rows = con.execute("SELECT run, count(*) FROM requests GROUP BY run ORDER BY run").fetchall()
    assert rows == [("real", 7), ("sim", 2)]
    assert set(per_request(con)["run"]) == {"real", "sim"}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("ttft=200,tpot=50", Slo(ttft_ms=200, tpot_ms=50)),
        ("ttft:200, e2el=5000ms,tbt=100", Slo(ttft_ms=200, e2el_ms=5000, tbt_ms=100)),
        ("tpot_ms=7.5", Slo(tpot_ms=7.5)),
    ],
)
def test_parse_slo(text, expected):
    assert parse_slo(text) == expected


@pytest.mark.parametrize(
    "text, words",
    [
        ("ttft", "cannot parse 'ttft'"),
        ("ttft=abc", "cannot parse"),
        ("ttfb=10", "unknown key 'ttfb'"),
        ("ttft=1,ttft=2", "given twice"),
        ("", "no threshold"),
        ("ttft=-5", "cannot parse"),
    ],
)
def test_parse_slo_errors_are_one_line(text, words):
    with pytest.raises(ConfigError, match=words) as e:
        parse_slo(text)
    assert "\n" not in str(e.value)


def test_a_fractional_mean_is_exact_whatever_order_the_values_are_added_in(tmp_path):
    # TPOT 1/10, 2/10, 3/10 ns (11 tokens over 1, 2, 3 ns). Added as doubles in any order the sum is
    # 0.6000000000000001 or (3+2+1) a mean of 0.19999999999999998; the exact mean is 0.2 ns.
    events, requests = [], []
    for rid in range(3):
        first_ms = 10.0 * (rid + 1)
        events += [
            ev(0, rid, "ARRIVE", tokens=16),
            ev(0, rid, "SEND"),
            ev(first_ms, rid, "FIRST_TOKEN", "ep", 1),
            ev(first_ms + (rid + 1) * 1e-6, rid, "LAST_TOKEN", "ep", 11),
            ev(first_ms + (rid + 1) * 1e-6, rid, "FINISH", "ep", 11),
        ]
        requests.append(req(rid, 0, 16, 11))
    m = summary(write_run(tmp_path / "exact", events, requests))
    assert m["tpot_ms.count"] == 3
    assert m["tpot_ms.mean"] == 0.2 / 1e6
