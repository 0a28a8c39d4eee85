"""Global routing policies as plain functions in one dict: (cluster view, job, state) -> (first engine, decode engine
| None), or None to reject the request (admission control). Parameters come from the profile's [router] table."""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from kvbench.sim.engine import Engine
from kvbench.sim.job import Job
from kvbench.sim.kvcache import Tier, walk
from kvbench.sim.transfer import transfer_ns
from kvbench.units import ms_to_ns, ns_to_ms


class RouterView(Protocol):
    """What a routing policy sees of the built cluster (kvbench.sim.build.Cluster)."""

    @property
    def first(self) -> Sequence[Engine]: ...  # engines a request starts on (colocated, prefill, pre-prefill)

    @property
    def decode(self) -> Sequence[Engine]: ...

    @property
    def by_role(self) -> Mapping[str, Sequence[Engine]]: ...

    @property
    def pool(self) -> Tier | None: ...  # the cluster-wide KV pool tier

    @property
    def chains(self) -> Mapping[Engine, Sequence[Tier]]: ...  # per first engine: HBM, node DRAM/SSD, pool

    @property
    def kv_bytes(self) -> int: ...  # KV bytes of one token

    @property
    def prefix_block_tokens(self) -> int: ...

    def node_tier(self, engine: Engine, kind: str) -> Tier | None: ...

    def shared_chain(self) -> list[Tier]: ...


Choice = tuple[Engine, Engine | None] | None  # (first engine, decode engine), or None: reject
Router = Callable[[RouterView, Job, "RouterState"], Choice]


class RouterState:
    """Mutable per-run router memory: round-robin counters, the seeded RNG, SGLang's approximate trees."""

    __slots__ = ("params", "rng", "rr", "rr_decode", "turn", "trees", "reason")

    def __init__(self, params: dict[str, Any], seed: int) -> None:
        self.params = params
        self.rng = random.Random(seed)
        self.rr = 0
        self.rr_decode = 0
        self.turn: dict[str, int] = {}  # lane (a set of engines) -> where its next tie-breaking scan starts
        self.trees: dict[str, OrderedDict[int, None]] = {}  # engine name -> block hashes routed there (LRU)
        self.reason = ""  # why the last None (reject) was returned


def pick(keys: list[Any], st: RouterState, lane: str) -> int:
    """Index of the smallest of `keys`; equal keys take turns: the first smallest at or after the slot just past
    this lane's last pick, wrapping (least-connections with round-robin among equals, as nginx's least_conn
    does), so idle instances share light load instead of all of it landing on index 0."""
    best, turn = min(keys), st.turn
    i = keys.index(best)
    start = turn.get(lane, 0)
    if i < start:  # a smallest key before the turn: prefer one at or after it, if any
        for j in range(start, len(keys)):
            if keys[j] == best:
                i = j
                break
    turn[lane] = i + 1
    return i


def _decode_by_load(cluster: RouterView, st: RouterState) -> Engine | None:
    """Decode instance with the fewest requests (running + waiting for room), then the least KV in use."""
    decode = cluster.decode
    if not decode:
        return None
    return decode[pick([(len(e.running) + len(e.incoming), e.kv_used) for e in decode], st, "decode")]


def round_robin(cluster: RouterView, job: Job, st: RouterState) -> Choice:
    first = cluster.first[st.rr % len(cluster.first)]
    st.rr += 1
    dec = None
    if cluster.decode:
        dec = cluster.decode[st.rr_decode % len(cluster.decode)]
        st.rr_decode += 1
    return first, dec


def random_(cluster: RouterView, job: Job, st: RouterState) -> Choice:
    first = cluster.first[st.rng.randrange(len(cluster.first))]
    return first, (cluster.decode[st.rng.randrange(len(cluster.decode))] if cluster.decode else None)


def least_loaded(cluster: RouterView, job: Job, st: RouterState) -> Choice:
    first = cluster.first
    keys = [(len(e.waiting) + len(e.running) + len(e.incoming), e.queued_tokens) for e in first]
    return first[pick(keys, st, "first")], _decode_by_load(cluster, st)


def _tree_match(tree: OrderedDict[int, None], hashes: Sequence[int]) -> int:
    n = 0
    for h in hashes:
        if h not in tree:
            break
        n += 1
    return n


