"""Hand-computed single-request timelines of the sim engine (colocated and PD), batching, preemption."""

from __future__ import annotations

from support.sim_helpers import by_kind, colocated, pd, run_sim

from kvbench.records import Event, Request
from kvbench.sim.cost.config import cost_model
from kvbench.sim.spec import link
from kvbench.sim.transfer import exposed_ns

H100_8B = cost_model({"model": "Llama-3.1-8B", "gpu": "H100"}, "test")


def test_one_request_on_an_idle_colocated_instance():
    # Prefill of 1,000 tokens, Llama-3.1-8B on one H100 (mfu 0.79, attn_mfu 0.53, mbu 0.90, gemm_serial 0.42,
    #   32 x 42 us/layer): GEMMs 2 x 8.03e9 x 1000 = 1.606e13 FLOP / (989e12 x 0.79) = 20.555 ms, weights
    #   16.06 GB / (3.35e12 x 0.9) = 5.327 ms -> 20.555 + 0.42 x 5.327 = 22.792 ms; attention 500,500 pairs x
    #   524,288 FLOP = 2.62e11 FLOP / (989e12 x 0.53) = 0.501 ms; + 1.344 ms per-layer costs = 24.64 ms = TTFT.
    # Each decode step (batch 1, ~1,000 KV tokens): weights 5.327 ms + 0.42 x 0.021 ms compute + KV 0.044 ms
    #   + 1.344 ms = 6.72 ms; 9 more tokens -> 60.5 ms. E2E = 24.64 + 60.51 = 85.1 ms.
    events, steps, _ = run_sim(colocated(), [Request(0, 0, 1000, 10)])
    ev = by_kind(events, 0)
    prefill = H100_8B.prefill_ns(1000)
    decode = H100_8B.decode_run_ns(1, 1000, 9)
    assert abs(prefill - 24_637_000) < 50_000 and abs(decode - 60_507_000) < 100_000
    assert ev["FIRST_TOKEN"].t_ns == prefill
    assert ev["LAST_TOKEN"].t_ns == ev["FINISH"].t_ns == prefill + decode
    assert [e.kind for e in events] == [
        "ARRIVE",
        "SEND",
        "ROUTE",
        "PREFILL_START",
        "PREFILL_END",
        "FIRST_TOKEN",
        "DECODE_START",
        "LAST_TOKEN",
        "FINISH",
    ]
    assert ev["FINISH"].tokens == 10 and ev["FINISH"].cached_tokens == 0
    # one step row for the prefill, ONE row for the 9 decode steps (never one per token)
    assert [(r[3], r[4], r[5], r[6]) for r in steps] == [(1, 1, 1000, 0), (9, 1, 0, 1)]


def test_frontend_latency_adds_to_ttft():
    events, _, _ = run_sim(colocated(frontend_ms=2.0), [Request(0, 5_000, 1000, 2)])
    ev = by_kind(events, 0)
    # ARRIVE at the intended time; prefill starts 2 ms later: TTFT = 2 ms + 24.64 ms
    assert ev["ARRIVE"].t_ns == 5_000 and ev["PREFILL_START"].t_ns == 2_005_000
    assert ev["FIRST_TOKEN"].t_ns == 2_005_000 + H100_8B.prefill_ns(1000)


def test_zero_and_one_output_tokens():
    events, _, _ = run_sim(colocated(), [Request(0, 0, 500, 0), Request(1, 10**9, 500, 1)])
    zero, one = by_kind(events, 0), by_kind(events, 1)
    assert "FIRST_TOKEN" not in zero and zero["FINISH"].t_ns == zero["PREFILL_END"].t_ns
    assert zero["FINISH"].tokens == 0
    assert one["FIRST_TOKEN"].t_ns == one["LAST_TOKEN"].t_ns == one["FINISH"].t_ns == 10**9 + H100_8B.prefill_ns(500)


