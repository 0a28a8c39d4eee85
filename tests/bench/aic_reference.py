"""Write tests/sim/reference/aic_*.csv: AIConfigurator's step times (and two operator tables) over the grid.

    pip install -e '.[aic]' && python tests/bench/aic_reference.py [--dir tests/sim/reference]

Grid: prefill of one request of 128 ... 32k tokens (no cached context); decode steps of 1 ... 128 requests each
holding 1k or 8k tokens; every (model, tp) x GPU x backend below that AIConfigurator's databases answer and whose
weights fit the GPUs (DeepSeek-V3 at FP8 needs more than 8 x 80 GB, so not on A100/H100). Rows are written in a
fixed order with 4 decimals, so regenerating with the same AIConfigurator version gives the same files.
aic_allreduce.csv: one tensor-parallel all-reduce (Llama-3-70B's ar_1 per layer, tp 8) against its message size.
aic_ops.csv: DeepSeek-V3's decode step split into its MLA block, MoE block and the rest, per batch size.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from kvbench.config import ConfigError
from kvbench.sim import spec
from kvbench.sim.cost.aic import BACKENDS, AicEngine, version
from kvbench.sim.cost.roofline import CostModel

OUT = Path(__file__).resolve().parents[1] / "sim" / "reference"
SETUPS = (("Llama-3.1-8B", 1), ("Llama-3-70B", 8), ("Qwen3-32B", 1), ("DeepSeek-V3", 8))
GPUS = ("A100-80GB", "H100", "H200", "B200")
PREFILL = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
CONTEXTS = (1024, 8192)
HEADER = ("model", "gpu", "tp", "backend", "phase", "batch", "tokens", "context", "time_ms")
AR_TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384)
AR_HEADER = ("gpu", "tp", "backend", "tokens", "bytes", "time_us")
OPS_HEADER = ("gpu", "tp", "backend", "batch", "context", "mla_ms", "moe_ms", "other_ms")


def rows_for(e: AicEngine) -> list[tuple]:
    """One engine's grid: prefill rows (batch 1, tokens = prompt) then decode rows (tokens = batch)."""
    key = (e.model.name, e.gpu.name, e.tp, e.backend)
    out = [(*key, "prefill", 1, n, 0, round(e.prefill_ms(n), 4)) for n in PREFILL]
    out += [(*key, "decode", b, b, c, round(e.decode_ms(b, c), 4)) for c in CONTEXTS for b in BATCHES]
    return out


def allreduce_rows(e: AicEngine) -> list[tuple]:
    """Per all-reduce time of `tokens` activations (decode steps up to 256 tokens, prefill beyond)."""
    m, out = e.model, []
    for n in AR_TOKENS:
        ms = e.decode_ops_ms(n, 1024)["generation_ar_1"] if n <= 256 else e.prefill_ops_ms(n)["context_ar_1"]
        out.append((e.gpu.name, e.tp, e.backend, n, n * m.hidden * 2, round(ms / m.n_layers * 1000, 3)))
    return out


def ops_rows(e: AicEngine) -> list[tuple]:
    out = []
    for b in BATCHES:
        ops = e.decode_ops_ms(b, 1024)
        mla, moe = ops["generation_mla_block"], ops["generation_moe_overlap"]
        other = sum(ops.values()) - mla - moe
        out.append((e.gpu.name, e.tp, e.backend, b, 1024, *(round(x, 4) for x in (mla, moe, other))))
    return out


def _write(path: Path, header: tuple, rows: list[tuple]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    print(f"wrote {len(rows)} rows to {path}", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=OUT)
    out = ap.parse_args().dir
    rows, ar, ops, skipped = [], [], [], []
    for name, tp in SETUPS:
        m = spec.model(name)
        for g in (spec.gpu(n) for n in GPUS):
            if CostModel(m, g, tp).exceeds_hbm():
                skipped.append(f"{name} tp{tp} {g.name}: weights do not fit")
                continue
            for backend in BACKENDS:
                try:
                    e = AicEngine(m, g, tp, backend)
                    rows += rows_for(e)
                    ar += allreduce_rows(e) if name == "Llama-3-70B" else []
                    ops += ops_rows(e) if name == "DeepSeek-V3" else []
                except ConfigError as err:
                    skipped.append(str(err).splitlines()[0][:160])
    out.mkdir(parents=True, exist_ok=True)
    _write(out / "aic_step_times.csv", HEADER, rows)
    _write(out / "aic_allreduce.csv", AR_HEADER, ar)
    _write(out / "aic_ops.csv", OPS_HEADER, ops)
    print(f"aiconfigurator-core {version()}", file=sys.stderr)
    for s in skipped:
        print(f"skipped: {s}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
