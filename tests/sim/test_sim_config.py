"""Bad sim profiles fail before any simulation with one line naming the file, the key and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbench.config import ConfigError
from kvbench.eventlog import EventLog
from kvbench.sim.cluster import parse_cluster
from kvbench.sim.target import SimTarget
from kvbench.target import RunContext
from kvbench.targets import find_adapter, resolve

GOOD = """kind = "sim"
model = "Llama-3.1-8B"

[pools.prefill]
role = "prefill"
instances = 2
gpu = "H100"

[pools.decode]
role = "decode"
instances = 2
gpu = "H100"

[router]
name = "least_loaded"
"""


def build(tmp_path: Path, text: str, overrides=()) -> SimTarget:
    path = tmp_path / "p.toml"
    path.write_text(text)
    spec = resolve(str(path), list(overrides))
    return SimTarget(spec, RunContext(0, tmp_path, EventLog(tmp_path / "run")))


def error_of(tmp_path: Path, text: str, overrides=()) -> str:
    with pytest.raises(ConfigError) as e:
        build(tmp_path, text, overrides)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_the_good_profile_builds(tmp_path):
    t = build(tmp_path, GOOD)
    assert [e.name for e in t.cluster.engines] == ["prefill-0", "prefill-1", "decode-0", "decode-1"]
    assert t.cfg.layout == "pd"


def test_unknown_top_level_key_names_file_line_and_allowed(tmp_path):
    msg = error_of(tmp_path, GOOD.replace('model = "Llama-3.1-8B"', 'model = "Llama-3.1-8B"\nroutr = "x"'))
    assert "p.toml:3" in msg and "'routr'" in msg and "allowed:" in msg and "router" in msg


def test_unknown_pool_key(tmp_path):
    msg = error_of(tmp_path, GOOD.replace('role = "decode"', 'role = "decode"\ninstnces = 3'))
    assert "p.toml:" in msg and "pools.decode.instnces" in msg and "max_running" in msg


def test_unknown_router_lists_the_routers(tmp_path):
    msg = error_of(tmp_path, GOOD, ["router.name=fastest"])
    assert "router.name" in msg and "cache_aware" in msg and "conductor" in msg and "'fastest'" in msg


def test_unknown_router_parameter(tmp_path):
    msg = error_of(tmp_path, GOOD, ["router.cache_threshold=0.5"])  # least_loaded has no parameters
    assert "router.cache_threshold" in msg and "allowed: name" in msg


def test_impossible_values(tmp_path):
    assert "pools.decode.instances" in error_of(tmp_path, GOOD, ["pools.decode.instances=0"])
    assert "must be" in error_of(tmp_path, GOOD, ["pools.decode.instances=0"])
    msg = error_of(tmp_path, GOOD, ["pools.prefill.tp=16"])  # more TP than GPUs in a node
    assert "pools.prefill.tp" in msg and "<= 8" in msg
    msg = error_of(tmp_path, GOOD, ["engine.token_budget=-5"])
    assert "engine.token_budget" in msg


@pytest.mark.parametrize(
    "override, message",
    [
        (
            "pools.prefill.instances=10000000",
            "p.toml:6: pools.prefill.instances must be a whole number >= 1 and <= 4,096",
        ),
        ("pools.decode.max_running=70000", "pools.decode.max_running must be a whole number >= 1 and <= 65,536"),
        ("engine.token_budget=20000000", "engine.token_budget must be a whole number >= 1 and <= 16,777,216"),
        (
            "pools.prefill.token_budget=20000000",
            "pools.prefill.token_budget must be a whole number >= 1 and <= 16,777,216",
        ),
        ("prefix_block_tokens=2000000", "prefix_block_tokens must be a whole number >= 1 and <= 1,048,576"),
        (
            "tiers.pool.capacity_tokens=2000000000000",
            "tiers.pool.capacity_tokens must be a token count > 0 and <= 1,099,511,627,776",
        ),
    ],
)
def test_sizes_past_any_real_deployment_are_refused_before_building(tmp_path, override, message):
    text = GOOD + '\n[tiers.pool]\ncapacity_tokens = "50M"\nlink = "roce-mooncake"\n'
    assert message in parse_error_of(tmp_path, text, [override])


def parse_error_of(tmp_path: Path, text: str, overrides: list[str]) -> str:
    """The one-line error of reading the profile (parse_cluster alone: nothing is built, whatever the sizes)."""
    path = tmp_path / "p.toml"
    path.write_text(text)
    spec = resolve(str(path), overrides)
    with pytest.raises(ConfigError) as e:
        parse_cluster(spec.params, spec.source)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_gpus_in_all_are_bounded(tmp_path):
    # 4,096 prefill instances of 16 GPUs are 65,536 GPUs: the most; one decode instance more is too many
    sets = ["gpus_per_node=16", "pools.prefill.tp=16", "pools.prefill.instances=4096", "pools.decode.instances=1"]
    msg = parse_error_of(tmp_path, GOOD, sets)
    assert msg.endswith("p.toml: pools: 65,537 GPUs in all (instances x GPUs per instance); at most 65,536")


def test_zero_bandwidth_link(tmp_path):
    text = GOOD + '\n[tiers.dram]\ncapacity_tokens = "3M"\nlink = { alpha_ns = 1000, bytes_per_s = 0 }\n'
    msg = error_of(tmp_path, text)
    assert "p.toml" in msg and "tiers.dram" in msg and "bytes_per_s" in msg


def test_model_that_does_not_fit(tmp_path):
    # Llama-3-70B: 141 GB of bf16 weights on one H100 (72 GB usable)
    msg = error_of(tmp_path, GOOD.replace('model = "Llama-3.1-8B"', 'model = "Llama-3-70B"'))
    assert "p.toml" in msg and "pools.prefill" in msg and "does not fit" in msg


def test_unknown_gpu_and_link_names(tmp_path):
    msg = error_of(tmp_path, GOOD, ["pools.decode.gpu=H900"])
    assert "pools.decode" in msg and "H100" in msg
    msg = error_of(tmp_path, GOOD, ["transfer.link=carrier-pigeon"])
    assert "transfer.link" in msg and "roce-mooncake" in msg


def test_wrong_pool_roles_and_router_layout(tmp_path):
    msg = error_of(tmp_path, GOOD, ["pools.prefill.role=colocated"])
    assert "pools" in msg and "roles" in msg
    msg = error_of(tmp_path, GOOD, ["router.name=cpd"])
    assert "router.name" in msg and "pre_prefill" in msg


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ConfigError) as e:
        resolve("sim:no-such-preset")
    assert "colocated-8" in str(e.value) and "mooncake-8p8d" in str(e.value)


@pytest.mark.parametrize(
    "name",
    [
        "colocated-8",
        "pd-2p2d",
        "distserve-1p1d",
        "mooncake-8p8d",
        "sglang-pd",
        "dynamo-kv-router",
        "cpd",
        "star",
        "spec-decode",
        "deepseek-v3",
        "distserve-pp",
    ],
)
def test_every_preset_parses_and_builds(tmp_path, name):
    spec = resolve(f"sim:{name}")
    assert spec.kind == "sim" and find_adapter(name).is_file()
    cfg = parse_cluster(spec.params, spec.source)
    t = SimTarget(spec, RunContext(0, tmp_path, EventLog(tmp_path)))
    assert len(t.cluster.engines) == sum(p.instances for p in cfg.pools)


def test_dp_attention_multiplies_mla_kv_capacity(tmp_path):
    # DeepSeek-V3 (MLA: one latent per token, replicated on every TP rank) on 8 x H200: with DP attention each
    # rank holds its own requests' latents once, so the instance holds tp / min(tp, n_kv_heads=1) = 8x the tokens.
    text = GOOD.replace('model = "Llama-3.1-8B"', 'model = "DeepSeek-V3"')
    text = text.replace('gpu = "H100"', 'gpu = "H200"\ntp = 8')
    plain = build(tmp_path, text)
    dp = build(tmp_path, text, ["pools.decode.dp_attention=true"])
    assert plain.cluster.engines[2].kv_total > 0
    # (each capacity is rounded down to whole 16-token blocks, so 8x agrees within 8 blocks)
    assert abs(dp.cluster.engines[2].kv_total - 8 * plain.cluster.engines[2].kv_total) <= 8 * 16
    assert dp.cluster.engines[0].kv_total == plain.cluster.engines[0].kv_total  # only the decode pool changed


def test_profile_granularity_names_are_the_transfer_models():
    from typing import get_args

    from kvbench.sim.profilefile import GranularityName
    from kvbench.sim.transfer import GRANULARITIES

    assert get_args(GranularityName) == GRANULARITIES


def test_a_pool_table_accepts_every_cost_model_key():
    from dataclasses import fields

    from kvbench.sim.cost.config import COST_KEYS
    from kvbench.sim.profilefile import PoolFile

    assert set(COST_KEYS) <= {f.name for f in fields(PoolFile)}
