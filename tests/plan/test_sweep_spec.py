"""Sweep specs: axes as a cross product or listed points, dotted keys written quoted or as tables, which axis goes
where (run option, workload key, target --set key), and one-line errors naming the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbench.config import ConfigError
from kvbench.plan.sweepspec import load_sweep, point_name

TRACE = Path(__file__).resolve().parents[2] / "traces" / "kimi-sample.jsonl"


def _spec(tmp_path: Path, body: str, head: str = f'trace = "{TRACE}"\ntarget = "sim:pd-2p2d"\n') -> Path:
    p = tmp_path / "s.toml"
    p.write_text(head + body)
    return p


def test_product_of_axes_in_order_with_dotted_keys_either_way(tmp_path: Path) -> None:
    body = '[axes]\n"pools.decode.instances" = [1, 2]\nrate = [4.0, 8.0]\n[axes.router]\nname = ["random", "least_loaded"]\n'
    s = load_sweep(_spec(tmp_path, 'set = ["engine.max_running = 64"]\n' + body))
    assert s.name == "s" and s.axes == ("pools.decode.instances", "rate", "router.name")
    assert len(s.jobs) == 8
    first = s.jobs[0]
    assert first.params == (("pools.decode.instances", 1), ("rate", 4.0), ("router.name", "random"))
    # rate is a run option; the rest are --set keys after the spec's own `set`
    assert first.rate == 4.0 and first.target == "sim:pd-2p2d" and first.trace == str(TRACE)
    assert first.target_sets == ("engine.max_running = 64", "pools.decode.instances=1", 'router.name="random"')
    assert [j.params_dict()["rate"] for j in s.jobs[:4]] == [4.0, 4.0, 8.0, 8.0]


def test_listed_points_and_run_options(tmp_path: Path) -> None:
    body = (
        'mode = "list"\n[[points]]\ntarget = "fixed:servers=1"\nconcurrency = 4\nseed = 7\n'
        '[[points]]\ntarget = "fixed:servers=2"\ntime_scale = 2.0\nmax_requests = 10\n'
        '[[points]]\ntarget = "sim:pd-2p2d"\npools = {prefill = {instances = 3}}\n'
    )
    s = load_sweep(_spec(tmp_path, body))
    a, b, c = s.jobs
    assert (a.target, a.concurrency, a.seed, a.time_scale, a.target_sets) == ("fixed:servers=1", 4, 7, 1.0, ())
    assert (b.time_scale, b.max_requests, b.seed) == (2.0, 10, 0)
    assert c.target_sets == ("pools.prefill.instances=3",)
    assert s.axes == ("target", "concurrency", "seed", "time_scale", "max_requests", "pools.prefill.instances")


def test_workload_keys_go_to_the_workload_spec(tmp_path: Path) -> None:
    head = 'workload = "kimi-sample"\n'
    s = load_sweep(_spec(tmp_path, '[axes]\n"workload.sessions.think_s" = [1.0, 5.0]\n', head))
    assert s.jobs[0].workload.endswith("workloads/kimi-sample.toml") and s.jobs[0].trace is None
    assert [j.workload_sets for j in s.jobs] == [("sessions.think_s=1.0",), ("sessions.think_s=5.0",)]
    assert s.jobs[0].target == "sim"


def test_point_names_are_readable_and_unique() -> None:
    a = point_name({"pools.decode.instances": 2, "rate": 4.0, "target": "adapters/x.toml"})
    assert a.startswith("pools.decode.instances=2,rate=4,target=x.toml-") and len(a) == len(a.split("-")[0]) + 9
    assert a != point_name({"pools.decode.instances": 2, "rate": 4.5, "target": "adapters/x.toml"})
    assert "/" not in point_name({"target": "http://127.0.0.1:8000/v1"})


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("[axes]\nrate = []\n", "s.toml:4: axes.rate must be a non-empty list of values, got []"),
        ("[axes]\nrate = [0]\n", "s.toml:4: axes.rate must be a number > 0, got 0"),
        ("[axes]\nconcurrency = [1.5]\n", "axes.concurrency must be a whole number >= 1, got 1.5"),
        ('[axes]\n"workload.requests" = [5]\n', "workload.requests: workload keys need `workload`"),
        ("[axes]\nseed = [1, 1]\n", "two points have the same parameters"),
        ("colour = 1\n[axes]\nrate = [1]\n", "s.toml:3: unknown key 'colour'"),
        ('mode = "list"\n[axes]\nrate = [1]\n', "mode = 'list' takes [[points]] tables"),
        ("", "mode = 'product' takes an [axes] table"),
        ('workload = "kimi-sample"\n[axes]\nrate = [1]\n', "give exactly one of `workload`"),
    ],
)
def test_bad_specs_are_one_line_errors(tmp_path: Path, body: str, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_sweep(_spec(tmp_path, body))
    assert needle in str(e.value) and "\n" not in str(e.value)
