"""Credentials never leave the process: a key given with --set and a password in the URL reach the server and
nothing else — not run.json, the events' details (a server that echoes the key in a 401 body), the report, the
timeline, the summary or anything printed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
from support.faultserver import FaultServer

from kvbench.eventlog import table_glob
from kvbench.redact import REDACTED

KEY = "sk-live-4f9a1c77e2"
PASSWORD = "hunter2-b81d"
CLI = [sys.executable, "-c", "from kvbench.cli.app import main; main()"]


def _kvbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def _trace(path: Path) -> Path:
    rows = ({"timestamp": 20 * i, "input_length": 21, "output_length": 4, "hash_ids": [i]} for i in range(3))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_key_echoed_by_the_server_and_a_url_password_are_nowhere_in_the_outputs(tmp_path):
    out = tmp_path / "run"
    with FaultServer(fail_every=1, fail_with="echo_auth") as srv:
        url = srv.base_url.replace("http://", f"http://kvuser:{PASSWORD}@")
        sets = [f"headers.Authorization=Bearer {KEY}", "model=fault-model", "word_tokens=2"]
        replay = _kvbench(
            "replay", "--trace", str(_trace(tmp_path / "t.jsonl")), "--target", url,
            *(a for s in sets for a in ("--set", s)), "--out", str(out),
        )  # fmt: skip
        sent = srv.headers
    assert [h["Authorization"] for h in sent] == [f"Bearer {KEY}"] * 3  # the key was used
    assert replay.returncode == 1 and "none of 3 requests finished" in replay.stderr, replay.stderr
    details = [
        d
        for (d,) in duckdb.connect()
        .execute(f"SELECT detail FROM read_parquet('{table_glob(out)}') WHERE detail IS NOT NULL AND kind <> 'SEND'")
        .fetchall()
    ]
    # the echo was scrubbed, not lost: the 401 and the server's words are there, with the key replaced
    assert details == [f'http_4xx: 401 {{"error": {{"message": "invalid credentials {REDACTED}"}}}}'] * 3
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["target"]["name"] == manifest["target"]["source"] == srv.base_url.replace("//", f"//{REDACTED}@")
    assert manifest["target"]["params"]["headers"] == {"Authorization": REDACTED}
    outputs = [replay.stdout, replay.stderr, "\n".join(details), (out / "run.json").read_text()]
    report = _kvbench("report", str(out), "-o", str(tmp_path / "report.html"))
    timeline = _kvbench("timeline", str(out), "-o", str(tmp_path / "timeline.json"))
    summary = _kvbench("summary", str(out), "--json")
    for r in (report, timeline, summary):
        assert r.returncode == 0, r.stderr
        outputs += [r.stdout, r.stderr]
    outputs += [(tmp_path / "report.html").read_text(), (tmp_path / "timeline.json").read_text()]
    assert "invalid credentials" in outputs[-2]  # the report shows the failure ...
    for text in outputs:
        assert KEY not in text and PASSWORD not in text  # ... and never the key or the password


def test_a_probe_error_names_the_url_without_its_password(tmp_path):
    # nothing listens on port 1: listing the models fails, and the one-line error names the endpoint
    trace = _trace(tmp_path / "t.jsonl")
    r = _kvbench("replay", "--trace", str(trace), "--target", f"http://kvuser:{PASSWORD}@127.0.0.1:1/v1", "-q")
    assert r.returncode == 2 and r.stderr.startswith(f"kvbench: error: http://{REDACTED}@127.0.0.1:1/v1/models: ")
    assert PASSWORD not in r.stderr and "\n" not in r.stderr.rstrip("\n")
