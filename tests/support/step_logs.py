"""Random simulator step logs (hypothesis) and a brute-force enumeration of the steps inside a request's span."""

from __future__ import annotations

from collections import Counter

from hypothesis import strategies as st

GAPS_MS = (5, 7, 10, 15)  # step lengths; back-to-back rows with equal lengths merge exactly


@st.composite
def sim_logs(draw):
    rows: dict[str, list[tuple[int, int, int]]] = {}
    for inst in ("d0", "d1"):
        t, out = 0, []
        for _ in range(draw(st.integers(1, 6))):
            t += draw(st.sampled_from((0, 0, 3, 20)))  # idle time between rows, often none
            gap, n = draw(st.sampled_from(GAPS_MS)), draw(st.integers(1, 8))
            out.append((t, t + gap * n, n))
            t += gap * n
        rows[inst] = out
    end = max(r[-1][1] for r in rows.values())
    reqs = []
    for rid in range(draw(st.integers(1, 6))):
        s = draw(st.integers(0, end))
        e = draw(st.integers(s + 1, end + 10))
        reqs.append((rid, draw(st.sampled_from(("d0", "d1"))), s, e))
    return rows, reqs


def brute_force(rows, inst: str, s: int, e: int) -> Counter:
    """Every step of the instance that starts at or after s and ends at or before e, by its length (ms)."""
    c: Counter = Counter()
    for t0, t1, n in rows[inst]:
        d = (t1 - t0) // n
        for k in range(n):
            if t0 + k * d >= s and t0 + (k + 1) * d <= e:
                c[d] += 1
    return c
