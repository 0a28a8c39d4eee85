"""How an instance's GPUs split a step: TP, DP attention, expert parallelism, pipeline stages, FP8 (the roofline's
derived per-GPU coefficients).

An instance is `width x pp` GPUs: `pp` pipeline stages of `width` GPUs each, width = tp (tensor parallel) or, with
expert parallelism, width = ep. Per GPU and per stage:

* TP (ep = 1): every weight, FLOP and (up to n_kv_heads) KV split tp ways; two all-reduces per layer of the
  step's activations. With DP attention (`dp_attention`, ep = 1) each rank runs attention for its own requests,
  so the attention output needs no all-reduce; the TP-split MLP gathers the ranks' tokens and scatters them back
  (an all-gather plus a reduce-scatter: the bytes of one all-reduce, two latencies per layer).
* EP (ep > 1, MoE models with expert fields): the routed experts are spread over the ep GPUs (each holds
  n_experts/ep of them whole); attention and the dense weights run in ep/tp data-parallel groups of tp GPUs, so
  each group holds a full copy of the dense weights (read dense/tp per GPU) and the KV of its own requests.
  Every MoE layer dispatches each rank's tokens to the GPUs of their experts and combines the results (two
  all-to-alls): a rank sends its tokens/ep x experts_per_token x hidden activations, FP8 for the dispatch when
  `fp8`, bf16 for the combine; of the destinations (gpus_per_node-1)/ep are on its node (`ep_intra_link`) and
  (ep-gpus_per_node)/ep on other nodes (`ep_link`, per-GPU NIC); the slower share sets the time. Charged in
  series with compute (DeepSeek overlaps them with two micro-batches: an upper bound). Attention TP (tp > 1)
  adds one all-reduce per layer of the group's tokens. All layers count as MoE layers.
* PP (pp > 1): a step runs as m micro-batches (`microbatches`, default pp) through pp stages of n_layers/pp
  layers and the pipeline drains at the end of the step (GPipe): the step takes (m + pp - 1) slots of one
  micro-batch's stage time, each slot also sending the micro-batch's activations to the next stage over
  `pp_link`. The bubble is (pp - 1) / (m + pp - 1) of the step.
* FP8 (`fp8`): weight GEMMs at the GPU's dense FP8 peak (`fp8_flops_per_s`, the same mfu) and 1-byte weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbench.config import ConfigError
from kvbench.sim.spec import GpuSpec, LinkSpec, ModelSpec
from kvbench.sim.spec import link as spec_link
from kvbench.units import ns_at_rate


def _generation(g: GpuSpec) -> str:
    if g.name.startswith(("A100", "A800")):
        return "a100"
    return "b200" if g.name.startswith("B") else "h100"


def default_allreduce_link(g: GpuSpec) -> LinkSpec:
    """Measured all-reduce of the GPU's generation: Ampere (A100/A800), Blackwell (B*), else Hopper."""
    return spec_link(f"allreduce-{_generation(g)}")


def default_intra_link(g: GpuSpec) -> LinkSpec:
    """Measured NVLink send/recv of the generation (Blackwell uses Hopper's: not measured)."""
    return spec_link("nvlink-a100" if _generation(g) == "a100" else "nvlink-h100")


def default_inter_link(g: GpuSpec) -> LinkSpec:
    """Measured inter-node NCCL send/recv per GPU of the generation (Blackwell uses Hopper's)."""
    return spec_link("ib-a100" if _generation(g) == "a100" else "ib-h100")


@dataclass(frozen=True)
class Parallel:
    """An instance's parallel layout (see the module docstring); links None take the generation's defaults."""

    tp: int = 1
    ep: int = 1
    pp: int = 1
    microbatches: int = 0  # 0: pp micro-batches per step
    dp_attention: bool = False
    fp8: bool = False
    gpus_per_node: int = 8
    allreduce_link: LinkSpec | None = None
    ep_link: LinkSpec | None = None
    ep_intra_link: LinkSpec | None = None
    pp_link: LinkSpec | None = None

    @property
    def width(self) -> int:
        """GPUs of one pipeline stage."""
        return self.ep if self.ep > 1 else self.tp

    @property
    def gpus(self) -> int:
        return self.width * self.pp

    @property
    def micro(self) -> int:
        return (self.microbatches or self.pp) if self.pp > 1 else 1

    @property
    def slots(self) -> int:
        """Stage-time slots of one step: m + pp - 1 (1 without PP)."""
        return self.micro + self.pp - 1

    def groups(self) -> int:
        """Data-parallel attention groups of the stage (1 under plain TP)."""
        return self.ep // self.tp if self.ep > 1 else 1

    def kv_split(self, m: ModelSpec) -> int:
        """GPUs that split one token's KV: each holds only its attention group's requests, and a group splits a
        token's KV over at most n_kv_heads of its tp ranks."""
        if self.ep > 1:
            return self.groups() * min(self.tp, m.n_kv_heads)
        return self.tp if self.dp_attention else min(self.tp, m.n_kv_heads)

    def param_bytes(self, m: ModelSpec) -> int:
        return 1 if self.fp8 else m.bytes_per_param

    def weight_bytes(self, m: ModelSpec) -> int:
        """Weights held by the whole instance: the dense part once per attention group, the experts once."""
        dense = m.params - m.expert_params
        return (dense * self.groups() + m.expert_params) * self.param_bytes(m)

    def check(self, m: ModelSpec, g: GpuSpec) -> None:
        if self.tp < 1 or m.n_heads % self.tp:
            raise ConfigError(f"CostModel: tp = {self.tp} must divide n_heads = {m.n_heads} of {m.name}")
        if self.ep > 1 and (not m.n_experts or self.ep % self.tp):
            raise ConfigError(
                f"CostModel: ep = {self.ep} needs a MoE model with expert fields (n_experts, ...) and a multiple "
                f"of tp = {self.tp}; {m.name} has n_experts = {m.n_experts}"
            )
        if self.fp8 and not g.fp8_flops_per_s:
            raise ConfigError(f"CostModel: fp8 = true but GPU {g.name} has no FP8 tensor cores (fp8_flops_per_s)")


