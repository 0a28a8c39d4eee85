"""Golden event log of the sim: the same seed gives a byte-identical log, pinned in tests/golden/.

Regenerate (only on purpose, after an intended model change; say why in the commit message):
    KVBENCH_REGEN_GOLDEN=1 pytest tests/test_sim_golden.py
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pyarrow.parquet as pq

from kvbench.eventlog import table_glob
from kvbench.run import RunOptions, execute
from kvbench.targets import resolve
from kvbench.workload.load import from_trace, shape

GOLDEN = Path(__file__).parent / "golden" / "sim_pd2p2d_conversation150.csv"


def _events_csv(conversation_trace, out: Path, seed: int) -> str:
    # the first 150 requests of the conversation trace, 4x faster: prefix hits (HBM and DRAM), P->D transfers
    wl = shape(from_trace(conversation_trace), time_scale=4.0, max_requests=150)
    run_dir, stats = execute(wl, resolve("sim:pd-2p2d"), RunOptions(seed=seed, out=out))
    assert stats.status == "complete" and stats.finished == 150
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for part in sorted(Path(run_dir, "events").glob("*.parquet")):
        t = pq.read_table(part)
        w.writerow(t.column_names)
        for row in zip(*(t.column(c).to_pylist() for c in t.column_names)):
            w.writerow(["" if v is None else v for v in row])
    assert table_glob(run_dir).endswith("*.parquet")
    return buf.getvalue()


def test_same_seed_byte_identical_log_matches_golden(conversation_trace, tmp_path):
    a = _events_csv(conversation_trace, tmp_path / "a", seed=1)
    b = _events_csv(conversation_trace, tmp_path / "b", seed=1)
    assert a == b
    if os.environ.get("KVBENCH_REGEN_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(a)
    assert GOLDEN.read_text() == a, "sim event log changed; if intended, regenerate (see module docstring)"
    kinds = {line.split(",")[2] for line in a.splitlines()[1:]}
    assert {"ROUTE", "PREFILL_START", "KV_XFER_START", "KV_XFER_END", "DECODE_START", "FINISH"} <= kinds
