"""Where the cluster pool's blocks live and which node's link a read of them uses: each block has a home node's store
(the node whose prefill wrote it: Mooncake keeps a prefill's KV in its own node's DRAM), and hot blocks are
replicated to more nodes' stores (Mooncake's hot-block replication) so their reads spread over several nodes' links
instead of queuing on one."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvbench.sim.kvcache import Tier
from kvbench.sim.transfer import LinkRef, Links, SharedLink, wire_ns

Messages = Callable[[int, int], int]  # (tokens, paged-KV block tokens) -> messages that move them


class PoolReplicas:
    """Copies of the pool's blocks by node. A block's first copy sits on its home node: the node whose prefill
    wrote it (write-through), else (a block demoted into the pool) a fixed hash of the block; a read of it leaves over the link of the ready copy's node whose
    link frees first (a copy on the reader's own node first), and also occupies the reader's link (one transfer
    for all its pool blocks, as when placement is not modelled). Every `hot_reads` reads a block gains one more copy
    (up to `max_copies`) on the node whose link frees first, copied from the least busy holder: its bytes go over
    both nodes' links and the copy serves reads once it has landed. Copies take pool capacity; they go when the
    block is evicted. Writes into the pool are still charged on the writer's link only."""

    __slots__ = (
        "pool",
        "links",
        "ref",
        "n_nodes",
        "max_copies",
        "hot_reads",
        "block_tokens",
        "block_bytes",
        "messages",
        "homes",
        "copies",
        "reads",
        "replicated",
        "remote_reads",
    )

    def __init__(
        self,
        pool: Tier,
        links: Links,
        ref: LinkRef,
        n_nodes: int,
        copies: tuple[int, int],
        block: tuple[int, int],
        messages: Messages,
    ) -> None:
        self.pool, self.links, self.ref, self.n_nodes = pool, links, ref, n_nodes
        self.max_copies, self.hot_reads = min(copies[0], n_nodes), copies[1]  # copies a block may have; reads that
        # earn one more (0: never)
        self.block_tokens, self.block_bytes = block  # a pool block's tokens and bytes
        self.messages = messages
        self.homes: dict[int, int] = {}  # hash -> the node that wrote it (the others: hashed)
        self.copies: dict[int, list[tuple[int, int]]] = {}  # hash -> (node, ready_ns) of its copies beyond home
        self.reads: dict[int, int] = {}  # hash -> reads since its last copy (only when replicating)
        self.replicated = 0  # copies made
        self.remote_reads = 0  # blocks read from another node's store
        pool.watch = self

    def wrote(self, hashes: Sequence[int], node: int) -> None:
        """A prefill on `node` wrote these blocks into the pool: the ones it did not hold live on that node."""
        homes, pool = self.homes, self.pool.blocks
        for h in hashes:
            if h not in pool:
                homes[h] = node

    def home(self, h: int) -> int:
        node = self.homes.get(h)
        if node is not None:
            return node
        # Knuth's multiplicative hash, its high bits scaled to the node count: consecutive ids spread evenly
        return ((h * 2654435761 & 0xFFFFFFFF) * self.n_nodes) >> 32

    def link(self, node: int) -> SharedLink:
        return self.links.on(node, self.ref)

    def read(self, t: int, hashes: Sequence[int], faster: Sequence[Tier], reader: int, paged: int) -> int:
        """Load the blocks of `hashes` that no tier in `faster` holds (the pool serves them) into node `reader`,
        paged in `paged`-token KV blocks; returns when the last byte lands."""
        served = [h for h in hashes if not any(h in tier for tier in faster)]
        due: dict[int, int] = {}  # node -> when its link frees, counting the blocks assigned so far
        groups: dict[int, int] = {}  # holder node -> blocks read from it
        for h in served:
            node = self._holder(h, t, reader, due)
            groups[node] = groups.get(node, 0) + 1
        tokens = len(served) * self.block_tokens
        end = self.link(reader).start(t, len(served) * self.block_bytes, self.messages(tokens, paged))
        for node, n in groups.items():
            if node != reader:
                self.remote_reads += n
                sent = self.link(node).start(t, n * self.block_bytes, self.messages(n * self.block_tokens, paged))
                end = max(end, sent)
        if self.hot_reads and self.max_copies > 1:
            self._count(t, served, paged)
        return end

    def _holder(self, h: int, t: int, reader: int, due: dict[int, int]) -> int:
        nodes = [self.home(h), *(n for n, ready in self.copies.get(h, ()) if ready <= t)]
        if reader in nodes:
            return reader
        best = min(nodes, key=lambda n: due.get(n) or max(self.link(n).free_ns, t))
        free = due.get(best) or max(self.link(best).free_ns, t)
        due[best] = free + wire_ns(self.link(best).link, self.block_bytes)
        return best

    def _count(self, t: int, served: list[int], paged: int) -> None:
        """Count the reads; a block read `hot_reads` times since its last copy gains one (grouped per node pair)."""
        reads, hot = self.reads, self.hot_reads
        pairs: dict[tuple[int, int], list[int]] = {}
        for h in served:
            r = reads.get(h, 0) + 1
            held = self.copies.get(h, [])
            if r < hot or len(held) + 1 >= self.max_copies:
                reads[h] = r
                continue
            reads[h] = 0
            nodes = [self.home(h), *(n for n, _ in held)]
            src = min(nodes, key=lambda n: max(self.link(n).free_ns, t))
            home = nodes[0]
            others = (n for n in range(self.n_nodes) if n not in nodes)
            dst = min(others, key=lambda n: (max(self.link(n).free_ns, t), (n - home) % self.n_nodes))
            pairs.setdefault((src, dst), []).append(h)
        for (src, dst), hs in pairs.items():
            nbytes, msgs = len(hs) * self.block_bytes, self.messages(len(hs) * self.block_tokens, paged)
            ready = max(self.link(src).start(t, nbytes, msgs), self.link(dst).start(t, nbytes, msgs))
            for h in hs:
                self.copies.setdefault(h, []).append((dst, ready))
            self.replicated += len(hs)
            self.pool.capacity_blocks -= len(hs)  # a copy takes a block of the pool's capacity
        if pairs:
            self.pool.fit(self.pool.capacity_blocks)

    def evicted(self, hashes: list[int]) -> None:
        """Evicted blocks lose every copy (their capacity comes back) and their read counts."""
        copies, reads, pool = self.copies, self.reads, self.pool
        for h in hashes:
            reads.pop(h, None)
            self.homes.pop(h, None)
            held = copies.pop(h, None)
            if held:
                pool.capacity_blocks += len(held)