def test_pd_single_request_pays_only_the_exposed_transfer():
    # 1P1D on one node: KV of 1,000 tokens = 1000 x 128 KiB = 131,072,000 B over NVLink (alpha 5.5 us,
    # 341 GB/s), one message per layer (32). Streamed layer by layer during the 24.64 ms prefill, each layer's
    # share x = 5.5 us + 4,096,000 B / 341 GB/s = 17.5 us; the link keeps up, so only the last layer's 17.5 us
    # is exposed: FIRST_TOKEN = 24.637 + 0.0175 ms. Then 9 decode steps on the decode instance.
    events, _, _ = run_sim(pd(), [Request(0, 0, 1000, 10)])
    ev = by_kind(events, 0)
    prefill = H100_8B.prefill_ns(1000)
    exposed = exposed_ns(link("nvlink-h100"), 131_072_000, 32, prefill, 32)
    assert 17_000 < exposed < 18_000
    assert ev["PREFILL_END"].t_ns == prefill and ev["PREFILL_END"].instance == "prefill-0"
    assert ev["KV_XFER_END"].t_ns == ev["FIRST_TOKEN"].t_ns == prefill + exposed
    assert ev["KV_XFER_START"].nbytes == 131_072_000 and ev["KV_XFER_START"].tier == "nvlink-h100"
    assert ev["KV_XFER_END"].tier == "nvlink-h100"
    assert ev["FINISH"].t_ns == prefill + exposed + H100_8B.decode_run_ns(1, 1000, 9)
    assert ev["FINISH"].instance == "decode-0"


def test_pd_without_layerwise_pays_the_whole_transfer():
    # alpha-beta: 32 messages x 5.5 us + 131,072,000 B / 341e9 B/s = 176 us + 384.4 us = 560.4 us
    events, _, _ = run_sim(pd(transfer={"layerwise": False}), [Request(0, 0, 1000, 2)])
    ev = by_kind(events, 0)
    assert ev["FIRST_TOKEN"].t_ns - ev["PREFILL_END"].t_ns == 176_000 + 384_375


def test_arrival_during_a_decode_run_joins_at_the_next_step_boundary():
    # Request 0 decodes 200 steps in one run; request 1 arrives 10 ms into it. Steps are ~6.9 ms, so it
    # arrives during step 2: the run is cut at the end of step 2 and request 1's prefill starts then.
    ttft0 = H100_8B.prefill_ns(1000)
    arrive1 = ttft0 + 10_000_000
    events, steps, _ = run_sim(colocated(), [Request(0, 0, 1000, 201), Request(1, arrive1, 1000, 5)])
    assert H100_8B.decode_run_ns(1, 1000, 1) < 10_000_000 < H100_8B.decode_run_ns(1, 1000, 2)
    assert by_kind(events, 1)["PREFILL_START"].t_ns == ttft0 + H100_8B.decode_run_ns(1, 1000, 2)
    # the mixed step: 1,000 prefill tokens beside request 0's decode token (batch 2)
    assert (2, 1000, 1) in [(r[4], r[5], r[6]) for r in steps]
    # every decode token of both requests is in the steps table: 200 + 4
    assert sum(r[3] * r[6] for r in steps) == 200 + 4


def test_kv_exhaustion_preempts_and_recomputes():
    # A tiny GPU: 18 GB x 0.9 = 16.2 GB, minus 16.06 GB of weights = 140 MB of KV = 1,068 tokens (66 blocks of 16).
    # Two requests of 300 in + 400 out need 1,400 tokens at the end: the later one is preempted, recomputed,
    # and both still produce all their tokens.
    gpu = {"flops_per_s": 989e12, "hbm_bytes": 18_000_000_000, "hbm_bytes_per_s": 3.35e12}
    params = colocated(prefix_caching=False)
    params["pools"]["main"]["gpu"] = gpu
    events, _, target = run_sim(params, [Request(0, 0, 300, 400), Request(1, 0, 300, 400)])
    assert target.cluster.engines[0].kv_total == 1056  # 66 blocks x 16 tokens
    kinds = [e.kind for e in events if e.req_id == 1]
    assert "PREEMPT" in kinds and kinds.count("PREFILL_START") == 2
    assert [e.tokens for e in events if e.kind == "FINISH"] == [400, 400]
    times = [e.t_ns for e in events if e.req_id == 1]
    assert times == sorted(times)


