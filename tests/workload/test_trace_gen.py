"""`kvbench trace gen`: any workload as Mooncake JSONL, byte-identical for a seed; the shipped sample matches."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kvbench.cli.app import app
from kvbench.workload import load
from kvbench.workload.mooncake import read_mooncake

REPO = Path(__file__).resolve().parents[2]


def _gen(*args: str) -> None:
    out = CliRunner().invoke(app, ["trace", "gen", *args])
    assert out.exit_code == 0, out.output


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    _gen("shared-prefix-stress", "-o", str(a), "--seed", "7", "-n", "300")
    _gen("shared-prefix-stress", "-o", str(b), "--seed", "7", "-n", "300")
    _gen("shared-prefix-stress", "-o", str(c), "--seed", "8", "-n", "300")
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    reqs = list(read_mooncake(a))
    assert len(reqs) == 300
    # 8,192-token prompts = 16 shared blocks + the user's part; every line passes the reader's checks.
    assert all(
        r.hash_ids[:16] == tuple(range(16 * (r.hash_ids[0] // 16), 16 * (r.hash_ids[0] // 16) + 16)) for r in reqs
    )


def test_sessions_survive_the_round_trip(tmp_path):
    out = tmp_path / "chat.jsonl"
    _gen("kimi-sample", "-o", str(out), "-n", "200")
    original = list(load.select(None, "kimi-sample", 0).make())[:200]
    back = list(read_mooncake(out))
    assert [(r.session_id, r.turn, r.input_tokens, r.output_tokens, r.hash_ids) for r in back] == [
        (r.session_id, r.turn, r.input_tokens, r.output_tokens, r.hash_ids) for r in original
    ]
    assert [r.arrival_ns // 1_000_000 for r in original] == [r.arrival_ns // 1_000_000 for r in back]


def test_shipped_sample_is_what_the_spec_generates(tmp_path):
    out = tmp_path / "k.jsonl"
    _gen("kimi-sample", "-o", str(out), "--seed", "0")
    assert out.read_bytes() == (REPO / "traces" / "kimi-sample.jsonl").read_bytes()


def test_gen_from_a_trace_file_and_bad_output(tmp_path, traces_dir):
    out = tmp_path / "azure.jsonl"
    _gen(str(traces_dir / "AzureLLMInferenceTrace_conv.csv"), "-o", str(out), "-n", "3")
    lines = out.read_text().splitlines()
    assert lines[0] == '{"timestamp":0,"input_length":374,"output_length":44,"hash_ids":[]}'
    assert lines[1].startswith('{"timestamp":4314,')  # 18:15:50.9951690 - 18:15:46.6805900 = 4.314579 s
    res = CliRunner().invoke(app, ["trace", "gen", "kimi-sample", "-o", str(tmp_path)])
    assert res.exit_code != 0
