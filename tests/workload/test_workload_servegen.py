"""ServeGen per-client distributions: PMF parsing without eval, windowed Gamma/Weibull arrivals, R1 mixture."""

from __future__ import annotations

import numpy as np
import pytest

from kvbench.config import ConfigError
from kvbench.workload import servegen as sg
from kvbench.workload.dists import LengthSpec, sample_pair


def test_parse_pmf_grammar_and_fallback():
    p = sg.parse_pmf("{3: 0.25, 1: 0.5, 2: 0.25}", "w")
    assert p.values.tolist() == [1, 2, 3] and p.cdf.tolist() == [0.5, 0.75, 1.0]
    # Inverse CDF: u < 0.5 -> 1, 0.5 <= u < 0.75 -> 2, else 3.
    assert p.quantile(np.array([0.0, 0.49, 0.5, 0.8, 0.999])).tolist() == [1, 1, 2, 3, 3]
    q = sg.parse_pmf("{1: 1, 2: 3,}", "w")  # trailing comma, unnormalised -> normalised
    assert q.cdf.tolist() == [0.25, 1.0]
    assert sg.parse_pmf("{}", "w") is None  # ServeGen's marker for a window without data
    assert sg.parse_pmf("{1: 2.0e-1, 2: 8e-1}", "w").cdf.tolist() == pytest.approx([0.2, 1.0])


@pytest.mark.parametrize("text", ["__import__('os').system('echo pwned')", "{1: 'a'}", "[1, 2]", "{1: -0.5}", "{"])
def test_parse_pmf_rejects_code_and_junk(text):
    with pytest.raises(ConfigError, match="f.json: window 0.input_tokens"):
        sg.parse_pmf(text, "f.json: window 0.input_tokens")


def test_window_arrivals_count_and_bounds():
    rng = np.random.default_rng(0)
    for family, shape, scale in (("Gamma", 0.25, 4.0), ("Weibull", 0.5, 2.0), ("Gamma", 1e-9, 1.0)):
        t = sg.window_arrivals_s(rng, 1200.0, 51, family, shape, scale)
        assert len(t) == 51 and t.min() >= 1200.0 and t.max() < 1800.0 and np.all(np.diff(t) >= 0)


def test_window_cv_follows_the_fitted_shape():
    # Gamma shape k has CV 1/sqrt(k): k = 0.25 -> 2. The rescale is one factor per window, so the CV is kept.
    rng = np.random.default_rng(1)
    gaps = np.concatenate([np.diff(sg.window_arrivals_s(rng, 0.0, 2000, "Gamma", 0.25, 1.0)) for _ in range(5)])
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.1)


def test_client_files_and_generation(traces_dir):
    d = traces_dir / "servegen" / "reason" / "deepseek-r1"
    c = sg.load_client(d, 0)
    # chunk-0-trace.csv row 5: 2400 s, rate 0.085 req/s, Gamma(0.0223, 73.0) -> round(0.085*600) = 51 requests.
    assert c.windows[4].tolist() == pytest.approx([2400, 0.085, 0.02232167101916883, 73.01783087211976])
    assert c.families[4] == "Gamma" and c.families[0] == ""
    assert sorted(c.datasets) == [0, 21600]  # the 43200 and 64800 windows are '{}' in this file
    reqs = sg.generate(d, [0], 2400.0, 600.0, 1.0, seed=3, name="r1")
    assert len(reqs) == 51 and all(0 <= r.arrival_ns < 600e9 for r in reqs)
    assert all(r.reason_tokens <= r.output_tokens for r in reqs) and any(r.reason_tokens for r in reqs)
    assert reqs == sg.generate(d, [0], 2400.0, 600.0, 1.0, seed=3, name="r1")
    doubled = sg.generate(d, [0], 2400.0, 600.0, 2.0, seed=3)
    assert len(doubled) == 102  # rate_scale 2 -> round(0.085*600*2)


def test_r1_mixture_matches_sources(traces_dir):
    comps, w = sg.mixture(traces_dir / "servegen" / "reason" / "deepseek-r1")

    # Exact request-weighted means of the mixture (SOURCES.md §3: output mean 1,527, reason_ratio mean 0.70).
    def mean(field):
        return sum(wk * float(np.dot(c[field].values, np.diff(c[field].cdf, prepend=0.0))) for c, wk in zip(comps, w))

    assert mean("output_tokens") == pytest.approx(1527, abs=1)
    assert mean("reason_ratio") == pytest.approx(0.70, abs=0.005)
    assert mean("input_tokens") == pytest.approx(1268, abs=1)
    spec = LengthSpec("servegen", path=str(traces_dir / "servegen" / "reason" / "deepseek-r1"), max=10**6)
    n_in, n_out, reason = sample_pair(spec, spec, np.random.default_rng(0), 50_000)
    assert np.percentile(n_out, 50) == pytest.approx(792, rel=0.03)
    assert n_out.max() <= 32768 and np.all(reason <= n_out)


def test_bad_servegen_folder(tmp_path):
    with pytest.raises(ConfigError, match="no chunk-N-trace.csv"):
        sg.client_ids(tmp_path)
    (tmp_path / "chunk-0-trace.csv").write_text("0,1,1,Pareto,1,1\n")
    (tmp_path / "chunk-0-dataset.json").write_text("{}")
    with pytest.raises(ConfigError, match=r"chunk-0-trace.csv:1: field 'family'"):
        sg.load_client(tmp_path, 0)
