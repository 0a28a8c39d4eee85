"""AIConfigurator (NVIDIA, Apache-2.0; optional extra `kvbench[aic]`) as a measured source of step times and profiles.

AIConfigurator composes an engine step from per-operator latencies collected on real GPUs (GEMMs, attention,
MLA, MoE, NCCL/custom all-reduce) per backend and version, offline, from databases shipped in the wheel
`aiconfigurator-core`. kvbench asks it for two things only:
* prefill_ms(new, context): one prefill step of a single request computing `new` tokens after `context` cached
  ones (EngineHandle.predict_prefill_latency(1, context + new, context));
* decode_ms(batch, context): one decode step of `batch` requests each holding `context` tokens before the step
  (EngineHandle.decode_step_latency(batch, context, 0): AIC evaluates attention at s = context + 1).
Both are raw engine-step times: AIC's per-request TTFT adders (vLLM's per-layer dispatch overhead, queueing
factors) and its rate matching are not part of them.

Weights and KV are queried at the catalog model's precision: bf16 GEMMs, KV and attention, or FP8-block GEMMs
and MoE for a model whose catalog entry says bytes_per_param = 1 (DeepSeek-V3); MoE layers are split by tensor
parallelism over the same tp GPUs (moe_tp = tp, vLLM's default without --enable-expert-parallel).
"""

from __future__ import annotations

import contextlib
import csv
import importlib.metadata
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvbench.config import ConfigError
from kvbench.sim.cost.profile import COLUMNS
from kvbench.sim.spec import GpuSpec, ModelSpec

INSTALL_HINT = "pip install 'kvbench[aic]'"
BACKENDS = ("trtllm", "vllm", "sglang")
DISTRIBUTION = "aiconfigurator-core"  # the wheel holding the databases and the estimator
# Catalog name -> AIConfigurator's model id (its model_configs/ ship these configs; no download).
MODELS = {
    "Llama-3.1-8B": "meta-llama/Meta-Llama-3.1-8B",
    "Llama-3-70B": "meta-llama/Meta-Llama-3.1-70B",  # same shape as Llama-3-70B (config.json)
    "Qwen3-8B": "Qwen/Qwen3-8B",
    "Qwen3-32B": "Qwen/Qwen3-32B",
    "DeepSeek-V3": "deepseek-ai/DeepSeek-V3",
}
# Catalog GPU -> AIConfigurator system (SXM parts, 8 GPUs per node).
SYSTEMS = {"A100-80GB": "a100_sxm", "H100": "h100_sxm", "H200": "h200_sxm", "B200": "b200_sxm"}


def version() -> str:
    """Installed AIConfigurator estimator version; a one-line ConfigError naming the extra when it is missing."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(
            f"the aic cost backend needs AIConfigurator, which is not installed: {INSTALL_HINT}"
        ) from None


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """AIC logs a warning per low-fidelity database file it loads; keep the terminal to kvbench's own output."""
    log = logging.getLogger("aiconfigurator_core")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _quant(m: ModelSpec) -> dict[str, str]:
    kv = "bfloat16" if m.bytes_per_kv == 2 else "fp8"
    q = {"kvcache_quant_mode": kv, "fmha_quant_mode": kv}
    if m.bytes_per_param == 1:
        q["gemm_quant_mode"] = "fp8_block"
        if m.active_params < m.params:
            q["moe_quant_mode"] = "fp8_block"
    else:
        q["gemm_quant_mode"] = "bfloat16"
    return q


