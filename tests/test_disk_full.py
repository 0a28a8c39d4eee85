"""A full disk, for real: a 256 KiB tmpfs. The replay says so in one line naming the run (exit 1), run.json says
`failed`, what was written stays readable, and `kvbench summary` prints the figures it cannot save.

Mounting needs root (CI runs as root); elsewhere the tests are skipped with that reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from kvbench.eventlog import table_glob

CLI = [sys.executable, "-c", "from kvbench.cli.app import main; main()"]


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 256 KiB tmpfs at tmp_path/disk, unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path) -> None:
    """Take the last free bytes of the disk."""
    try:
        with (disk / "filler").open("ab") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass  # full (possibly already)


def test_a_replay_that_fills_the_disk_fails_in_one_line_and_stays_readable(small_disk, conversation_trace):
    out = small_disk / "run"
    cmd = [*CLI, "replay", "--trace", str(conversation_trace), "--target", "fixed", "--out", str(out), "-q"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr == f"kvbench: error: No space left on device writing the run (run.json says failed): {out}\n"
    manifest = json.loads((out / "run.json").read_text())
    assert (manifest["status"], manifest["error"]) == ("failed", f"no space left on device writing {out}")
    assert not list(out.rglob("*.tmp"))  # parts half written are removed, not left beside the complete ones
    kinds = duckdb.connect().execute(f"SELECT count(DISTINCT kind) FROM read_parquet('{table_glob(out)}')").fetchone()
    assert kinds[0] >= 4  # ARRIVE, SEND, FIRST_TOKEN, FINISH ... of the requests that reached the disk

    _fill(small_disk)
    s = subprocess.run([*CLI, "summary", str(out)], capture_output=True, text=True, timeout=120)
    assert s.returncode == 0, s.stderr
    assert s.stderr == f"kvbench: warning: cannot write {out}/summary.json (No space left on device); printing only\n"
    assert "requests" in s.stdout and "throughput" in s.stdout and f"({manifest['status']})" in s.stdout
    j = subprocess.run([*CLI, "summary", str(out), "--json"], capture_output=True, text=True, timeout=120)
    assert j.returncode == 0 and json.loads(j.stdout)["status"] == "failed"
    assert not (out / "summary.json").exists() and not list(out.rglob("*.tmp"))
