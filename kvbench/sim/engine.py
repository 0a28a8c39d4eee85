"""One engine instance: waiting queue, token-budget continuous batching, chunked prefill, paged KV, preemption.

One loop event per batch step that carries prefill, and ONE event for a whole run of identical decode steps:
between batch-membership changes the decode steps are a known series, priced in closed form by the step pricer.
A run is cut short (at the end of the step in flight) when new work arrives that could join the batch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from heapq import heappop, heappush

from kvbench.records import PREFILL_START
from kvbench.sim.cluster import PoolCfg
from kvbench.sim.engine_types import Detached, EngineHost, RunningStep
from kvbench.sim.job import DECODE, HANDOFF, PREFILL, WAITING, Job
from kvbench.sim.kvcache import Tier
from kvbench.sim.loop import Loop
from kvbench.sim.pricer import StepPricer
from kvbench.sim.rows import AppendStep

# Preemption by swap: (engine, victim out of the batch, t_ns) -> True when its KV went to DRAM (else recompute).
Swap = Callable[["Engine", Job, int], bool]


class Engine:
    """One engine instance's queues, KV accounting and batch steps; it calls its host back as requests move on."""

    # fmt: off
    __slots__ = (
        "name", "role", "node", "index", "host", "loop", "pricer", "hbm", "rows", "end_cb",  # identity and wiring
        "token_budget", "max_running", "chunked", "block_tokens", "prefix_block_tokens",  # the pool's settings
        "kv_per_step", "tokens_per_step", "kv_total", "blocks_total", "watermark",  # derived sizes
        "waiting", "prefilling", "running", "incoming", "joining", "leaving", "queued_tokens",  # jobs here
        "decode_heap", "batch", "steps", "seq", "kv_used", "kv_batch",  # the decode batch and the KV in use
        "busy", "hold", "version", "current",  # the step in flight
        "swap",  # preemption by swap (kvbench/sim/hostmem.py), None: recompute
    )
    # fmt: on

    def __init__(
        self,
        name: str,
        role: str,
        node: int,
        pool: PoolCfg,
        kv_tokens: int,
        pricer: StepPricer,
        host: EngineHost[Engine],
        loop: Loop,
        prefix_block_tokens: int,
        hbm: Tier | None,
        rows: AppendStep,
        index: int,
    ) -> None:
        self.name, self.role, self.node, self.host, self.index = name, role, node, host, index
        self.loop = loop
        self.pricer = pricer  # prices steps and runs (plain or speculative decoding)
        self.kv_per_step = pricer.kv_per_step  # KV tokens each decode step adds per request
        self.tokens_per_step = pricer.tokens_per_step  # tokens computed per request per decode step (steps table)
        self.hbm = hbm  # prefix-cache Tier living in the free part of this engine's KV, or None
        self.prefix_block_tokens = prefix_block_tokens
        self.rows = rows  # appends one row to the steps table
        self.token_budget, self.max_running, self.chunked = pool.token_budget, pool.max_running, pool.chunked_prefill
        self.block_tokens = pool.block_tokens
        self.blocks_total = kv_tokens // self.block_tokens
        self.kv_total = self.blocks_total * self.block_tokens
        self.waiting: deque[Job] = deque()  # routed, not admitted (needs prefill)
        self.prefilling: list[Job] = []  # admitted, prefill in progress
        self.running: dict[Job, int] = {}  # admitted job -> KV tokens reserved at admission, admission order
        # (end_step, seq, job) of the decode batch; stale entries (jobs that left) are skipped when met
        self.decode_heap: list[tuple[int, int, Job]] = []
        self.batch = 0  # requests in the decode batch
        self.steps = 0  # decode steps run so far (the clock jobs' end_step refers to)
        self.kv_used = 0  # KV tokens reserved by admitted jobs
        self.kv_batch = 0  # KV tokens of the decode batch (what a decode step reads)
        self.busy = False
        self.hold = False  # inside a run's completion: kicks wait for the re-plan at its end
        self.version = 0  # bumps when a scheduled run end is superseded (cut short)
        self.current = RunningStep()  # valid while busy
        self.incoming: deque[Job] = deque()  # decode hand-offs waiting for KV room (their transfer waits too)
        self.queued_tokens = 0  # prefill tokens waiting or in progress (router load signal)
        self.seq = 0
        self.joining: list[tuple[Job, int]] = []  # hand-offs that landed during a run: they join at its end
        self.leaving: list[tuple[Job, Detached]] = []  # jobs to take out of the batch at the run's end (migration)
        self.watermark = self.kv_total // 100  # admissions leave this much KV free (vLLM's 1 % watermark)
        self.end_cb = self._end  # bound once: scheduled at every step
        self.swap: Swap | None = None  # set for pools with preempt = "swap"

    # ---- load signals for routers
    def load(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.incoming)

    def free_tokens(self) -> int:
        return self.kv_total - self.kv_used

    # ---- work arriving
    def enqueue(self, job: Job, t: int) -> None:
        """A job that needs prefill here (new, or recomputing after preemption)."""
        job.engine, job.state = self, WAITING
        self.waiting.append(job)
        self.queued_tokens += job.prefill_left
        if not self.hold:
            self.kick(t)

    def try_reserve(self, job: Job, tokens: int) -> bool:
        """Reserve KV for a job handed over by another engine (P->D, migration); False if no room or slot."""
        if self.incoming or not self._fits(tokens) or len(self.running) >= self.max_running:
            return False
        job.kv = tokens
        self.kv_used += tokens
        self.running[job] = tokens
        return True

    def join_decode(self, job: Job, steps: int, t: int) -> None:
        """Job (with its KV reserved here) joins the decode batch for `steps` more steps, at the next step boundary."""
        job.engine = self
        if self.busy:  # kick(t), written out: it joins at the step end, a long decode run is cut for it
            self.joining.append((job, steps))
            if not self.hold and self.current.n_steps > 1:
                self._cut(t)
            return
        self._join(job, steps)
        if not self.hold:
            self._plan(t)

    def _join(self, job: Job, steps: int) -> None:
        self.seq = seq = self.seq + 1
        job.state, job.seq = DECODE, seq
        job.join_step = now = self.steps
        job.end_step = end = now + steps
        self.batch += 1
        self.kv_batch += job.kv
        heappush(self.decode_heap, (end, seq, job))

    def kick(self, t: int) -> None:
        """New work is here: plan now if idle, or cut a long decode run at the step in flight."""
        if self.hold:
            return
        if not self.busy:
            self._plan(t)
        elif self.current.n_steps > 1 and (self.joining or len(self.running) < self.max_running):
            self._cut(t)

    def _cut(self, t: int) -> None:
        """End the decode run in flight at the end of the step running at time t."""
        r = self.current
        if r.cut:
            return
        n, n_ns = self.pricer.cut(r.batch, r.kv_tokens, t - r.t0_ns, r.n_steps)
        if n < r.n_steps:
            r.cut = True
            r.n_steps = n
            self.version = v = self.version + 1
            self.loop.at(r.t0_ns + n_ns, self.end_cb, v)

    # ---- work leaving
    def leave_decode(self, job: Job) -> int:
        """Take a job out of the decode batch and free its KV; returns the decode steps it still needs."""
        left = job.end_step - self.steps
        ctx = job.kv + (self.steps - job.join_step) * self.kv_per_step
        self.batch -= 1
        self.kv_batch -= ctx
        del self.running[job]
        self.kv_used -= ctx  # what it holds now (its KV grew while decoding), not what it reserved
        job.ctx = ctx
        job.state = WAITING
        return left

    def detach(self, job: Job, done: Detached, t: int) -> None:
        """Take a decoding job out at the next step boundary, then call done(job, steps_left, t) (migration)."""
        if not self.busy and not self.hold:
            done(job, self.leave_decode(job), t)
            self._drain_incoming(t)
            self._plan(t)
            return
        self.leaving.append((job, done))
        if self.busy and self.current.n_steps > 1:
            self._cut(t)

    def release(self, job: Job, t: int) -> None:
        """Free a handed-off job's KV (its transfer is done) and keep its prompt blocks cached."""
        self.kv_used -= self.running.pop(job)
        self.cache(job)
        if self.incoming:
            self._drain_incoming(t)
        if not self.hold:
            self.kick(t)

    def cache(self, job: Job) -> None:
        hbm = self.hbm
        if hbm is not None and job.req.hash_ids:
            if hbm.share is not None:  # in-flight sharing: unpin, then cache what no other request uses
                return hbm.share.release(self, job)
            hbm.capacity_blocks = (self.kv_total - self.kv_used) // self.prefix_block_tokens
            hbm.insert(job.req.hash_ids)

    # ---- KV accounting
    def _fits(self, tokens: int) -> bool:
        room = self.kv_total - self.kv_used - tokens
        if room < 0:
            return False
        if self.hbm is not None:  # cached blocks live in free KV: make room by evicting (demoting) them
            self.hbm.fit(room // self.prefix_block_tokens)
        return True

    def take(self, job: Job, tokens: int) -> None:
        """Reserve `tokens` of KV for an admitted job (no room check: the caller made room)."""
        job.kv = tokens
        self.kv_used += tokens
        self.running[job] = tokens
        if self.hbm is not None and self.hbm.share is not None:  # its cached prefix: shared blocks count once
            self.hbm.share.admit(self, job)

    def _drain_incoming(self, t: int) -> None:
        incoming = self.incoming
        while incoming and len(self.running) < self.max_running:
            job = incoming[0]
            need = job.ctx
            if not self._fits(need):
                return
            incoming.popleft()
            self.take(job, need)
            self.host.incoming_ready(self, job, t)

    # ---- batching
    def _plan(self, t: int) -> None:
        """Form the next step: prefill chunks within the token budget beside the decode batch, or a decode run."""
        if (self.waiting or self.prefilling) and self._mixed(t):
            return
        while self.batch:
            B, n = self.batch, self._next_finish()
            free = self.kv_total - self.kv_used
            room = free // (B * self.kv_per_step)
            if room > 0:
                if room < n:
                    n = room
                if self.hbm is not None:  # the run's KV growth takes room from cached blocks first
                    self.hbm.fit((free - n * B * self.kv_per_step) // self.prefix_block_tokens)
                self._start(t, self.pricer.run_ns(B, self.kv_batch, n), n, B, (), 0)
                return
            self._preempt(t)  # KV exhausted: the latest-admitted request is recomputed later
        if self.waiting or self.prefilling:
            self._mixed(t)

    def _mixed(self, t: int) -> bool:
        chunks = self._chunks(t)
        if not chunks:
            return False
        P = ctx_w = 0
        for job, c in chunks:
            P += c
            ctx_w += c * job.ctx
        B = self.batch if self.chunked else 0
        self._start(t, self.pricer.mixed_ns(P, ctx_w // P, B, self.kv_batch if B else 0), 1, B, chunks, P)
        return True

    def _next_finish(self) -> int:
        dheap, steps = self.decode_heap, self.steps
        while True:
            e, _, job = dheap[0]
            if job.state is DECODE and job.engine is self and job.end_step == e:
                return e - steps if e > steps else 1
            heappop(dheap)

    def _chunks(self, t: int) -> list[tuple[Job, int]]:
        if not self.waiting and not self.prefilling:
            return []
        budget = self.token_budget - self.batch if self.chunked else self.token_budget
        chunks: list[tuple[Job, int]] = []
        for job in self.prefilling:
            if budget <= 0:
                return chunks
            c = job.prefill_left if job.prefill_left < budget else budget
            chunks.append((job, c))
            budget -= c
        waiting, running, emit = self.waiting, self.running, self.host.emit
        share = self.hbm.share if self.hbm is not None else None
        while waiting and budget > 0 and len(running) < self.max_running:
            job = waiting[0]
            need = job.ctx + job.prefill_left - job.base
            if not self.chunked and chunks and job.prefill_left > budget:
                break
            new = need if share is None else need - share.in_use(job)  # blocks in use by others take no room
            if not self._fits(new + self.watermark + self.batch * self.kv_per_step):
                break
            waiting.popleft()
            self.take(job, need)
            job.state = PREFILL
            self.prefilling.append(job)
            detail = "recompute" if job.preempts else None
            emit((t, job.rid, PREFILL_START, self.name, job.prefill_left, job.cached, None, None, detail))
            c = job.prefill_left if (job.prefill_left < budget or not self.chunked) else budget
            chunks.append((job, c))
            budget -= c
        return chunks

    def _start(self, t: int, dur: int, n: int, B: int, chunks: list[tuple[Job, int]] | tuple[()], P: int) -> None:
        self.busy = True
        self.version = v = self.version + 1
        r = self.current
        r.t0_ns = t  # one store each: a six-way tuple assignment builds and unpacks a tuple
        r.n_steps = n
        r.batch = B
        r.kv_tokens = self.kv_batch
        r.chunks = chunks
        r.prefill_tokens = P
        r.cut = False
        r.kv_blocks = -(-self.kv_used // self.block_tokens)
        self.loop.at(t + dur, self.end_cb, v)

    def _end(self, t: int, version: int) -> None:
        if version != self.version:
            return  # superseded: the run was cut short and rescheduled
        self.busy, self.hold = False, True
        r = self.current
        n, B, chunks = r.n_steps, r.batch, r.chunks
        if B:
            self.steps += n
            g = B * n * self.kv_per_step
            self.kv_used += g
            self.kv_batch += g
        decoded, size = B * self.tokens_per_step, B + len(chunks)
        self.rows((self.name, r.t0_ns, t, n, size, r.prefill_tokens, decoded, r.kv_blocks, self.blocks_total))
        done = self._advance_prefill(chunks) if chunks else ()
        if B and self.decode_heap and self.decode_heap[0][0] <= self.steps:
            self._finish_decodes(t)
        if done:
            prefill_done = self.host.prefill_done
            for job in done:
                prefill_done(self, job, t)
        if self.leaving:
            leaving, self.leaving = self.leaving, []
            for job, cb in leaving:
                if job.state is DECODE and job.engine is self:
                    cb(job, self.leave_decode(job), t)
        if self.joining:
            joining, self.joining = self.joining, []
            for job, steps in joining:
                self._join(job, steps)
        if self.incoming:
            self._drain_incoming(t)
        self.hold = False
        if not self.busy:
            self._plan(t)

    def _finish_decodes(self, t: int) -> None:
        """Jobs whose last token came in this run leave the batch (stale heap entries are dropped)."""
        dheap, steps, decode_done = self.decode_heap, self.steps, self.host.decode_done
        while dheap and dheap[0][0] <= steps:
            e, _, job = heappop(dheap)
            if job.state is DECODE and job.engine is self and job.end_step == e:
                self.leave_decode(job)
                decode_done(self, job, t)

    def _advance_prefill(self, chunks: list[tuple[Job, int]] | tuple[()]) -> list[Job]:
        done = []
        share = self.hbm.share if self.hbm is not None else None
        for job, c in chunks:
            job.prefill_left -= c
            job.ctx += c
            if share is not None:  # its blocks are shareable as soon as they are computed
                share.computed(job)
            self.queued_tokens -= c
            if job.prefill_left == 0:
                done.append(job)
        if done:
            self.prefilling = [j for j in self.prefilling if j.prefill_left]
        return done

    def handoff(self, job: Job) -> None:
        """Prefill is done here and the job moves on: its KV stays reserved until `release`."""
        job.state = HANDOFF

    def start_decode(self, job: Job, steps: int) -> None:
        """A job whose prefill finished here (colocated, or recompute) decodes here; called at a step end."""
        job.kv = job.ctx
        self._join(job, steps)

    def _preempt(self, t: int) -> None:
        victim = None
        for job in reversed(self.running):
            if job.state is DECODE:
                victim = job
                break
        if victim is None:
            return
        left = self.leave_decode(victim)
        if self.hbm is not None and self.hbm.share is not None:
            self.hbm.share.release(self, victim)
        victim.steps_left = left
        if self.swap is not None and self.swap(self, victim, t):
            return  # its KV went to DRAM and comes back when it fits
        victim.prefill_left, victim.ctx = victim.ctx, 0  # recompute prompt + generated tokens
        victim.preempts += 1
        self.waiting.appendleft(victim)
        self.queued_tokens += victim.prefill_left
        self.host.preempted(self, victim, t)