def cache_aware(cluster: RouterView, job: Job, st: RouterState) -> Choice:
    """SGLang: shortest queue when imbalanced; else the best prefix match above cache_threshold; else the
    worker with the smallest tree. Trees are per-worker LRU sets of routed block hashes (approximate radix)."""
    p, hashes, workers = st.params, job.req.hash_ids, cluster.first
    loads = [e.load() for e in workers]
    lo, hi = min(loads), max(loads)
    trees = st.trees
    if hi - lo > p["balance_abs_threshold"] and hi > p["balance_rel_threshold"] * lo:
        first = workers[pick(loads, st, "first")]
    else:
        matched = [_tree_match(trees.setdefault(e.name, OrderedDict()), hashes) for e in workers]
        if hashes and max(matched) / len(hashes) > p["cache_threshold"]:
            first = workers[pick([-n for n in matched], st, "first")]
        else:
            first = workers[pick([len(trees[e.name]) for e in workers], st, "first")]
    tree = trees.setdefault(first.name, OrderedDict())
    for h in hashes:
        tree[h] = None
        tree.move_to_end(h)
    while len(tree) > p["max_tree_blocks"]:
        tree.popitem(last=False)
    return first, _decode_by_load(cluster, st)


def kv_ready_ns(cluster: RouterView, e: Engine, job: Job, balancing_blocks: int) -> int:
    """T_transfer + T_prefill of `job` on `e`. The cached prefix is walked down every tier `e` loads from (its HBM,
    its node's DRAM/SSD, the pool), each lower tier's blocks priced over that tier's link, in parallel, and loaded
    only when that beats recomputing them: the choice the request's lifecycle then makes. The pool is remote
    (Mooncake Store): it counts only when it extends the node-local prefix by more than `balancing_blocks`."""
    cost, n_in, hashes = e.pricer.cost, job.n_in, job.req.hash_ids
    if e.hbm is None or not hashes:
        return cost.prefill_ns(n_in)
    chain = cluster.chains[e]
    counts, lead = walk(hashes, chain)
    if chain[-1] is cluster.pool and counts[-1]:
        # the node-local walk; with HBM the only local tier (Mooncake's layout) it is HBM's leading run
        local, local_lead = ([lead], lead) if len(chain) == 2 else walk(hashes, chain[:-1])
        if sum(counts) - sum(local) <= balancing_blocks:
            chain, counts, lead = chain[:-1], local, local_lead
    pbt = cluster.prefix_block_tokens
    hbm_tok, all_tok = min(lead * pbt, n_in - 1), min(sum(counts) * pbt, n_in - 1)
    recompute = cost.prefill_ns(n_in - hbm_tok, hbm_tok)
    if all_tok <= hbm_tok:
        return recompute
    kvb = cluster.kv_bytes
    t_xfer = max(transfer_ns(t.wire().link, c * pbt * kvb, c) for t, c in zip(chain[1:], counts[1:]) if c)
    return recompute if t_xfer >= recompute else min(recompute, t_xfer + cost.prefill_ns(n_in - all_tok, all_tok))


def conductor(cluster: RouterView, job: Job, st: RouterState) -> Choice:
    """Mooncake: min T_queue + T_transfer + T_prefill over prefill instances (kv_ready_ns: every tier the instance
    loads from); decode by load; reject when the predicted TTFT or TBT breaks its SLO (optionally predicting decode
    load when the prefill will finish; with reject_at_decode the TBT check waits for the end of the prefill:
    decode_gate)."""
    p, balancing = st.params, st.params["kvcache_balancing_threshold"]
    times = [e.pricer.cost.prefill_ns(e.queued_tokens) + kv_ready_ns(cluster, e, job, balancing) for e in cluster.first]
    i = pick(times, st, "first")
    best, best_t = cluster.first[i], times[i]
    dec = _decode_by_load(cluster, st)
    ttft_slo = ms_to_ns(p["ttft_slo_ms"])
    if ttft_slo and best_t > ttft_slo:
        st.reason = f"predicted TTFT {ns_to_ms(best_t):.0f} ms > SLO {p['ttft_slo_ms']:g} ms"
        return None
    tbt_slo = ms_to_ns(p["tbt_slo_ms"])
    if tbt_slo and dec is not None and not p["reject_at_decode"]:
        batch, kv = _decode_load_at(dec, int(best_t) if p["predict_decode_load"] else 0)
        tbt = dec.pricer.cost.decode_step_ns(batch + 1, kv + job.n_in)
        if tbt > tbt_slo:
            st.reason = f"predicted TBT {ns_to_ms(tbt):.1f} ms > SLO {p['tbt_slo_ms']:g} ms"
            return None
    return best, dec


