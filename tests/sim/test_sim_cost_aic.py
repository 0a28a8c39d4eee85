"""The AIConfigurator cost backend (extra kvbench[aic], installed by the test extra): the committed reference
reproduced, `kvbench profile aic`, `cost = "aic:BACKEND"` built once and cached, the error without the extra."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.config import ConfigError
from kvbench.sim import spec
from kvbench.sim.cost.aic import AicEngine, version
from kvbench.sim.cost.config import cost_model
from kvbench.sim.cost.profile import COLUMNS, ProfileCost
from kvbench.units import ns_to_ms

REFERENCE = Path(__file__).parent / "reference" / "aic_step_times.csv"


def kvbench(*args: str, home: Path, prelude: str = "") -> subprocess.CompletedProcess:
    code = f"{prelude}from kvbench.cli.app import main; main()"
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env=env)


def test_installed_aiconfigurator_reproduces_the_reference_table() -> None:
    assert version() == "0.12.0"  # the version tests/sim/reference/README.md names
    with REFERENCE.open(newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if (r["model"], r["gpu"], r["backend"]) == ("Qwen3-32B", "H200", "vllm")]
    e = AicEngine(spec.model("Qwen3-32B"), spec.gpu("H200"), 1, "vllm")
    for r in rows:
        t = (
            e.prefill_ms(int(r["tokens"]))
            if r["phase"] == "prefill"
            else e.decode_ms(int(r["batch"]), int(r["context"]))
        )
        assert round(t, 4) == float(r["time_ms"]), r


def test_profile_command_writes_and_caches_the_csv(tmp_path: Path) -> None:
    out = tmp_path / "p.csv"
    r = kvbench(
        "profile",
        "aic",
        "--model",
        "Llama-3.1-8B",
        "--gpu",
        "H100",
        "--backend",
        "sglang",
        "-o",
        str(out),
        home=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    cached = tmp_path / ".cache" / "kvbench" / "aic" / "Llama-3.1-8B-H100-tp1-sglang-aic0.12.0.csv"
    assert cached.read_bytes() == out.read_bytes()
    with out.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == COLUMNS
    # 13 prompt lengths (16 .. 128k), 4 prefills after cached context, 10 batch sizes x 4 contexts
    assert len(rows) == 13 + 4 + 40
    e = AicEngine(spec.model("Llama-3.1-8B"), spec.gpu("H100"), 1, "sglang")
    row = next(r for r in rows if r["prefill_tokens"] == "2048" and r["context_tokens"] == "0")
    assert float(row["time_ms"]) == round(e.prefill_ms(2048), 4)
    # the profile the sim loads hits AIC's figure at a grid point
    prof = cost_model({"model": "Llama-3.1-8B", "gpu": "H100", "profile": str(out)}, "t")
    assert isinstance(prof, ProfileCost)
    assert ns_to_ms(prof.prefill_ns(2048)) == float(row["time_ms"])


def test_pool_cost_aic_builds_once_then_reuses_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    pool = {"model": "Llama-3-70B", "gpu": "H200", "tp": 8, "cost": "aic:trtllm"}
    c = cost_model(pool, "p.toml [pools.decode]")
    path = tmp_path / ".cache" / "kvbench" / "aic" / "Llama-3-70B-H200-tp8-trtllm-aic0.12.0.csv"
    assert isinstance(c, ProfileCost) and path.is_file()
    e = AicEngine(spec.model("Llama-3-70B"), spec.gpu("H200"), 8, "trtllm")
    # decode rows of batch 8 at contexts 128 .. 16k lie on one line in the batch's KV: exact at the grid
    assert ns_to_ms(c.decode_step_ns(8, 8 * 1024)) == pytest.approx(e.decode_ms(8, 1024), rel=0.02)
    stamp = path.stat().st_mtime_ns
    cost_model(pool, "p.toml [pools.decode]")
    assert path.stat().st_mtime_ns == stamp
    assert (
        c.kv_capacity_tokens() == cost_model({k: v for k, v in pool.items() if k != "cost"}, "p").kv_capacity_tokens()
    )


@pytest.mark.parametrize(
    "extra, match",
    [
        ({"cost": "aic:tgi"}, r"^p: key 'cost' = 'aic:tgi': expected one of roofline, aic, aic:trtllm, aic:vllm"),
        ({"cost": 3}, r"^p: key 'cost' = 3: expected one of"),
        ({"cost": "aic", "profile": "x.csv"}, r"^p: keys 'profile' and 'cost' exclude each other"),
        ({"gpu": "H800", "cost": "aic"}, r"aic: GPU 'H800' has no AIConfigurator system; known: A100-80GB, H100"),
    ],
)
def test_bad_cost_keys(extra: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        cost_model({"model": "Llama-3.1-8B", "gpu": "H100", **extra}, "p")


def test_without_the_extra_one_line_says_how_to_install(tmp_path: Path) -> None:
    # the distribution looked up under a name that is not installed: what a machine without the extra sees
    prelude = "import kvbench.sim.cost.aic as a; a.DISTRIBUTION = 'not-installed-aic'; "
    r = kvbench("profile", "aic", "--model", "Llama-3.1-8B", "--gpu", "H100", home=tmp_path, prelude=prelude)
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [
        "kvbench: error: the aic cost backend needs AIConfigurator, which is not installed: pip install 'kvbench[aic]'"
    ]
