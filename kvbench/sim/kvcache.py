"""Block-hash prefix caches: one LRU tier (HBM of an instance, DRAM/SSD of a node, the cluster pool), the in-flight
blocks an HBM tier shares while requests use them, and a lookup that walks a request's block hashes down a chain of
tiers and stops at the first block no tier holds."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import islice
from typing import Any, Protocol

from kvbench.sim.transfer import SharedLink


class EvictionWatch(Protocol):
    """Told which blocks a tier evicted (the pool's replica placement forgets their copies)."""

    def evicted(self, hashes: list[int]) -> None: ...


class KvHolder(Protocol):
    """What in-flight sharing adjusts of an engine: its KV tokens in use, and its total."""

    kv_used: int
    kv_total: int


class Tier:
    """An LRU set of prefix-block hashes with a capacity in blocks; evicted blocks are demoted to `below`.

    Inclusive hierarchy: a block promoted to a faster tier keeps its copy below (Mooncake Store and Dynamo's
    KVBM keep the lower copy), so a demotion of a block already held below only refreshes it there.

    The LRU order is kept in two generations of plain lists, so that a chain's blocks go in, and the oldest come
    out, by C-level set and list operations rather than a Python step per block. `recent` lists every insert and
    refresh in turn (a block refreshed again is listed again: its last entry counts); `old` is the generation the
    evictions walk from `head`, each block once. When it is used up, `recent` (its last entries, in order) becomes
    `old`. An entry of `old` whose block was refreshed (or dropped) since is listed in `moved` and skipped.
    `blocks` is the set of held blocks.
    """

    # fmt: off
    __slots__ = (
        "name", "kind", "capacity_blocks", "blocks", "recent", "old", "head", "moved", "dropped", "below", "link",
        "hit_blocks", "inserted", "evicted", "pinned", "share", "watch",
    )
    # fmt: on

    def __init__(
        self, name: str, kind: str, capacity_blocks: int, below: Tier | None = None, link: SharedLink | None = None
    ) -> None:
        self.name = name  # unique, e.g. "hbm:decode-1", "dram:node-0", "pool"
        self.kind = kind  # "hbm" | "dram" | "ssd" | "pool": what the event log's `tier` column says
        self.capacity_blocks = capacity_blocks
        self.blocks: set[int] = set()  # held blocks (cached in free KV, not in use)
        self.recent: list[int] = []  # inserts and refreshes since `old` was made, in turn (repeats allowed)
        self.old: list[int] = []  # the older generation, oldest first, each block once; before `head`: evicted
        self.head = 0
        self.moved: set[int] = set()  # blocks whose entry in old[head:] no longer counts (refreshed or dropped)
        self.dropped = False  # a block left without eviction (discard): `recent` may list blocks not held
        self.below = below
        self.link = link  # SharedLink blocks travel over into HBM (None for HBM itself)
        self.hit_blocks = 0
        self.inserted = 0
        self.evicted = 0
        # blocks in use by running requests (HBM with share_inflight): hash -> requests using it; never evicted,
        # and never in `blocks` at the same time (a block is either in use or cached in free KV)
        self.pinned: dict[int, int] = {}
        self.share: InflightShare | None = None  # set on an HBM tier whose in-flight blocks are shared
        self.watch: EvictionWatch | None = None  # told of evictions (the pool's replica placement)

    def wire(self) -> SharedLink:
        """The link this tier's blocks travel over into HBM (every tier below HBM has one)."""
        assert self.link is not None, f"tier {self.name} has no link into HBM"
        return self.link

    def __len__(self) -> int:
        return len(self.blocks)

    def __bool__(self) -> bool:
        return True  # an empty tier is still a tier (`a or b` must not skip it)

    def __contains__(self, h: int) -> bool:
        return h in self.blocks or h in self.pinned

    def order(self) -> list[int]:
        """The held blocks, least recently used first."""
        moved = self.moved
        return [h for h in islice(self.old, self.head, None) if h not in moved] + self._generation()

    def match(self, hashes: Sequence[int]) -> int:
        """Length of the leading run of `hashes` resident here, cached or in use (no LRU update)."""
        blocks, pinned, n = self.blocks, self.pinned, 0
        for h in hashes:
            if h not in blocks and h not in pinned:
                break
            n += 1
        return n

    def touch(self, hashes: Sequence[int], resident: int = 0) -> None:
        """Mark the resident ones of `hashes` most recently used (a hit); never adds a block. The caller may know
        that the first `resident` of them are held (a matched prefix), unless some blocks are in use (they are
        held, but not in the LRU)."""
        if resident < len(hashes) or self.pinned:
            blocks = self.blocks
            hashes = [h for h in hashes if h in blocks]
        self.moved.update(hashes)  # harmless for a block not in old[head:]
        self.recent += hashes

    def insert(self, hashes: Sequence[int]) -> None:
        """Insert or refresh blocks as most recently used, evicting (and demoting) the least recently used."""
        blocks = self.blocks
        n = len(blocks)
        self.moved |= blocks.intersection(hashes)  # held ones: their old entries no longer count
        self.recent += hashes
        blocks.update(hashes)
        self.inserted += len(blocks) - n
        if len(blocks) > self.capacity_blocks:
            self.fit(self.capacity_blocks)
        elif len(self.recent) > 2 * len(blocks) + 4096:  # a tier that rarely evicts: drop the repeats
            self.recent = self._generation()

    def _generation(self) -> list[int]:
        """`recent` as an order: each held block once, where it was last listed."""
        last = list(reversed(dict.fromkeys(reversed(self.recent))))
        if self.dropped:
            blocks = self.blocks
            last = [h for h in last if h in blocks]
        return last

    def discard(self, h: int) -> None:
        """Drop one block (it moves out of the LRU, e.g. into a request's KV)."""
        if h in self.blocks:
            self.blocks.remove(h)
            self.moved.add(h)
            self.dropped = True

    def fit(self, max_blocks: int) -> None:
        """Evict LRU blocks until at most `max_blocks` remain; they move to the tier below, if any."""
        blocks = self.blocks
        excess = len(blocks) - (max_blocks if max_blocks > 0 else 0)
        if excess <= 0:
            return
        self.evicted += excess
        out: list[int] = []
        while excess:
            old, head = self.old, self.head
            if head == len(old):  # the old generation is used up: the recent one becomes old
                self.old, self.head, self.moved = self._generation(), 0, set()
                self.recent, self.dropped = [], False
                continue
            taken = old[head : head + excess]
            self.head = head + len(taken)
            moved = self.moved
            if moved and not moved.isdisjoint(taken):
                taken = [h for h in taken if h not in moved]
            out += taken
            excess -= len(taken)
        blocks.difference_update(out)
        if self.watch is not None:
            self.watch.evicted(out)
        if self.below is not None:
            self.below.insert(out)


class InflightShare:
    """An HBM tier's blocks shared while requests use them (vLLM prefix caching, SGLang RadixAttention): a full
    block is cached as soon as it is computed (or hit), pinned by a count of the requests using it, never evicted
    while pinned, and goes to the LRU in free KV when the last one leaves.

    Accounting: each request still reserves its whole context on the engine; a block used by r requests is then
    credited back r - 1 times, so `kv_used` = the reservations - the shared copies: a shared block takes HBM once.
    A block a request computed while another copy was in use stays private to it (vLLM keeps such duplicates).
    """

    __slots__ = ("tier", "pbt", "refs", "held", "upto", "shared_hits")

    def __init__(self, tier: Tier, prefix_block_tokens: int) -> None:
        self.tier, self.pbt = tier, prefix_block_tokens
        self.refs = tier.pinned  # hash -> requests using the block
        self.held: dict[Any, list[int]] = {}  # job -> the blocks it pins
        self.upto: dict[Any, int] = {}  # job -> its full prompt blocks already pinned or kept private
        self.shared_hits = 0  # blocks a request found in use by another and shared

    def admit(self, e: KvHolder, job: Any) -> None:
        """A request was admitted with its cached prefix (`job.ctx` tokens) in its KV: it pins those blocks; the
        ones already in use by other requests are shared (credited back once each)."""
        if job.parent is not None or not job.ctx:
            return
        refs, tier, pbt = self.refs, self.tier, self.pbt
        hashes, n = job.req.hash_ids, self._full(job)
        held = self.held.setdefault(job, [])
        for h in hashes[self.upto.get(job, 0) : n]:
            r = refs.get(h, 0)
            if r:
                e.kv_used -= pbt
                self.shared_hits += 1
            else:
                tier.discard(h)  # a cached block moves from free KV into the request's KV
            refs[h] = r + 1
            held.append(h)
        self.upto[job] = n

    def _full(self, job: Any) -> int:
        """Full prompt blocks in the request's KV so far (a partial last block is never shared)."""
        return min(job.ctx, job.n_in, len(job.req.hash_ids) * self.pbt) // self.pbt

    def in_use(self, job: Any) -> int:
        """Tokens of the cached prefix `admit` would share with requests using them (they need no new room)."""
        if job.parent is not None or not job.ctx:
            return 0
        refs, hashes = self.refs, job.req.hash_ids
        return self.pbt * sum(1 for h in hashes[self.upto.get(job, 0) : self._full(job)] if h in refs)

    def computed(self, job: Any) -> None:
        """A prefill chunk ended: the request's newly complete prompt blocks become shareable (pinned by it)."""
        if job.parent is not None:
            return
        hashes, n = job.req.hash_ids, self._full(job)
        start = self.upto.get(job, 0)
        if n <= start:
            return
        refs, tier = self.refs, self.tier
        held = self.held.setdefault(job, [])
        for h in hashes[start:n]:
            if h in refs:
                continue  # computed beside a copy in use: a private duplicate
            tier.discard(h)
            refs[h] = 1
            held.append(h)
        self.upto[job] = n

    def release(self, e: KvHolder, job: Any) -> None:
        """The request freed its KV (already taken off `kv_used`): unpin its blocks; the prompt's blocks no other
        request uses go to the LRU in free KV."""
        refs, pbt = self.refs, self.pbt
        self.upto.pop(job, None)
        for h in self.held.pop(job, ()):
            r = refs[h] - 1
            if r:
                refs[h] = r
                e.kv_used += pbt  # one fewer sharer: the remaining users' reservations hold it
            else:
                del refs[h]
        tier = self.tier
        tier.capacity_blocks = (e.kv_total - e.kv_used) // pbt
        tier.insert([h for h in job.req.hash_ids if h not in refs])


def lookup(hashes: Sequence[int], chain: Sequence[Tier]) -> list[int]:
    """Blocks of the request's leading prefix served by each tier of `chain` (fastest first).

    Block i is served by the first tier holding it; the walk stops at the first block no tier holds.
    """
    return walk(hashes, chain)[0]


def walk(hashes: Sequence[int], chain: Sequence[Tier]) -> tuple[list[int], int]:
    """(lookup's counts, the leading run of `hashes` in chain[0] alone): one pass for both."""
    first, pinned = chain[0].blocks, chain[0].pinned
    lead = 0
    for h in hashes:  # the fastest tier's leading run: one membership test per block, the common case
        if h not in first and h not in pinned:
            break
        lead += 1
    if lead == len(hashes) or len(chain) == 1:
        return [lead, *[0] * (len(chain) - 1)], lead
    if len(chain) == 2:  # HBM and one tier below (a node's DRAM, or the pool): the common layout, written out
        below, top, low = chain[1].blocks, lead, 0
        for h in islice(hashes, lead, None):
            if h in first or h in pinned:
                top += 1
            elif h in below:
                low += 1
            else:
                break
        return [top, low], lead
    counts = [0] * len(chain)
    counts[0] = lead
    tiers = [t.blocks for t in chain]
    for h in islice(hashes, lead, None):
        if h in pinned:  # in use on the fastest tier (HBM)
            counts[0] += 1
            continue
        for i, blocks in enumerate(tiers):
            if h in blocks:
                counts[i] += 1
                break
        else:
            break
    return counts, lead


def lru_hit_ratio(requests: Iterable[Sequence[int]], capacity_blocks: int) -> tuple[int, int]:
    """(hit blocks, all blocks) of one global LRU replayed over requests' hash ids: lookup, then insert all."""
    tier = Tier("pool", "pool", capacity_blocks)
    hits = total = 0
    for hashes in requests:
        hits += tier.match(hashes)
        total += len(hashes)
        tier.insert(hashes)
    return hits, total
