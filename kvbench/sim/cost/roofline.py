"""Roofline step-time model of one engine instance (a model on tp GPUs of one type): prefill, decode, capacity.

A step runs its weight GEMMs and its attention as separate kernels, each bound by compute or by memory; all work
is split evenly over the tp GPUs. One step processing `tokens` new tokens costs, per GPU:

    gemm_ns = max(gc, gm) + gemm_serial * min(gc, gm)
        gc  = 2 * tokens * (dense_active / mfu + expert_active / moe_mfu) / (flops_per_s * tp)
        gm  = weights_read(tokens) * bytes_per_param / tp / (hbm_bytes_per_s * mbu)
    attn_ns = max(attn_flops_per_pair * pairs / (flops_per_s * attn_mfu * tp),
                  kv_tokens_touched * kv_bytes_per_token / kv_div / (hbm_bytes_per_s * mbu))
    step_ns = gemm_ns + attn_ns + allreduce_ns(tokens)
              + step_overhead + n_layers * (layer_overhead + mla_layer [MLA] + moe_layer [MoE])

* expert_active = the routed-expert parameters a token touches (expert_params * experts_per_token / n_experts),
  dense_active = active_params - expert_active; moe_mfu covers the grouped expert GEMMs and the token dispatch.
* gemm_serial: a GEMM near its ridge point is neither purely compute- nor memory-bound (small GEMMs reach less
  than the peak of either); that share of the shorter time adds to the longer. 0 is the plain roofline.
* pairs = (query, key) pairs of attention. A prefill chunk of n tokens after c cached tokens is causal within the
  chunk: pairs = n*c + n*(n+1)/2. A decode step of b requests holding K tokens in total: pairs = K + b.
* kv_tokens_touched = KV read plus KV written: prefill c + n, decode K + b.
* weights_read: a dense model reads every weight once per step. An MoE model with n_experts > 0 reads its
  non-expert weights plus the expected share of distinct routed experts the step's tokens select,
  1 - (1 - experts_per_token / n_experts) ** tokens (uniform routing); without expert fields it reads
  min(params, active_params * tokens) (each token touches `active` parameters, every weight at most once).
* kv_div = how many GPUs split one token's KV: min(tp, n_kv_heads) under TP (heads beyond tp are replicated; MLA
  has a single latent, n_kv_heads = 1, so every TP rank holds and reads the whole latent), tp with DP attention
  (each rank holds the KV of its own requests once: `dp_attention = true`).
* allreduce_ns(tokens) = 2 * n_layers * (alpha + 2*(tp-1)/tp * tokens * hidden * 2 bytes / beta_eff) for tp > 1:
  two all-reduces per layer (after attention and after the MLP) of the step's activations, ring algorithm
  (reduce-scatter + all-gather move 2*(tp-1)/tp of the buffer per GPU), one alpha per all-reduce. The link
  defaults to the measured all-reduce of the GPU's generation (catalog links allreduce-*). Under DP attention the
  attention needs none; the MLP's gather + scatter move one all-reduce's bytes (two alphas per layer).
* Other layouts (expert parallelism, pipeline stages, FP8) change these per-GPU coefficients: parallel.py.

Capacity: kv_capacity_tokens = (mem_fraction * hbm_bytes * tp - weight_bytes) / (kv_bytes_per_token * tp / kv_div);
the activation reserve is (1 - mem_fraction) of every GPU's HBM (0.1 by default, vLLM's gpu_memory_utilization=0.9).

Times are computed in integer fixed point (S units per ns) so that a run of n decode steps sums exactly, in
closed form (floor sums), to the sum of the single steps: within a run the batch is fixed, so the GEMM term is a
constant and only the attention term grows with the KV; the engine advances whole runs in one event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvbench.config import ConfigError
from kvbench.sim.cost.parallel import Parallel, derive
from kvbench.sim.cost.runs import SHIFT, Lines, S, run_sum, run_within
from kvbench.sim.spec import GpuSpec, LinkSpec, ModelSpec
from kvbench.units import bytes_to_gb


def _derived() -> Any:
    """A coefficient computed in __post_init__: not an argument, not compared, not shown."""
    return field(init=False, repr=False, compare=False)


_Q = 16  # fixed-point bits of gemm_serial


@dataclass(frozen=True)
class CostModel:
    """Step times of one engine instance: `model` on `tp` GPUs of type `gpu` (see the module docstring)."""

    model: ModelSpec
    gpu: GpuSpec
    tp: int = 1
    allreduce_link: LinkSpec | None = None  # None: the measured all-reduce of the GPU's generation when tp > 1
    mem_fraction: float = 0.9  # share of HBM for weights + KV; the rest is the activation reserve
    dp_attention: bool = False  # attention data-parallel over the tp ranks: KV held once per rank, not split
    ep: int = 1  # expert parallelism: routed experts spread over ep GPUs, attention in ep/tp DP groups (parallel.py)
    pp: int = 1  # pipeline stages
    microbatches: int = 0  # micro-batches per step under PP (0: pp)
    fp8: bool = False  # FP8 weight GEMMs and 1-byte weights
    gpus_per_node: int = 8  # sets which all-to-all destinations are on the rank's node
    ep_link: LinkSpec | None = None  # EP all-to-all between nodes (None: the generation's inter-node send/recv)
    ep_intra_link: LinkSpec | None = None  # ... within a node (None: the generation's NVLink)
    pp_link: LinkSpec | None = None  # activations between stages (None: NVLink if the instance fits a node)
    # Derived coefficients, in fixed-point units (S per ns) unless named *_ns; set by __post_init__.
    _compute_per_token: int = _derived()  # 2 x active params FLOPs per new token (experts at moe_mfu)
    _compute_per_pair: int = _derived()  # attention FLOPs per (query, key) pair
    _weights_per_token: int = _derived()  # weight bytes one token touches (MoE without expert fields)
    _weights_all: int = _derived()  # every weight byte: a step reads each at most once
    _weights_dense: int = _derived()  # MoE with expert fields: the non-expert weights, read every step
    _weights_experts: int = _derived()  # ... and all routed experts' weights
    _expert_miss: float = _derived()  # 1 - experts_per_token / n_experts (0: no expert fields)
    _serial_q: int = _derived()  # gemm_serial in _Q-bit fixed point
    _kv_per_token: int = _derived()  # HBM bytes of one KV token read or written, on one GPU
    _allreduce_per_token: int = _derived()  # the step's all-reduces, per token in the step
    _kv_split: int = _derived()  # GPUs that split one token's KV (kv_div in the module docstring)
    _micro: int = _derived()  # micro-batches a step is cut into (1 without PP)
    _fixed_ns: int = _derived()  # per-step overheads plus the all-reduce latency
    # _gemm by token count: a pure function of the step's tokens, asked for at every step and run (a cache of
    # at most token_budget + max_running entries, not part of the model's value)
    _gemms: dict[int, int] = _derived()

    def __post_init__(self) -> None:
        for name, value in derive(self.model, self.gpu, self.parallel(), S, _Q).items():
            object.__setattr__(self, name, value)  # frozen: derived once, here
        object.__setattr__(self, "_gemms", {})

    def parallel(self) -> Parallel:
        return Parallel(
            self.tp,
            self.ep,
            self.pp,
            self.microbatches,
            self.dp_attention,
            self.fp8,
            self.gpus_per_node,
            self.allreduce_link,
            self.ep_link,
            self.ep_intra_link,
            self.pp_link,
        )

    # --- single steps (written out, not shared, because the engine calls them in its hot loop) ---------------
    def _gemm(self, tokens: int) -> int:
        """The weight GEMMs and all-reduces of a step of `tokens` new tokens, in fixed point; kept in `_gemms`,
        which the steps read first (`self._gemms.get(tokens) or self._gemm(tokens)`)."""
        g = self._gemm_of(tokens)
        self._gemms[tokens] = g
        return g

    def _gemm_of(self, tokens: int) -> int:
        if self._micro > 1:  # under PP the step's slowest micro-batch sets each slot
            tokens = -(-tokens // self._micro)
        c = self._compute_per_token * tokens
        if self._expert_miss:
            w = self._weights_dense + round(self._weights_experts * (1.0 - self._expert_miss**tokens))
        else:
            w = self._weights_per_token * tokens
            if w > self._weights_all:
                w = self._weights_all
        if c < w:
            c, w = w, c
        return c + (w * self._serial_q >> _Q) + self._allreduce_per_token * tokens

    def _step(self, tokens: int, pairs: int, kv: int) -> int:
        a = self._compute_per_pair * pairs
        m = self._kv_per_token * kv
        return ((self._gemms.get(tokens) or self._gemm(tokens)) + (a if a > m else m) >> SHIFT) + self._fixed_ns

    def prefill_ns(self, new_tokens: int, context_tokens: int = 0) -> int:
        """Compute `new_tokens` after `context_tokens` already in KV (a whole prompt or one chunk of it)."""
        if new_tokens <= 0:
            return 0
        n, c = new_tokens, context_tokens
        a = self._compute_per_pair * (n * c + n * (n + 1) // 2)  # _step(n, pairs, c + n), written out
        m = self._kv_per_token * (c + n)
        return ((self._gemms.get(n) or self._gemm(n)) + (a if a > m else m) >> SHIFT) + self._fixed_ns

    def decode_step_ns(self, batch: int, kv_tokens: int) -> int:
        """One decode step of `batch` requests holding `kv_tokens` in total (before the step)."""
        if batch <= 0:
            return 0
        k = kv_tokens + batch
        return self._step(batch, k, k)

    def step_ns(self, prefill_tokens: int, prefill_context: int, batch: int, kv_tokens: int) -> int:
        """A mixed step: a prefill chunk (after prefill_context cached tokens) plus `batch` decoding requests."""
        p, pc = prefill_tokens, prefill_context
        if p + batch <= 0:
            return 0
        a = self._compute_per_pair * (p * pc + p * (p + 1) // 2 + (kv_tokens + batch if batch else 0))  # pairs
        m = self._kv_per_token * ((pc + p if p else 0) + (kv_tokens + batch if batch else 0))  # KV touched
        tokens = p + batch  # _step(tokens, pairs, kv), written out
        return ((self._gemms.get(tokens) or self._gemm(tokens)) + (a if a > m else m) >> SHIFT) + self._fixed_ns

    def tokens_step_ns(self, tokens: int, pairs: int, kv_tokens_touched: int) -> int:
        """General step: `tokens` new tokens, `pairs` attention pairs, KV tokens read + written."""
        return self._step(tokens, pairs, kv_tokens_touched) if tokens > 0 else 0

    # --- runs of decode steps -----------------------------------------------------------------------------
    def decode_lines(self, batch: int, kv_tokens: int, q: int = 1, growth: int | None = None) -> Lines:
        """A run of steps as `lines` (see run_sum): `batch` requests computing q tokens each (q = 1 decode,
        q = k+1 a speculative verify step) while the KV grows by `growth` per step (default: batch)."""
        tokens = batch * q
        g = batch if growth is None else growth
        gemm = self._gemms.get(tokens) or self._gemm(tokens)
        ac = gemm + self._compute_per_pair * (q * kv_tokens + tokens * (q + 1) // 2)
        am = gemm + self._kv_per_token * (kv_tokens + tokens)
        sc, sm = self._compute_per_pair * q * g, self._kv_per_token * g
        return (ac, sc, am, sm, self._fixed_ns) if sc <= sm else (am, sm, ac, sc, self._fixed_ns)

    def decode_run_ns(self, batch: int, kv_tokens: int, n_steps: int) -> int:
        """n consecutive decode steps, KV growing by `batch` per step; == sum of decode_step_ns, in O(log)."""
        if batch <= 0 or n_steps <= 0:
            return 0
        return run_sum(n_steps, self.decode_lines(batch, kv_tokens))

    def decode_steps_within(self, batch: int, kv_tokens: int, budget_ns: int) -> int:
        """Largest n with decode_run_ns(batch, kv_tokens, n) <= budget_ns (0 when batch is empty)."""
        if batch <= 0:
            return 0
        return run_within(budget_ns, self.decode_lines(batch, kv_tokens))

    # --- memory ---------------------------------------------------------------------------------------------
    def usable_bytes(self) -> int:
        return int(self.mem_fraction * self.gpu.hbm_bytes * self.parallel().gpus)

    def weight_bytes(self) -> int:
        """Weights held by the instance (dense weights once per DP attention group under EP)."""
        return self.parallel().weight_bytes(self.model)

    def exceeds_hbm(self) -> bool:
        return self.weight_bytes() >= self.usable_bytes()

    def kv_bytes_per_token_instance(self) -> float:
        """HBM one token's KV occupies across the instance (replicated where TP cannot split it)."""
        return self.model.kv_bytes_per_token() * self.parallel().width / self._kv_split

    def kv_capacity_tokens(self) -> int:
        if self.exceeds_hbm():
            p = self.parallel()
            layout = f"tp={p.tp}" + (f" ep={p.ep}" if p.ep > 1 else "") + (f" pp={p.pp}" if p.pp > 1 else "")
            raise ConfigError(
                f"model {self.model.name} ({bytes_to_gb(self.weight_bytes()):.1f} GB of weights) does not fit in "
                f"{layout} x {self.gpu.name} ({bytes_to_gb(self.usable_bytes()):.1f} GB usable at mem_fraction="
                f"{self.mem_fraction}); raise tp, ep or pp, or pick a larger GPU"
            )
        return int((self.usable_bytes() - self.weight_bytes()) // self.kv_bytes_per_token_instance())
