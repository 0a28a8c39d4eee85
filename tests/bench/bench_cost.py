"""Benchmark (not a test): ns per call of the sim physics hot-path methods. Run: python tests/bench/bench_cost.py"""

from __future__ import annotations

import random
import statistics
import timeit

from kvbench.sim import spec
from kvbench.sim.cost.roofline import CostModel
from kvbench.sim.spec_decode import sample_accepted, spec_run_ns, spec_steps_within
from kvbench.sim.transfer import SharedLink, transfer_ns

REPEATS, NUMBER = 9, 20_000


def bench(label: str, fn, number: int = NUMBER) -> float:
    times = timeit.repeat(fn, number=number, repeat=REPEATS)
    ns = statistics.median(times) / number * 1e9
    print(f"{label:<52} {ns:>9.0f} ns/call")
    return ns


def main() -> None:
    c8 = CostModel(spec.model("Llama-3.1-8B"), spec.gpu("H100"))
    c70 = CostModel(spec.model("Llama-3-70B"), spec.gpu("A100-80GB"), tp=8)
    ds = CostModel(spec.model("DeepSeek-V3"), spec.gpu("H200"), tp=8, dp_attention=True)
    link, rng = spec.link("roce-mooncake"), random.Random(0)
    shared = SharedLink(link)
    print(f"median of {REPEATS} repetitions")
    step = bench("decode_step_ns (8B, batch 64)", lambda: c8.decode_step_ns(64, 131_072))
    bench("decode_step_ns (70B tp8, batch 64)", lambda: c70.decode_step_ns(64, 131_072))
    bench("prefill_ns (8B, 2048 after 4096)", lambda: c8.prefill_ns(2048, 4096))
    bench("step_ns (mixed, 512-token chunk + batch 64)", lambda: c8.step_ns(512, 1024, 64, 131_072))
    run = bench("decode_run_ns (8B, batch 64, 1000 steps)", lambda: c8.decode_run_ns(64, 131_072, 1000))
    bench("decode_run_ns (DeepSeek dp-attn, batch 256, 5000 steps)", lambda: ds.decode_run_ns(256, 10**6, 5000))
    within = bench(
        "decode_steps_within (8B, batch 64, 10 s budget)",
        lambda: c8.decode_steps_within(64, 131_072, 10**10),
        number=5_000,
    )
    c70h = CostModel(spec.model("Llama-3-70B"), spec.gpu("H100"), tp=8)
    nv = spec.link("nvlink-h100")
    bench(
        "spec_run_ns (70B + 8B draft, k=5, 1000 steps)",
        lambda: spec_run_ns(c70h, c8, nv, 8, 8000, 5, 1000, 16),
        number=2_000,
    )
    bench(
        "spec_steps_within (70B + 8B draft, k=5, 10 s)",
        lambda: spec_steps_within(c70h, c8, nv, 8, 8000, 5, 10**10, 16),
        number=1_000,
    )
    bench(
        "spec_steps_within (70B, free draft, k=5, 10 s)",
        lambda: spec_steps_within(c70h, None, None, 8, 8000, 5, 10**10, 16),
        number=1_000,
    )
    bench("transfer_ns", lambda: transfer_ns(link, 10**8, 1))
    bench("SharedLink.start", lambda: shared.start(0, 10**8, 1))
    bench("sample_accepted (5 positions, EAGLE-3 rates)", lambda: sample_accepted(rng, (0.58, 0.31, 0.16, 0.08, 0.04)))
    loop = min(1000 * step, 1e12)
    print(
        f"decode_run_ns(1000 steps) vs a loop of 1000 decode_step_ns: {loop / run:.0f}x faster "
        f"(run {run:.0f} ns, loop ~{loop / 1e3:.0f} us); decode_steps_within = {within / step:.1f} steps' cost"
    )


if __name__ == "__main__":
    main()
