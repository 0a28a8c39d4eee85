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

    def add(self, ids: tuple[int, ...]) -> None:
        bits = self.bits
        for h in ids:
            if 0 <= h < BITMAP_IDS:
                i = h >> 3
                if i >= len(bits):
                    bits.extend(bytes(max(i + 1 - len(bits), len(bits) // 2)))  # grow geometrically
                bits[i] |= 1 << (h & 7)
            else:
                self.sparse.add(h)
        if len(self.sparse) > SET_CAP:
            self.enabled = False
            self.sparse = set()
