"""Exact sums of runs of floored linear step times in fixed point, and their inverses (how many steps fit).

A run of steps is described by `lines` = (a1, s1, a2, s2, const): step i (i = 0, 1, ...) costs
floor(max(a1 + s1*i, a2 + s2*i) / S) + const ns, with s2 >= s1 (line 2 wins from some step i0 on). The cost model
keeps its coefficients as integers in S units per ns so that a run sums exactly, in O(log), to its single steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

SHIFT = 20
S = 1 << SHIFT  # fixed-point units per nanosecond (a power of two, so the floor is a shift)

Lines = tuple[int, int, int, int, int]  # see the module docstring


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """sum(floor((a*i + b) / m) for i in range(n)) for a, b >= 0, m > 0, in O(log m) (Euclid-like reduction)."""
    total = 0
    while True:
        if a >= m:
            total += (n - 1) * n // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        y = a * n + b
        if y < m:
            return total
        n, b = divmod(y, m)
        m, a = a, m


def _crossover(a1: int, s1: int, a2: int, s2: int) -> float:
    """First step index at which line 2 is >= line 1 (inf if never)."""
    if a1 <= a2:
        return 0
    if s1 == s2:
        return math.inf
    return -(-(a1 - a2) // (s2 - s1))


def _floor_sum_s(n: int, a: int, b: int) -> int:
    """floor_sum(n, S, a, b), its first reduction by shift and mask (S is a power of two): the hot path."""
    total = (n - 1) * n // 2 * (a >> SHIFT) + n * (b >> SHIFT)
    a &= S - 1
    b &= S - 1
    y = a * n + b
    if y < S:
        return total
    n, b = divmod(y, S)
    return total + floor_sum(n, a, S, b)


def run_sum(n: int, lines: Lines) -> int:
    """Exact total of the first n steps of a run (see `lines` above)."""
    a1, s1, a2, s2, const = lines
    if a1 <= a2:  # _crossover(...) == 0, written out: line 2 wins from step 0; _floor_sum_s(n, s2, a2) too
        total = (n - 1) * n // 2 * (s2 >> SHIFT) + n * (a2 >> SHIFT) + n * const
        s2 &= S - 1
        a2 &= S - 1
        y = s2 * n + a2
        if y < S:
            return total
        n, a2 = divmod(y, S)
        return total + floor_sum(n, s2, S, a2)
    i0 = n if s1 == s2 else min(n, -(-(a1 - a2) // (s2 - s1)))
    if i0 == n:
        return _floor_sum_s(n, s1, a1) + n * const
    return _floor_sum_s(i0, s1, a1) + _floor_sum_s(n - i0, s2, a2 + s2 * i0) + n * const


def _real_sum(n: float, a: float, s: float, const: float) -> float:
    """Sum of the first n steps of one line without the floors, in ns (float)."""
    return (n * a + s * n * (n - 1) / 2) / S + n * const


def _real_run(n: float, lines: Lines, i0: float) -> float:
    a1, s1, a2, s2, const = lines
    if n <= i0:
        return _real_sum(n, a1, s1, const)
    return _real_sum(i0, a1, s1, const) + _real_sum(n - i0, a2 + s2 * i0, s2, const)


def solve_run(a: float, s: float, const: float, budget: float) -> float:
    """Real n with _real_sum(n, a, s, const) == budget."""
    q = s / (2 * S)
    lin = a / S + const - q
    if q == 0:
        return budget / lin if lin > 0 else math.inf
    return (-lin + math.sqrt(lin * lin + 4 * q * budget)) / (2 * q)


def run_within(budget_ns: int, lines: Lines) -> int:
    """Largest n with run_sum(n, lines) <= budget_ns, usually without one exact sum.

    The floor-free sum R(n) bounds the exact one: R(n) - n < run(n) <= R(n). So the largest n with R(n) <= budget
    is the answer whenever R(n+1) - (n+1) > budget too; otherwise (a budget within n ns of a step boundary) the
    exact sums decide."""
    a1, s1, a2, s2, const = lines
    if (max(a1, a2) >> SHIFT) + const > budget_ns:
        return 0
    i0 = _crossover(a1, s1, a2, s2)
    est = solve_run(a1, s1, const, budget_ns)
    if est > i0:
        est = i0 + solve_run(a2 + s2 * i0, s2, const, budget_ns - _real_run(i0, lines, i0))
    if est > 2**53:
        raise OverflowError(f"run_within: {est:.3g} steps fit in {budget_ns} ns; is every step ~0 ns?")
    n = max(1, int(est))
    hi_ok = budget_ns - (1.0 + budget_ns * 1e-12)  # a margin for float rounding
    r0, r1 = _real_run(n, lines, i0), _real_run(n + 1, lines, i0)
    while r1 <= hi_ok:
        n, r0, r1 = n + 1, r1, _real_run(n + 2, lines, i0)
    while n > 1 and r0 > hi_ok:
        n, r1, r0 = n - 1, r0, _real_run(n - 1, lines, i0)
    if r0 <= hi_ok and r1 - (n + 1) > budget_ns + (budget_ns - hi_ok):
        return n
    return exact_within(lambda k: run_sum(k, lines), budget_ns, n)


def runs_within(budget_ns: int, sets: Sequence[Lines], extra_ns: int = 0) -> int:
    """Largest n with sum(run_sum(n, l) for l in sets) + n*extra_ns <= budget_ns (steps made of several runs,
    e.g. a speculative step: a verify run plus k draft runs). Newton on the floor-free sum, then the same bounds
    as run_within: R(n) - n*len(sets) < run(n) <= R(n)."""
    if len(sets) == 1:  # a per-step extra is just more constant
        a1, s1, a2, s2, c = sets[0]
        return run_within(budget_ns, (a1, s1, a2, s2, c + extra_ns))
    i0s = [_crossover(a1, s1, a2, s2) for a1, s1, a2, s2, _ in sets]
    const = sum(ln[4] for ln in sets) + extra_ns
    if sum(max(ln[0], ln[2]) >> SHIFT for ln in sets) + const > budget_ns:
        return 0

    def real(n: float) -> float:
        return sum(_real_run(n, ln, i0) for ln, i0 in zip(sets, i0s)) + n * extra_ns

    def step_at(x: float) -> float:  # d real / dn: the step time at x
        return sum(max(a1 + s1 * x, a2 + s2 * x) for a1, s1, a2, s2, _ in sets) / S + const

    n = solve_run(sum(max(ln[0], ln[2]) for ln in sets), sum(ln[3] for ln in sets), const, budget_ns)
    for _ in range(20):  # real() is convex and increasing: Newton converges fast
        miss = real(n) - budget_ns
        if abs(miss) < step_at(n) / 2:
            break
        n = max(1.0, n - miss / step_at(n))
    n = max(1, int(n))
    hi_ok = budget_ns - (1.0 + budget_ns * 1e-12)
    r0, r1 = real(n), real(n + 1)
    while r1 <= hi_ok:
        n, r0, r1 = n + 1, r1, real(n + 2)
    while n > 1 and r0 > hi_ok:
        n, r1, r0 = n - 1, r0, real(n - 1)
    if r0 <= hi_ok and r1 - (n + 1) * len(sets) > budget_ns + (budget_ns - hi_ok):
        return n
    return exact_within(lambda k: sum(run_sum(k, ln) for ln in sets) + k * extra_ns, budget_ns, n)


def exact_within(run: Callable[[int], int], budget_ns: int, guess: int) -> int:
    """Largest n >= 1 with run(n) <= budget_ns, for increasing run() with run(1) <= budget_ns, near `guess`."""
    if run(guess) > budget_ns:
        lo, hi = 1, guess
    else:
        lo, step = guess, 1
        while run(lo + step) <= budget_ns:
            lo, step = lo + step, step * 2
        hi = lo + step
    while hi - lo > 1:  # run(lo) <= budget < run(hi)
        mid = (lo + hi) // 2
        if run(mid) <= budget_ns:
            lo = mid
        else:
            hi = mid
    return lo
