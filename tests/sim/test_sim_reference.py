"""The default catalog against the committed AIConfigurator reference step times (tests/sim/reference/README.md).

Each cell's reference is the median of AIConfigurator's TRT-LLM, vLLM and SGLang step times. Every cell must lie
within its region's bound; the regions wider than 15 % are listed with the reason the roofline cannot follow them.
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from kvbench.sim import spec
from kvbench.sim.cost.roofline import CostModel
from kvbench.units import ns_to_ms

TABLE = Path(__file__).parent / "reference" / "aic_step_times.csv"
Cell = tuple[str, str, int, str, int, int, int]  # model, gpu, tp, phase, batch, tokens, context


def _reference() -> dict[Cell, tuple[float, float]]:
    """Cell -> (median over backends in ms, max/min spread over backends)."""
    by: dict[Cell, list[float]] = defaultdict(list)
    with TABLE.open(newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            key = (r["model"], r["gpu"], int(r["tp"]), r["phase"], int(r["batch"]), int(r["tokens"]), int(r["context"]))
            by[key].append(float(r["time_ms"]))
    return {k: (statistics.median(v), max(v) / min(v)) for k, v in by.items()}


REF = _reference()


def _region(c: Cell) -> str:
    model, _, _, phase, _, tokens, _ = c
    if model == "DeepSeek-V3":
        # AIConfigurator's three backends disagree on DeepSeek-V3 by up to 5x (vLLM's B200 MoE, SGLang's MLA
        # prefill), so the median switches backend from cell to cell; one fixed cost per MLA / MoE layer and one
        # expert-GEMM efficiency per GPU cannot follow that: -28 % (short prefills, where grouped expert GEMMs
        # read all experts slower than the bandwidth bound) to +26 % (B200 decode of 1-2 requests).
        return "deepseek"
    if model == "Llama-3-70B" and phase == "prefill" and tokens <= 1024:
        # TP8 all-reduces of 2-16 MiB, where NCCL is up to 1.5x slower than the fitted alpha-beta line (the
        # catalog's all-reduce links): 160 all-reduces per step make the prefill up to 22 % too fast.
        return "tp8-short-prefill"
    return "dense"


BOUNDS = {"dense": 0.15, "tp8-short-prefill": 0.25, "deepseek": 0.30}


def _error(c: Cell) -> float:
    model, gpu, tp, phase, batch, tokens, context = c
    cost = CostModel(spec.model(model), spec.gpu(gpu), tp)
    ns = cost.prefill_ns(tokens) if phase == "prefill" else cost.decode_step_ns(batch, batch * context)
    return ns_to_ms(ns) / REF[c][0] - 1


def test_reference_table_covers_the_grid() -> None:
    # 4 models x their GPUs (DeepSeek-V3 at FP8 fits only 8 x H200 / B200) x (9 prefill + 16 decode cells)
    setups = {(c[0], c[1]) for c in REF}
    assert len(setups) == 3 * 4 + 2 and len(REF) == 14 * 25
    assert {c[5] for c in REF if c[3] == "prefill"} == {128 << i for i in range(9)}
    assert {(c[4], c[6]) for c in REF if c[3] == "decode"} == {(1 << i, k) for i in range(8) for k in (1024, 8192)}


@pytest.mark.parametrize("region", sorted(BOUNDS))
def test_default_catalog_within_bounds(region: str) -> None:
    cells = [c for c in REF if _region(c) == region]
    errors = sorted(((_error(c), c) for c in cells), key=lambda e: abs(e[0]), reverse=True)
    worst = [f"{e:+.1%} {c}" for e, c in errors[:5]]
    assert abs(errors[0][0]) <= BOUNDS[region], f"{region}: worst cells {worst}"


def test_most_cells_within_15_percent() -> None:
    within = sum(abs(_error(c)) <= 0.15 for c in REF)
    assert within >= 0.9 * len(REF)  # 331 of 350 with the catalog's figures