def decode_gate(job: Job, dec: Engine, st: RouterState) -> str:
    """Mooncake's baseline overload policy, reject at each stage (`reject_at_decode`): a request the prefill stage
    admitted is checked again when its prefill ends, against the decode instance's load then; '' admits it, else
    the reason it is rejected (its prefill work is lost)."""
    slo = ms_to_ns(st.params.get("tbt_slo_ms", 0.0))
    if not slo:
        return ""
    batch, kv = _decode_load_at(dec, 0)
    tbt = dec.pricer.cost.decode_step_ns(batch + 1, kv + job.n_in)
    return f"TBT {ns_to_ms(tbt):.1f} ms > SLO {st.params['tbt_slo_ms']:g} ms at decode admission" if tbt > slo else ""


def _decode_load_at(dec: Engine, after_ns: int) -> tuple[int, int]:
    """(batch, KV tokens) of a decode instance now, or predicted `after_ns` from now: requests whose remaining
    steps end before then have left, the others have grown (the refined Conductor variant)."""
    batch = dec.batch + len(dec.incoming) + len(dec.joining)
    kv = dec.kv_batch + sum(j.ctx for j in dec.incoming)
    if after_ns <= 0 or not dec.batch:
        return batch, kv
    step = max(1, dec.pricer.cost.decode_step_ns(dec.batch, dec.kv_batch))
    ahead = after_ns // step
    for end, _, j in dec.decode_heap:
        if j.engine is dec and j.end_step == end and end - dec.steps <= ahead:
            batch -= 1
            kv -= j.kv + (dec.steps - j.join_step)
    return batch, kv + batch * ahead


def kv_router(cluster: RouterView, job: Job, st: RouterState) -> Choice:
    """Dynamo: cost = prefill_load_scale x max(active_prefill_blocks + prompt_blocks - overlap, 0)
    + active_decode_blocks; overlap counts device hits 1.0 and host-tier hits host_hit_weight; lowest wins at
    temperature 0, softmax sampling over -cost/temperature above it."""
    p, hashes, pbt = st.params, job.req.hash_ids, cluster.prefix_block_tokens
    prompt_blocks = -(-job.n_in // pbt)
    costs = []
    for e in cluster.first:
        dev = e.hbm.match(hashes) if e.hbm is not None else 0
        host_tier = cluster.node_tier(e, "dram")
        host = host_tier.match(hashes[dev:]) if host_tier is not None else 0
        overlap = dev + p["host_hit_weight"] * host
        active_prefill = e.queued_tokens / pbt
        active_decode = (e.kv_batch if e.role == "colocated" else 0) / pbt
        costs.append(p["prefill_load_scale"] * max(active_prefill + prompt_blocks - overlap, 0) + active_decode)
    temp = p["temperature"]
    if temp <= 0:
        i = pick(costs, st, "first")
    else:
        lo = min(costs)
        weights = [math.exp(-(c - lo) / (temp * max(prompt_blocks, 1))) for c in costs]
        i = st.rng.choices(range(len(costs)), weights)[0]
    return cluster.first[i], _decode_by_load(cluster, st)


def cpd(cluster: RouterView, job: Job, st: RouterState) -> Choice:
    """Together CPD: cold prompts (cached share below warm_threshold) go to the pre-prefill pool, which writes
    their KV to the cluster cache; warm prompts go to the prefill pool, which fetches the cached prefix."""
    hashes = job.req.hash_ids
    chain = cluster.shared_chain()
    cached = 0
    for h in hashes:
        if not any(h in t.blocks for t in chain):
            break
        cached += 1
    warm = bool(hashes) and cached / len(hashes) >= st.params["warm_threshold"]
    pool = cluster.by_role["prefill" if warm else "pre_prefill"]
    first = pool[pick([(e.queued_tokens, e.load()) for e in pool], st, "prefill" if warm else "pre_prefill")]
    return first, _decode_by_load(cluster, st)


ROUTERS: dict[str, Router] = {
    "round_robin": round_robin,
    "random": random_,
    "least_loaded": least_loaded,
    "cache_aware": cache_aware,
    "conductor": conductor,
    "kv_router": kv_router,
    "cpd": cpd,
}
