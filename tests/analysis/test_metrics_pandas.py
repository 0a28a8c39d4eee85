"""The SQL figures recomputed independently with pandas/numpy on random (seeded) event logs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from support.metrics_logs import ev, req, write_run

from kvbench.analysis.metrics import parse_slo, summary

P = {"p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "p99.9": 0.999}


def _random_log(rng: np.random.Generator, n: int):
    """Events and the truth per request, drawn at random: lags, queueing, chunk gaps, failures, running ones."""
    events, reqs, truth, gaps = [], [], [], []
    for rid in range(n):
        arrive = float(rng.integers(0, 5000))
        send = arrive + float(rng.integers(0, 5))
        fate = rng.choice(["ok", "ok", "ok", "ok", "error", "reject", "running"])
        inp = int(rng.integers(1, 4000))
        cached = int(rng.integers(0, inp + 1))
        reqs.append(req(rid, arrive, inp, 0, int(rng.integers(0, inp + 1))))
        events += [ev(arrive, rid, "ARRIVE", tokens=inp), ev(send, rid, "SEND")]
        if fate == "reject":
            events.append(ev(send + 1, rid, "REJECT", detail="rate_limited: 429"))
            truth.append(dict(rid=rid, status="REJECT", end=send + 1))
            continue
        first = send + float(rng.integers(1, 400))
        g = rng.integers(1, 80, size=int(rng.integers(0, 30))).astype(float)
        times = first + np.concatenate([[0.0], np.cumsum(g)])
        events.append(ev(first, rid, "FIRST_TOKEN", "ep", 1))
        events += [ev(t, rid, "CHUNK", "ep", 1) for t in times[1:]]
        out, last = len(times), float(times[-1])
        if fate == "running":
            truth.append(dict(rid=rid, status="RUNNING", end=None))
        elif fate == "error":
            events.append(ev(last + 3, rid, "ERROR", "ep", detail="server_error: x"))
            truth.append(dict(rid=rid, status="ERROR", end=last + 3))
        else:
            events += [ev(last, rid, "LAST_TOKEN", "ep", out), ev(last, rid, "FINISH", "ep", out, cached)]
            truth.append(
                dict(
                    rid=rid,
                    status="FINISH",
                    end=last,
                    arrive=arrive,
                    send=send,
                    first=first,
                    last=last,
                    out=out,
                    inp=inp,
                    cached=cached,
                    trace=reqs[-1][9],
                )
            )
            gaps.append(g)
    return events, reqs, pd.DataFrame(truth), gaps


def _stats(values) -> dict:
    v = np.asarray(values, dtype=float)
    out = {"count": len(v), "mean": v.mean(), "max": v.max()}
    out.update({k: np.quantile(v, p) for k, p in P.items()})
    return out


def _tbt(g: np.ndarray) -> float:
    k = int(np.ceil(len(g) / 10))
    return float(np.sort(g)[::-1][:k].mean())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_summary_matches_pandas(tmp_path, seed):
    rng = np.random.default_rng(seed)
    events, reqs, truth, gaps = _random_log(rng, 300)
    m = summary(write_run(tmp_path / "r", events, reqs), parse_slo("ttft=200,tpot=30"))
    ok = truth[truth["status"] == "FINISH"].copy()
    ok["ttft"], ok["e2e"], ok["lag"] = ok["first"] - ok["arrive"], ok["last"] - ok["arrive"], ok["send"] - ok["arrive"]
    ok["tpot"] = np.where(ok["out"] >= 2, (ok["last"] - ok["first"]) / (ok["out"] - 1).clip(lower=1), np.nan)
    expected = {
        "ttft_ms": ok["ttft"],
        "e2e_ms": ok["e2e"],
        "client_lag_ms": ok["lag"],
        "tpot_ms": ok["tpot"].dropna(),
        "tbt_ms": [_tbt(g) for g in gaps if len(g)],
        "itl_ms": np.concatenate(gaps),
    }
    for name, values in expected.items():
        for stat, want in _stats(values).items():
            assert m[f"{name}.{stat}"] == pytest.approx(want, rel=1e-9, abs=1e-9), f"{name}.{stat}"
    duration_s = (truth["end"].max() - min(r[3] for r in reqs) / 1e6) / 1000
    good = ((ok["ttft"] <= 200) & (ok["tpot"].fillna(0) <= 30)).sum()
    assert m["duration_s"] == pytest.approx(duration_s)
    assert m["request_throughput"] == pytest.approx(len(ok) / duration_s)
    assert m["output_token_throughput"] == pytest.approx(ok["out"].sum() / duration_s)
    assert (m["good"], m["slo_attainment"]) == (good, pytest.approx(good / len(truth)))
    assert m["prefix_hit_ratio"] == pytest.approx(ok["cached"].sum() / ok["inp"].sum())
    assert m["trace_hit_ratio"] == pytest.approx(ok["trace"].sum() / ok["inp"].sum())
    counts = truth["status"].value_counts()
    assert (m["errors"], m["rejected"], m["running"]) == (
        counts.get("ERROR", 0),
        counts.get("REJECT", 0),
        counts.get("RUNNING", 0),
    )
