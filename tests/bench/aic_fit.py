"""Fit the default catalog's efficiencies to the AIConfigurator reference tables; print the figures and residuals.

    python tests/bench/aic_fit.py        (scipy; reads tests/sim/reference/aic_*.csv, AIConfigurator not needed)

The reference of a cell is the median over the three backends (TRT-LLM, vLLM, SGLang) of AIConfigurator's step
time: a representative engine, robust to one backend's outlier. Every fit minimises the squared log ratio
model / reference over all cells of its group, with equal weights; nothing is tuned to a single cell.
1. all-reduce per GPU generation: alpha + 2*(tp-1)/tp * bytes / bus_bandwidth over aic_allreduce.csv;
2. dense models (Llama-3.1-8B, Llama-3-70B, Qwen3-32B) per GPU family: mfu, attn_mfu, mbu, gemm_serial,
   step_overhead_ns, layer_overhead_ns, with the fitted all-reduce;
3. DeepSeek-V3 (MLA + MoE), GPU figures fixed: one fixed cost per layer, split between MLA and MoE in the ratio
   of AIConfigurator's MLA and MoE blocks at batch 1 (aic_ops.csv; the median backend).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from kvbench.sim import spec
from kvbench.sim.cost.roofline import CostModel
from kvbench.sim.spec import GpuSpec, LinkSpec
from kvbench.units import ns_to_ms

REF = Path(__file__).resolve().parents[1] / "sim" / "reference"
FAMILIES = {"Ampere": ("A100-80GB",), "Hopper": ("H100", "H200"), "Blackwell": ("B200",)}
LINKS = {"Ampere": "allreduce-a100", "Hopper": "allreduce-h100", "Blackwell": "allreduce-b200"}
DENSE = ("Llama-3.1-8B", "Llama-3-70B", "Qwen3-32B")
Cell = tuple[str, str, int, str, int, int, int]  # model, gpu, tp, phase, batch, tokens, context


def _read(name: str) -> list[dict[str, str]]:
    with (REF / name).open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def reference() -> dict[Cell, float]:
    """Median over backends of each cell's step time, ms."""
    by: dict[Cell, list[float]] = defaultdict(list)
    for r in _read("aic_step_times.csv"):
        key = (r["model"], r["gpu"], int(r["tp"]), r["phase"], int(r["batch"]), int(r["tokens"]), int(r["context"]))
        by[key].append(float(r["time_ms"]))
    return {k: statistics.median(v) for k, v in by.items()}


def predict_ms(cell: Cell, gpu: GpuSpec, link: LinkSpec | None = None) -> float:
    model, _, tp, phase, batch, tokens, context = cell
    c = CostModel(spec.model(model), gpu, tp, link)
    ns = c.prefill_ns(tokens) if phase == "prefill" else c.decode_step_ns(batch, batch * context)
    return ns_to_ms(ns)


def fit_allreduce(gpus: tuple[str, ...]) -> tuple[float, float, float]:
    """(alpha_ns, bus bytes/s, worst |log ratio|) of the median backend's per-all-reduce times."""
    by: dict[tuple[int, int], list[float]] = defaultdict(list)
    for r in _read("aic_allreduce.csv"):
        if r["gpu"] in gpus:
            by[(int(r["tp"]), int(r["bytes"]))].append(float(r["time_us"]) * 1000)
    pts = [(tp, b, statistics.median(v)) for (tp, b), v in sorted(by.items())]

    def res(x: np.ndarray) -> np.ndarray:
        return np.array([math.log((x[0] + 2 * (tp - 1) / tp * b / (x[1] * 1e9) * 1e9) / t) for tp, b, t in pts])

    fit = least_squares(res, [5000.0, 300.0], bounds=([0, 10], [1e5, 5000]))
    return fit.x[0], fit.x[1] * 1e9, float(np.max(np.abs(fit.fun)))


