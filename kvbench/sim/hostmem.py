"""KV crossing between an instance's HBM and its node's DRAM over the host link: swap preemption, DRAM landings.

* Preemption by swap (`preempt = "swap"` on a pool, vLLM's swap mode): the victim's KV leaves HBM at once and is
  copied to the node's DRAM over the pool's `dram_link` (PREEMPT with detail `swap`, then a KV_XFER pair
  `swap-out`). When the copy is done the request waits at the head of the engine's hand-off queue: it comes back
  as soon as its KV fits again, before new admissions and hand-offs, over the same link (`swap-in`), and rejoins
  the decode batch where it stopped. `dram_link` is one GPU's host link: an instance's GPUs copy their shards of
  the KV over their own links at once (one link per node is simulated, so instances sharing a node contend on it).
  The swap space is `swap_gib` GiB per GPU of the instance; a victim that does
  not fit is recomputed as before.
* DRAM landing (`kv_landing = "dram"` on the decode pool, Mooncake's path): a P->D transfer from another node
  lands in the decode node's DRAM, and the KV then goes to HBM over `dram_link` (a KV_XFER pair `dram->hbm`) before the request's
  first token and its place in the decode batch. DRAM is assumed large enough to stage it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from kvbench.records import KV_XFER_END, KV_XFER_START, PREEMPT
from kvbench.sim.cluster import PoolCfg
from kvbench.sim.engine import Engine
from kvbench.sim.job import Job
from kvbench.sim.transfer import Done, Links, SharedLink

Landed = Callable[[int, Job], None]  # the request lifecycle's "KV is in the decode engine's HBM"
GIB = 1 << 30


class MessageCount(Protocol):
    def __call__(self, tokens: int, block_tokens: int) -> int: ...


class HostMemory:
    """Swap spaces and DRAM landings of every engine whose pool asks for them."""

    __slots__ = ("kv_bytes", "messages", "swap_room", "swapped", "landing", "_links", "_shards")

    def __init__(self, links: Links, kv_bytes: int, messages: MessageCount) -> None:
        self.kv_bytes = kv_bytes
        self.messages = messages
        self.swap_room: dict[Engine, int] = {}  # engine -> tokens of swap space free on its node's DRAM
        self.swapped: set[Job] = set()  # swapped out and not yet back in HBM
        self.landing: set[Engine] = set()  # decode engines whose P->D KV lands in DRAM
        self._links: dict[Engine, SharedLink] = {}
        self._shards: dict[Engine, int] = {}  # engine -> its GPUs on one node, each copying its shard in parallel

    def add(self, e: Engine, pool: PoolCfg, links: Links, where: str, gpus_per_node: int) -> None:
        """Wire engine `e` of `pool` (its swap space and hooks) if the pool asks for swap or a DRAM landing."""
        if pool.preempt != "swap" and pool.kv_landing != "dram":
            return
        self._links[e] = links.on(e.node, pool.dram_link, where)
        self._shards[e] = min(pool.instance_gpus, gpus_per_node)
        if pool.preempt == "swap":
            self.swap_room[e] = int(pool.swap_gib * GIB) * pool.instance_gpus // self.kv_bytes
            e.swap = self.swap_out
        if pool.kv_landing == "dram":
            self.landing.add(e)

    def _copy(self, e: Engine, job: Job, what: str, done: Done, arg: Any, t: int) -> None:
        """Copy job.ctx tokens of e's KV over the host link (KV_XFER_START, detail `what`): each GPU of the instance
        moves its shard over its own PCIe link at once, so the copy takes one shard's time (the link counts one
        GPU's shard)."""
        tokens, link = job.ctx, self._links[e]
        nbytes = tokens * self.kv_bytes
        e.host.emit((t, job.rid, KV_XFER_START, e.name, tokens, None, link.link.name, nbytes, what))
        link.send(t, -(-nbytes // self._shards[e]), self.messages(tokens, e.block_tokens), done, arg)

    def _copied(self, e: Engine, job: Job, what: str, t: int) -> None:
        tokens = job.ctx
        link = self._links[e].link.name
        e.host.emit((t, job.rid, KV_XFER_END, e.name, tokens, None, link, tokens * self.kv_bytes, what))

    # ---- preemption by swap
    def swap_out(self, e: Engine, job: Job, t: int) -> bool:
        """Copy a preempted job's KV (job.ctx tokens, already freed in HBM) to DRAM; False: no room, recompute."""
        tokens = job.ctx
        if self.swap_room[e] < tokens:
            return False
        self.swap_room[e] -= tokens
        self.swapped.add(job)
        e.host.emit((t, job.rid, PREEMPT, e.name, tokens, None, None, None, "swap"))
        self._copy(e, job, "swap-out", self._out, (e, job), t)
        return True

    def _out(self, t: int, arg: tuple[Engine, Job]) -> None:
        e, job = arg
        self._copied(e, job, "swap-out", t)
        e.incoming.appendleft(job)  # first in line for KV room: drained at the next step end, or now if idle
        if not e.busy and not e.hold:
            e._drain_incoming(t)
            e.kick(t)

    def swap_in(self, e: Engine, job: Job, t: int) -> bool:
        """A swapped job got its KV room back (the engine reserved job.ctx): copy it in, then rejoin the batch.
        False: not a swapped job (a P->D hand-off waiting for room)."""
        if job not in self.swapped:
            return False
        self._copy(e, job, "swap-in", self._in, (e, job), t)
        return True

    def _in(self, t: int, arg: tuple[Engine, Job]) -> None:
        e, job = arg
        self.swapped.discard(job)
        self.swap_room[e] += job.ctx
        self._copied(e, job, "swap-in", t)
        e.join_decode(job, job.steps_left, t)

    # ---- P->D transfers landing in the decode node's DRAM
    def land(self, t: int, job: Job, landed: Landed) -> bool:
        """The P->D KV is in the decode node's DRAM: load it into HBM, then landed(t, job). False: it is in HBM."""
        e = job.decode
        if e not in self.landing or job.engine.node == e.node:  # within a node KV goes GPU to GPU (NVLink)
            return False
        self._copy(e, job, "dram->hbm", self._hbm, (job, landed), t)
        return True

    def _hbm(self, t: int, arg: tuple[Job, Landed]) -> None:
        job, landed = arg
        self._copied(job.decode, job, "dram->hbm", t)
        landed(t, job)
