"""The shipped fuzzer (tests/support/fuzzcases.py) over every reader, spec and option family, on a bounded budget.

Each case must end in success or one `kvbench: error:` line with exit 1/2: no traceback, no hang, under 30 s.
More cases: `python tests/support/fuzzrun.py --per-family 200 --seed N`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from support.fuzzcases import FAMILIES

FUZZRUN = Path(__file__).resolve().parents[1] / "support" / "fuzzrun.py"
PER_FAMILY = 8


def test_fuzzed_inputs_end_cleanly():
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(FUZZRUN), "--per-family", str(PER_FAMILY), "--json"],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = [json.loads(line) for line in done.stdout.splitlines()]
    assert Counter(o["family"] for o in outcomes) == {f: PER_FAMILY for f in FAMILIES}
    bad = [o for o in outcomes if o["verdict"] not in ("ok", "clean_error") or o["seconds"] >= 30]
    assert not bad, "\n".join(f"{o['verdict']} {o['argv']}: {o['stderr'][-400:]}" for o in bad[:5])
