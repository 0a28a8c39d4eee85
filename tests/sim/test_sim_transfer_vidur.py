"""The NVLink / IB link catalog entries against the Vidur NCCL send/recv profiles they were fitted to (SOURCES §5)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from kvbench.sim import spec
from kvbench.sim.transfer import transfer_ns


def _rows(path: Path, devices_per_node: str) -> list[tuple[int, float]]:
    """(size bytes, median send/recv time ms) rows of one placement."""
    with path.open(newline="") as f:
        return [
            (int(r["size"]), float(r["time_stats.send_recv.median"]))
            for r in csv.DictReader(f)
            if r["devices_per_node"] == devices_per_node
        ]


def _median(values: list[float]) -> float:
    v = sorted(values)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2


@pytest.mark.parametrize(
    "folder, dpn, link",
    [
        ("h100_dgx", "2", "nvlink-h100"),
        ("a100_dgx", "2", "nvlink-a100"),
        ("h100_dgx", "1", "ib-h100"),
        ("a100_dgx", "1", "ib-a100"),
    ],
)
def test_link_fit_reproduces_vidur_profile(traces_dir: Path, folder: str, dpn: str, link: str) -> None:
    rows = _rows(traces_dir / "vidur" / "network" / folder / "send_recv.csv", dpn)
    lk = spec.link(link)
    # SOURCES §5's fit: alpha = median time of sizes <= 16 KiB, beta = median bandwidth of sizes >= 32 MiB (±2 %)
    alpha_ms = _median([t for s, t in rows if s <= 16 * 1024])
    beta_gbps = _median([s / (t * 1e6) for s, t in rows if s >= 32 * 2**20])  # bytes per ns = GB/s
    assert abs(alpha_ms * 1e6 / lk.alpha_ns - 1) < 0.02
    assert abs(beta_gbps * 1e9 / lk.effective_bytes_per_s - 1) < 0.02
    # and the alpha-beta time is within 25 % of the measured median at the small and the large end
    for size in (2048, 64 * 2**20):
        measured = _median([t for s, t in rows if s == size])
        got = transfer_ns(lk, size, 1) / 1e6
        assert abs(got / measured - 1) < 0.25, (size, got, measured)