def _comm(m: ModelSpec, g: GpuSpec, p: Parallel) -> tuple[float, int]:
    """(ns per token of one micro-batch, fixed ns) of one stage's collectives for the whole model's layers."""
    ar = p.allreduce_link or default_allreduce_link(g)
    act = m.hidden * 2  # bf16 activations of one token
    per_tok, fixed = 0.0, 0
    if p.ep > 1:
        k = m.experts_per_token
        out_bytes = k * act // 2 * (1 if p.fp8 else 2) + k * act  # dispatch (fp8 or bf16) + combine (bf16)
        near = min(p.ep, p.gpus_per_node)
        intra = p.ep_intra_link or default_intra_link(g)
        inter = p.ep_link or default_inter_link(g)
        parts = [((near - 1) / p.ep, intra), ((p.ep - near) / p.ep, inter)]
        per_rank = max(ns_at_rate(share * out_bytes, lk.effective_bytes_per_s) for share, lk in parts)
        per_tok += m.n_layers * per_rank / p.ep  # a rank dispatches the tokens it holds: tokens / ep
        fixed += m.n_layers * 2 * max(lk.alpha_ns for share, lk in parts if share > 0)
        if p.tp > 1:  # attention TP inside a group: one all-reduce of the group's tokens
            ring = 2 * (p.tp - 1) / p.tp * act
            per_tok += m.n_layers * ns_at_rate(ring, ar.effective_bytes_per_s) / p.groups()
            fixed += m.n_layers * ar.alpha_ns
    elif p.tp > 1:
        n_ar = 1 if p.dp_attention else 2  # DP attention: gather + scatter around the MLP = one all-reduce's bytes
        per_tok += ns_at_rate(n_ar * m.n_layers * 2 * (p.tp - 1) / p.tp * m.hidden * 2, ar.effective_bytes_per_s)
        fixed += 2 * m.n_layers * ar.alpha_ns
    return per_tok / p.pp, round(fixed / p.pp)


def _send(m: ModelSpec, g: GpuSpec, p: Parallel) -> tuple[float, int]:
    """(ns per token, fixed ns) of moving one micro-batch's activations to the next pipeline stage."""
    if p.pp == 1:
        return 0.0, 0
    lk = p.pp_link or (default_intra_link(g) if p.gpus <= p.gpus_per_node else default_inter_link(g))
    return ns_at_rate(m.hidden * 2, lk.effective_bytes_per_s), lk.alpha_ns


def derive(m: ModelSpec, g: GpuSpec, p: Parallel, scale: int, serial_bits: int) -> dict[str, Any]:
    """The roofline's derived coefficients (fixed point, `scale` units per ns) for layout `p`: per GPU, per step,
    with the pipeline's slots folded in (roofline.py's docstring has the per-GPU formula)."""
    p.check(m, g)
    w, slots, pp = p.width, p.slots, p.pp
    stage = slots / pp  # one step = `slots` micro-batch passes over 1/pp of the layers
    per_pair = stage / p.micro  # attention and KV: each pass handles 1/m of the step's pairs and KV
    peak = g.fp8_flops_per_s if p.fp8 else g.flops_per_s
    flop_units = ns_at_rate(scale, peak * g.mfu * w)
    attn_units = ns_at_rate(scale, g.flops_per_s * (g.attn_mfu or g.mfu) * w)
    moe_units = ns_at_rate(scale, peak * (g.moe_mfu or g.mfu) * w)
    expert_active = m.expert_active_params()
    byte_units = ns_at_rate(scale, g.hbm_bytes_per_s * g.mbu)
    pb = p.param_bytes(m)
    dense_units = byte_units * pb / p.tp  # each attention group (of tp GPUs) holds the dense weights
    expert_units = byte_units * pb / w
    kv_split = p.kv_split(m)
    comm_tok, comm_fixed = _comm(m, g, p)
    send_tok, send_fixed = _send(m, g, p)
    per_layer = g.layer_overhead_ns + g.mla_layer_ns * m.is_mla + g.moe_layer_ns * m.is_moe
    compute = 2 * (flop_units * (m.active_params - expert_active) + moe_units * expert_active)
    return {
        "_compute_per_token": round(compute * stage),
        "_compute_per_pair": round(attn_units * m.attn_flops_per_pair() * per_pair),
        "_weights_per_token": round(dense_units * m.active_params * stage),
        "_weights_all": round(dense_units * m.params * stage),
        "_weights_dense": round(dense_units * (m.params - m.expert_params) * stage),
        "_weights_experts": round(expert_units * m.expert_params * stage),
        "_expert_miss": 1.0 - m.experts_per_token / m.n_experts if m.n_experts else 0.0,
        "_serial_q": round(g.gemm_serial * (1 << serial_bits)),
        "_kv_per_token": round(byte_units * m.kv_bytes_per_token() / kv_split * per_pair),
        "_allreduce_per_token": round((comm_tok * slots + send_tok * slots * (pp > 1)) * scale),
        "_kv_split": kv_split,
        "_micro": p.micro,
        "_fixed_ns": g.step_overhead_ns + round(slots * (m.n_layers * per_layer / pp + comm_fixed + send_fixed)),
    }
