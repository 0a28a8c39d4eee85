"""Trace-implied prefix reuse: which block ids earlier requests carried, held compactly for million-request runs."""

from __future__ import annotations

BITMAP_IDS = 1 << 28  # ids below this live in a bitmap (at most 32 MiB; Mooncake ids are dense from 0)
SET_CAP = 2_000_000  # sparse ids (content hashes) go to a set; past this many, tracking stops (NULL reuse)


class SeenBlocks:
    """The set of block ids seen so far: a growable bitmap for small ids, a bounded set for the rest.

    A Python set costs ~60 bytes an id (190 MB at 4 M ids); the bitmap costs one bit.
    """

    __slots__ = ("bits", "sparse", "enabled")

    def __init__(self) -> None:
        self.bits = bytearray()
        self.sparse: set[int] = set()
        self.enabled = True

    def leading_hits(self, ids: tuple[int, ...]) -> int:
        """How many ids at the front were seen before (prefix ids: the first miss ends the reusable prefix)."""
        bits, n_bytes, sparse, hit = self.bits, len(self.bits), self.sparse, 0
        for h in ids:
            if 0 <= h < BITMAP_IDS:
                i = h >> 3
                if i >= n_bytes or not bits[i] >> (h & 7) & 1:
                    break
            elif h not in sparse:
                break
            hit += 1
        return hit

    def observe(self, ids: tuple[int, ...]) -> int:
        """leading_hits(ids), then add(ids): one pass, since the leading hits are already in."""
        hit = self.leading_hits(ids)
        if hit < len(ids):
            self.add(ids[hit:])
        return hit

    def add(self, ids: tuple[int, ...]) -> None:
        if not ids:
            return
        bits = self.bits
        top = max(ids)
        if min(ids) < 0 or top >= BITMAP_IDS:
            return self._add_mixed(ids)
        need = (top >> 3) + 1
        if need > len(bits):
            bits.extend(bytes(max(need - len(bits), len(bits) // 2)))  # grow geometrically
        for h in ids:
            bits[h >> 3] |= 1 << (h & 7)

    def _add_mixed(self, ids: tuple[int, ...]) -> None:
        small = tuple(h for h in ids if 0 <= h < BITMAP_IDS)
        if small:
            self.add(small)
        self.sparse.update(h for h in ids if not 0 <= h < BITMAP_IDS)
        if len(self.sparse) > SET_CAP:
            self.enabled = False
            self.sparse = set()
