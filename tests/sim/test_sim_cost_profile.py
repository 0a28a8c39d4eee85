"""ProfileCost: a measured step-time CSV interpolated by hand-checkable rules, exact decode runs, bad profiles."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.config import ConfigError
from kvbench.sim import spec
from kvbench.sim.cost.config import cost_model
from kvbench.sim.cost.profile import ProfileCost
from kvbench.sim.cost.roofline import CostModel
from kvbench.sim.spec_decode import verify_step_ns

PROFILE = """prefill_tokens,context_tokens,batch,kv_tokens,time_ms
100,0,0,0,10
200,0,0,0,18
100,1000,0,0,12
0,0,1,0,5
0,0,1,1000,6
0,0,8,0,6
0,0,8,8000,10
"""


@pytest.fixture()
def prof(tmp_path: Path) -> ProfileCost:
    path = tmp_path / "h100.csv"
    path.write_text(PROFILE)
    c = cost_model({"model": "Llama-3.1-8B", "gpu": "H100", "profile": str(path)}, "p")
    assert isinstance(c, ProfileCost)
    return c


def test_prefill_interpolation(prof: ProfileCost) -> None:
    # attention pairs (n*c + n(n+1)/2): 100 -> 5,050, 200 -> 20,100, 100 after 1000 -> 105,050. The fit
    # t = a + b*n + q*pairs is exact on three rows: rows 1 and 3 differ only in pairs: q = 2 ms / 100,000 = 20 ns
    # per pair. Residuals t - q*pairs: 100 -> 10 - 0.101 = 9.899 ms, 200 -> 18 - 0.402 = 17.598 ms
    # 150: residual halfway 13.7485 ms + 20 ns * 11,325 pairs (0.2265 ms) = 13.975 ms
    assert prof.prefill_ns(150) == 13_975_000
    # beyond the last row the residual's last segment extrapolates (300 -> 25.297 ms) and the attention keeps
    # growing with n^2: + 20 ns * 45,150 = 0.903 ms -> 26.2 ms (a linear extrapolation would give 26 ms)
    assert prof.prefill_ns(300) == 26_200_000
    # 150 after 500 cached: 13.7485 + 20 ns * (75,000 + 11,325) = 13.7485 + 1.7265 = 15.475 ms
    assert prof.prefill_ns(150, 500) == 15_475_000
    # the measured rows come back exactly
    assert [prof.prefill_ns(100), prof.prefill_ns(200), prof.prefill_ns(100, 1000)] == [10**7, 18 * 10**6, 12 * 10**6]


def test_prefill_grows_with_the_square_of_the_prompt(tmp_path: Path) -> None:
    # rows of t = 1 ms + 30 us * n + 0.1 us * n(n+1)/2 (per token: 44 us at 128, 133 us at 2k, the shape of the
    # measured server in issue 14), no context rows: the fit recovers q = 0.1 us per pair, so a 4k prompt past
    # the last row costs 1 + 122.88 + 0.1 us * 8,390,656 pairs = 962.9456 ms; extrapolating the 1k-2k segment
    # linearly (84.2 -> 272.2656 ms) would give 272.2656 + 2 * 188.0656 = 648.3968 ms
    rows = ["prefill_tokens,context_tokens,batch,kv_tokens,time_ms"]
    rows += [f"{n},0,0,0,{1 + 0.03 * n + 0.0001 * n * (n + 1) / 2:.4f}" for n in (128, 256, 1024, 2048)]
    rows += ["0,0,1,0,5", "0,0,1,1000,6"]
    path = tmp_path / "quad.csv"
    path.write_text("\n".join(rows) + "\n")
    c = cost_model({"model": "Llama-3.1-8B", "gpu": "H100", "profile": str(path)}, "p")
    assert isinstance(c, ProfileCost)
    assert abs(c.prefill_ns(4096) - 962_945_600) <= 100
    assert abs(c.prefill_ns(1024) - 84_200_000) <= 100 and abs(c.prefill_ns(128) - 5_665_600) <= 100


def test_decode_interpolation(prof: ProfileCost) -> None:
    # batch 8: line through (0, 6 ms), (8000, 10 ms): 6 ms + 500 ns per KV token -> 2000 KV: 7 ms
    assert prof.decode_step_ns(8, 2000) == 7_000_000
    # batch 4 lies 3/7 of the way from batch 1 (5 ms + 1000 ns/token) to batch 8:
    #   a = 5 + 1 * 3/7 ms = 5,428,571.4 ns; s = 1000 - 500 * 3/7 = 785.71 ns/token; at 2000: 7,000,000 (+-1)
    assert abs(prof.decode_step_ns(4, 2000) - 7_000_000) <= 1
    # a mixed step: the chunk plus the decode tokens as prefill tokens, plus the decode KV slope
    #   prefill(108): residual 9.899 + 7.699 * 8/100 = 10.51492 ms + 20 ns * 5,886 pairs = 10.63264 ms;
    #   + 500 ns * 2000 = 1 ms -> 11.63264 ms
    assert prof.step_ns(100, 0, 8, 2000) == 11_632_640
    assert prof.kv_capacity_tokens() > 0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 64), st.integers(0, 100_000), st.integers(0, 100), st.integers(0, 10**10))
def test_profile_runs_are_exact(tmp_path_factory, batch: int, kv: int, n: int, budget: int) -> None:
    path = tmp_path_factory.getbasetemp() / "prof.csv"
    path.write_text(PROFILE)
    c = cost_model({"model": "Llama-3.1-8B", "gpu": "H100", "profile": str(path)}, "p")
    assert c.decode_run_ns(batch, kv, n) == sum(c.decode_step_ns(batch, kv + batch * i) for i in range(n))
    w = c.decode_steps_within(batch, kv, budget)
    assert c.decode_run_ns(batch, kv, w) <= budget < c.decode_run_ns(batch, kv, w + 1)


@pytest.mark.parametrize(
    "text, match",
    [
        ("prefill_tokens,batch,time_ms\n1,0,1\n", r"missing column\(s\) context_tokens, kv_tokens"),
        (PROFILE + "5,0,3,0,1\n", r"h.csv:9: need counts >= 0, time_ms > 0 and exactly one of"),
        (PROFILE + "5,0,0,0,x\n", r"h.csv:9: expected whole numbers and time_ms"),
        (
            "prefill_tokens,context_tokens,batch,kv_tokens,time_ms\n0,0,1,0,5\n",
            r"needs prefill rows with context_tokens = 0",
        ),
    ],
)
def test_bad_profiles(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "h.csv"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match) as e:
        cost_model({"model": "Llama-3.1-8B", "gpu": "H100", "profile": str(path)}, "p")
    assert "\n" not in str(e.value)


def test_missing_profile_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^p key 'profile': profile .*nope.csv: no such file"):
        cost_model({"model": "Llama-3.1-8B", "gpu": "H100", "profile": str(tmp_path / "nope.csv")}, "p")


def test_profile_verify_step(prof: ProfileCost) -> None:
    # batch 2 verifying k=3 (4 tokens each) at 2000 KV: intercept of batch 8 (6 ms, the GEMMs of 8 tokens) plus
    # the KV slope of batch 2 (1000 - 500/7 = 928.57 ns/token) * 2000 = 1,857,142.9 -> 7,857,142 (+-1)
    assert abs(verify_step_ns(prof, 2, 2000, 3) - 7_857_142) <= 1


def test_a_short_ladder_extrapolates_the_roofline_it_was_measured_from(tmp_path: Path) -> None:
    # a calibrate-style ladder (prompts of 128..2,048 tokens, two rows after cached context) of the H100
    # Llama-3.1-8B roofline: past the last row the profile follows the roofline's quadratic attention (32k tokens:
    # 1,185 ms vs the roofline's 1,214 ms; a linear extrapolation read 726 ms)
    truth = CostModel(spec.model("Llama-3.1-8B"), spec.gpu("H100"))
    rows = ["prefill_tokens,context_tokens,batch,kv_tokens,time_ms"]
    rows += [f"{n},0,0,0,{truth.prefill_ns(n) / 1e6:.4f}" for n in (128, 256, 512, 1024, 2048)]
    rows += [f"{n},{c},0,0,{truth.prefill_ns(n, c) / 1e6:.4f}" for n, c in ((256, 2048), (1024, 2048))]
    rows += ["0,0,1,0,5", "0,0,1,1000,6"]
    path = tmp_path / "ladder.csv"
    path.write_text("\n".join(rows) + "\n")
    c = cost_model({"model": "Llama-3.1-8B", "gpu": "H100", "profile": str(path)}, "p")
    for n in (8192, 16384, 32768):
        assert c.prefill_ns(n) == pytest.approx(truth.prefill_ns(n), rel=0.03)