def test_long_prompt_split_across_prefill_instances_is_faster():
    # A 200k-token prompt on 4 prefill H100s: split in 4 slices of 50k (slice i attends to the 50k*i tokens
    # before it), the prefill takes about the longest slice instead of the whole prompt. Pipeline mode moves
    # only activations: 50,000 x 4,096 x 2 B = 410 MB per boundary.
    req = Request(0, 0, 200_000, 3)
    whole, _, _ = run_sim(pd(4, 1, model="Llama-3.1-8B"), [req])
    long_ctx = {"threshold_tokens": 100_000, "instances": 4, "mode": "pipeline"}
    split, _, _ = run_sim(pd(4, 1, long_context=long_ctx), [req])
    t_whole = by_kind(whole, 0)["PREFILL_END"].t_ns
    t_split = by_kind(split, 0)["PREFILL_END"].t_ns
    assert t_split < 0.5 * t_whole
    starts = [e.instance for e in split if e.kind == "PREFILL_START"]
    assert sorted(starts) == ["prefill-0", "prefill-1", "prefill-2", "prefill-3"]
    assert by_kind(split, 0)["FINISH"].tokens == 3
    # context parallel pays the KV of all earlier tokens per slice: slower than pipeline here
    cp, _, _ = run_sim(pd(4, 1, long_context={**long_ctx, "mode": "context_parallel"}), [req])
    assert by_kind(cp, 0)["PREFILL_END"].t_ns > t_split


def _with_dram_blocks(link, hbm_blocks=()):
    params = colocated(tiers={"dram": {"capacity_tokens": "1M", "link": link}})
    _, _, t = run_sim(params, [])
    t.cluster.node_tiers[0]["dram"].insert([1, 2, 3])
    hbm = t.cluster.engines[0].hbm
    hbm.capacity_blocks = 100
    hbm.insert(hbm_blocks)
    t.submit(Request(0, 0, 2048, 2, (1, 2, 3, 4)), 0)
    events = []
    t.run(lambda ev: events.append(Event(*ev)))
    return by_kind(events, 0)


def test_cached_prefix_is_loaded_only_when_loading_beats_recomputing():
    # 3 blocks (1,536 tokens, 201 MB) in host DRAM over PCIe5 (54.4 GB/s): 3.7 ms to load vs ~50 ms to
    # recompute them -> loaded: KV_XFER_START/END on pcie5, then only 512 tokens are computed.
    ev = _with_dram_blocks("pcie5")
    assert ev["FIRST_TOKEN"].cached_tokens == 1536 and ev["FIRST_TOKEN"].tier == "dram"
    assert ev["KV_XFER_START"].tier == "pcie5" and ev["KV_XFER_START"].nbytes == 1536 * 131072
    load = ev["KV_XFER_END"].t_ns
    assert ev["PREFILL_START"].t_ns == load and ev["FIRST_TOKEN"].t_ns == load + H100_8B.prefill_ns(512, 1536)
    # over a 1 GB/s link the same load takes 201 ms > the ~50 ms saved: recompute everything instead
    slow = {"alpha_ns": 1000, "bytes_per_s": 1e9}
    ev = _with_dram_blocks(slow)
    assert ev["FIRST_TOKEN"].cached_tokens == 0 and "KV_XFER_START" not in ev
    # block 2 in HBM but block 1 only in DRAM: without the load the HBM prefix is empty (lookup stops at 1)
    ev = _with_dram_blocks(slow, hbm_blocks=[2])
    assert ev["FIRST_TOKEN"].cached_tokens == 0 and ev["FIRST_TOKEN"].tier is None
