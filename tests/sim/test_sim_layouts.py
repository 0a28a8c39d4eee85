"""Parallel layouts in profiles: EP/FP8/PP pool keys, multi-node instances, the DeepSeek-V3 and DistServe-PP presets,
and their direction on the conversation trace."""

from __future__ import annotations

import statistics
from itertools import islice

import pytest
from support.sim_helpers import run_sim

from kvbench.eventlog import EventLog
from kvbench.sim.target import SimTarget
from kvbench.target import RunContext
from kvbench.targets import resolve
from kvbench.workload.mooncake import read_mooncake

DS = """kind = "sim"
model = "DeepSeek-V3"

[pools.prefill]
role = "prefill"
instances = 2
gpu = "H800"
ep = 32
fp8 = true

[pools.decode]
role = "decode"
instances = 1
gpu = "H800"
ep = 16
fp8 = true
"""


def build(tmp_path, text: str, sets=()) -> SimTarget:
    path = tmp_path / "p.toml"
    path.write_text(text)
    return SimTarget(resolve(str(path), list(sets)), RunContext(0, tmp_path, EventLog(tmp_path / "run")))


def error_of(tmp_path, text: str, sets=()) -> str:
    from kvbench.config import ConfigError

    with pytest.raises(ConfigError) as e:
        build(tmp_path, text, sets)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_multi_node_instances_fill_whole_nodes(tmp_path):
    t = build(tmp_path, DS)
    # 32-GPU prefill instances on nodes 0-3 and 4-7, the 16-GPU decode instance on nodes 8-9
    assert [(e.name, e.node) for e in t.cluster.engines] == [("prefill-0", 0), ("prefill-1", 4), ("decode-0", 8)]
    assert [p.instance_gpus for p in t.cfg.pools] == [32, 16]


def test_an_instance_spanning_nodes_must_fill_them(tmp_path):
    msg = error_of(tmp_path, DS, ["pools.decode.ep=12"])
    assert "p.toml" in msg and "pools.decode" in msg and "12 GPUs" in msg and "whole nodes" in msg


def test_ep_on_a_dense_model_is_a_one_line_error(tmp_path):
    text = DS.replace('model = "DeepSeek-V3"', 'model = "Llama-3.1-8B"').replace('"H800"', '"H100"')
    assert "ep = 32 needs a MoE model" in error_of(tmp_path, text)


def test_bad_parallel_values_name_the_key(tmp_path):
    assert "key 'pp' = 0" in error_of(tmp_path, DS, ["pools.decode.pp=0"])
    assert "key 'fp8'" in error_of(tmp_path, DS, ['pools.decode.fp8="yes"'])
    assert "key 'pp' = 62 exceeds the 61 layers" in error_of(tmp_path, DS, ["pools.decode.pp=62"])


def test_fp8_on_ampere_is_refused(tmp_path):
    assert "no FP8" in error_of(tmp_path, DS.replace('"H800"', '"A800"'))


def conversation(trace, n: int, scale: float):
    reqs = list(islice(read_mooncake(trace), n))
    return [r._replace(arrival_ns=int(r.arrival_ns / scale)) for r in reqs]


def mean_ttft_tpot(events):
    arrive = {e.req_id: e.t_ns for e in events if e.kind == "ARRIVE"}
    first = {e.req_id: e.t_ns for e in events if e.kind == "FIRST_TOKEN"}
    fin = {e.req_id: (e.t_ns, e.tokens) for e in events if e.kind == "FINISH"}
    ttft = statistics.mean(first[r] - arrive[r] for r in first)
    tpot = statistics.mean((fin[r][0] - first[r]) / (fin[r][1] - 1) for r in first if fin[r][1] > 1)
    return ttft, tpot


@pytest.mark.parametrize("preset", ["deepseek-v3", "distserve-pp"])
def test_layout_presets_replay_the_conversation_trace(conversation_trace, preset):
    spec = resolve(f"sim:{preset}")
    events, _, _ = run_sim(spec.params, conversation(conversation_trace, 300, 1.0))
    too_long = [e for e in events if e.kind == "ERROR" and e.detail.startswith("context_too_long")]
    # OPT-66B's 2.25 MiB a token: 12 prompts of 66k-88k tokens exceed a 4-GPU decode instance (as in distserve-1p1d)
    assert len(too_long) == (12 if preset == "distserve-pp" else 0)
    assert sum(e.kind == "FINISH" for e in events) == 300 - len(too_long)


def test_micro_batches_shrink_the_bubble_of_prefill_but_not_of_decode(conversation_trace):
    # tp 2 x pp 2: 2 micro-batches leave a bubble of 1/3 of a step, 8 micro-batches 1/9. Prefill is compute-bound,
    # so its steps (and TTFT) shrink; decode re-reads each stage's weights per micro-batch (memory-bound), so its
    # steps grow. Compared: the mean prefill (PREFILL_START to PREFILL_END) and the mean TPOT.
    params = resolve("sim:distserve-pp").params
    reqs = [r for r in conversation(conversation_trace, 200, 1.0) if r.input_tokens < 60_000]
    out = {}
    for m in (2, 8):
        pools = {
            "prefill": {**params["pools"]["prefill"], "tp": 2, "pp": 2, "microbatches": m},
            "decode": {**params["pools"]["decode"], "microbatches": m},
        }
        events = run_sim({**params, "pools": pools}, reqs)[0]
        start = {e.req_id: e.t_ns for e in events if e.kind == "PREFILL_START"}
        prefill = statistics.mean(e.t_ns - start[e.req_id] for e in events if e.kind == "PREFILL_END")
        out[m] = (prefill, mean_ttft_tpot(events)[1])
    assert out[8][0] < 0.9 * out[2][0] and out[8][1] > 1.5 * out[2][1]
