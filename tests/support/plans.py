"""Small plan specs over the Kimi-like sample in traces/: a few seconds per plan, for tests."""

from __future__ import annotations

from pathlib import Path

TRACE = Path(__file__).resolve().parents[2] / "traces" / "kimi-sample.jsonl"


def small_plan(search: str = "") -> str:
    """2 GPUs: colocated 2 x TP1 or 1P1D on H100 (plus the [search] keys in `search`), rungs of 30 and 60
    requests, the best half kept, one final search."""
    return f"""trace = "{TRACE}"
model = "Llama-3.1-8B"
gpu_budget = 2
slo = "ttft=2000,tpot=100"
attainment = 0.9
[search]
layouts = ["colocated", "pd"]
{search}
[halving]
requests = [30, 60]
keep = 0.5
final = 1
precision = 0.5
final_precision = 0.25
"""