def fit_dense(ref: dict[Cell, float], gpus: tuple[str, ...], link: LinkSpec) -> tuple[np.ndarray, np.ndarray]:
    cells = [c for c in ref if c[1] in gpus and c[0] in DENSE]
    base = {g: spec.gpu(g) for g in gpus}

    def gpu_at(g: str, x: np.ndarray) -> GpuSpec:
        return dataclasses.replace(
            base[g],
            mfu=x[0],
            attn_mfu=x[1],
            mbu=x[2],
            gemm_serial=x[3],
            step_overhead_ns=round(x[4] * 1000),
            layer_overhead_ns=round(x[5] * 1000),
        )

    def res(x: np.ndarray) -> np.ndarray:
        return np.array([math.log(predict_ms(c, gpu_at(c[1], x), link) / ref[c]) for c in cells])

    lo, hi = [0.2, 0.2, 0.3, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0, 2000.0, 200.0]
    fit = least_squares(res, [0.7, 0.6, 0.85, 0.3, 100.0, 10.0], bounds=(lo, hi), diff_step=1e-3)
    return fit.x, fit.fun


def mla_share(gpu: str) -> float:
    """MLA block / (MLA + MoE blocks) of a batch-1 decode step, each the median over backends."""
    rows = [r for r in _read("aic_ops.csv") if r["gpu"] == gpu and r["batch"] == "1"]
    mla = statistics.median(float(r["mla_ms"]) for r in rows)
    return mla / (mla + statistics.median(float(r["moe_ms"]) for r in rows))


def fit_moe(ref: dict[Cell, float], gpu: GpuSpec, link: LinkSpec) -> tuple[np.ndarray, float, np.ndarray]:
    """DeepSeek-V3 on `gpu`, its dense figures fixed: ([fixed us per layer, moe_mfu], MLA share, log residuals)."""
    cells = [c for c in ref if c[1] == gpu.name and c[0] == "DeepSeek-V3"]
    share = mla_share(gpu.name)

    def at(x: np.ndarray) -> GpuSpec:
        f = x[0] * 1000
        return dataclasses.replace(
            gpu, mla_layer_ns=round(f * share), moe_layer_ns=round(f * (1 - share)), moe_mfu=x[1]
        )

    def res(x: np.ndarray) -> np.ndarray:
        return np.array([math.log(predict_ms(c, at(x), link) / ref[c]) for c in cells])

    fit = least_squares(res, [50.0, 0.3], bounds=([0.0, 0.01], [1000.0, 1.0]), diff_step=1e-3)
    return fit.x, share, fit.fun


def _spread(r: np.ndarray) -> str:
    return f"rms {math.exp(float(np.sqrt(np.mean(r**2)))):.3f}x, worst {math.exp(float(np.max(np.abs(r)))):.3f}x"


def main() -> None:
    ref = reference()
    for fam, gpus in FAMILIES.items():
        alpha, beta, worst = fit_allreduce(gpus)
        link = dataclasses.replace(spec.link(LINKS[fam]), alpha_ns=round(alpha), bytes_per_s=beta, efficiency=1.0)
        print(f"{fam}: all-reduce alpha {alpha / 1000:.2f} us, bus {beta / 1e9:.0f} GB/s, worst {math.exp(worst):.2f}x")
        x, r = fit_dense(ref, gpus, link)
        names = ("mfu", "attn_mfu", "mbu", "gemm_serial", "step_us", "layer_us")
        print("  dense:", ", ".join(f"{n} {v:.3f}" for n, v in zip(names, x)), "|", _spread(r))
        for g in gpus:
            if not any(c[1] == g and c[0] == "DeepSeek-V3" for c in ref):
                continue
            dense = dict(zip(("mfu", "attn_mfu", "mbu", "gemm_serial"), x[:4]))
            over = {"step_overhead_ns": round(x[4] * 1000), "layer_overhead_ns": round(x[5] * 1000)}
            x2, share, r = fit_moe(ref, dataclasses.replace(spec.gpu(g), **dense, **over), link)
            print(
                f"  {g} DeepSeek-V3: {x2[0]:.1f} us per layer, MLA share {share:.2f}, moe_mfu {x2[1]:.3f} | {_spread(r)}"
            )


if __name__ == "__main__":
    main()