def _check(m: ModelSpec, g: GpuSpec, backend: str) -> tuple[str, str]:
    if backend not in BACKENDS:
        raise ConfigError(f"aic backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if m.name not in MODELS:
        raise ConfigError(f"aic: model {m.name!r} has no AIConfigurator mapping; known: {', '.join(MODELS)}")
    if g.name not in SYSTEMS:
        raise ConfigError(f"aic: GPU {g.name!r} has no AIConfigurator system; known: {', '.join(SYSTEMS)}")
    return MODELS[m.name], SYSTEMS[g.name]


class AicEngine:
    """One AIConfigurator engine: a catalog model on `tp` GPUs of a catalog type, under one backend."""

    def __init__(self, model: ModelSpec, gpu: GpuSpec, tp: int, backend: str) -> None:
        version()
        model_id, system = _check(model, gpu, backend)
        from aiconfigurator_core.sdk.engine import EngineHandle

        kw: dict[str, Any] = {"tp_size": tp, **_quant(model)}
        if model.active_params < model.params:
            kw["moe_tp_size"] = tp
        self.model, self.gpu, self.tp, self.backend, self.system = model, gpu, tp, backend, system
        try:
            with _quiet():
                self._h = EngineHandle.compile(model_id, system, backend, **kw)
        except (ValueError, RuntimeError) as e:
            raise ConfigError(f"aic: {model.name} tp={tp} on {system}/{backend}: {e}") from None

    def _call(self, method: str, *args: int, **kw: int) -> Any:
        try:
            with _quiet():
                return getattr(self._h, method)(*args, **kw)
        except (ValueError, RuntimeError) as e:
            raise ConfigError(f"aic: {self.model.name} tp={self.tp} on {self.system}/{self.backend}: {e}") from None

    def prefill_ms(self, new_tokens: int, context_tokens: int = 0) -> float:
        """One prefill step of one request: `new_tokens` computed after `context_tokens` cached ones."""
        return float(self._call("predict_prefill_latency", 1, context_tokens + new_tokens, context_tokens))

    def decode_ms(self, batch: int, context_tokens: int) -> float:
        """One decode step of `batch` requests, each holding `context_tokens` before the step."""
        return float(self._call("decode_step_latency", batch, context_tokens, 0))

    def decode_ops_ms(self, batch: int, context_tokens: int) -> dict[str, float]:
        """decode_ms split by operator (AIC's op names, e.g. generation_ar_1, generation_mla_block)."""
        ops = self._call("decode_step_per_op", batch, context_tokens, 0)
        return {name: float(ms) for name, ms, *_ in ops}

    def prefill_ops_ms(self, new_tokens: int) -> dict[str, float]:
        """prefill_ms(new_tokens) split by operator (AIC's op names, e.g. context_ar_1)."""
        ops = self._call("run_static_per_op", batch_size=1, isl=new_tokens, osl=1)[0]
        return {name: float(ms) for name, ms, *_ in ops}


# Profile grid (kvbench/sim/cost/profile.py): context-free prefills, prefills after cached context (their
# attention slope), decode steps per batch size over per-request contexts (a line in the batch's KV tokens).
PREFILL_TOKENS = (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
PREFILL_AFTER_CONTEXT = ((256, 2048), (256, 16384), (2048, 2048), (2048, 16384))
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
DECODE_CONTEXTS = (128, 1024, 4096, 16384)


def profile_rows(e: AicEngine) -> list[tuple[int, int, int, int, float]]:
    """(prefill_tokens, context_tokens, batch, kv_tokens, time_ms) over the grid; prompt lengths AIC refuses
    (beyond its tables) are left out, the profile extrapolates from the last two."""
    rows = []
    for n in PREFILL_TOKENS:
        try:
            rows.append((n, 0, 0, 0, e.prefill_ms(n)))
        except ConfigError:
            if n <= 8192:
                raise
    rows += [(n, c, 0, 0, e.prefill_ms(n, c)) for n, c in PREFILL_AFTER_CONTEXT]
    rows += [(0, 0, b, b * c, e.decode_ms(b, c)) for b in DECODE_BATCHES for c in DECODE_CONTEXTS]
    return rows


def write_profile(path: Path, rows: list[tuple[int, int, int, int, float]]) -> None:
    """The profile CSV, written beside `path` and renamed over it, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLUMNS)
        w.writerows((p, c, b, k, f"{t:.4f}") for p, c, b, k, t in rows)
    tmp.replace(path)


def cache_path(m: ModelSpec, g: GpuSpec, tp: int, backend: str) -> Path:
    """~/.cache/kvbench/aic/MODEL-GPU-tpN-BACKEND-aicVERSION.csv: one profile per engine and AIC version."""
    return Path.home() / ".cache" / "kvbench" / "aic" / f"{m.name}-{g.name}-tp{tp}-{backend}-aic{version()}.csv"


def cached_profile(m: ModelSpec, g: GpuSpec, tp: int, backend: str) -> Path:
    """The profile CSV of this engine, built from AIConfigurator on first use and cached."""
    path = cache_path(m, g, tp, backend)
    if not path.is_file():
        write_profile(path, profile_rows(AicEngine(m, g, tp, backend)))
    return path
