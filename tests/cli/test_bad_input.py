"""Bad input found by fuzzing (issue 10): each ends with one `kvbench: error:` line and exit 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = str(Path(__file__).resolve().parents[2] / "traces" / "kimi-sample.jsonl")
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
SPEC = (
    'kind = "synthetic"\nrequests = 5\n[input]\ndist = "fixed"\ntokens = 100\n[output]\ndist = "fixed"\ntokens = 10\n'
)

CASES = {
    "rate too small": (
        ["replay", "--trace", SAMPLE, "--rate", "1e-10"],
        {},
        "--rate (--request-rate) must be a finite number >= 1e-06",
    ),
    "time scale nan": (
        ["replay", "--trace", SAMPLE, "--time-scale", "nan"],
        {},
        "--time-scale must be a finite number",
    ),
    "start inf": (["replay", "--trace", SAMPLE, "--start", "inf"], {}, "--start must be a finite number"),
    "duration huge": (["replay", "--trace", SAMPLE, "--duration", "1e300"], {}, "--duration must be a finite number"),
    "seed not an int": (["replay", "--trace", SAMPLE, "--seed", "-inf"], {}, "--seed: '-inf' is not a valid int"),
    "azure field over csv limit": (
        ["replay", "--trace", "a.csv"],
        {"a.csv": AZURE + '"' + "x" * 140_000 + '",1,1\n'},
        "a.csv:3: not a valid CSV row: field larger than field limit",
    ),
    "azure year 9999": (
        ["replay", "--trace", "a.csv"],
        {"a.csv": AZURE + "9999-12-31 23:59:59.9999999,10,10\n"},
        "a.csv:3: field 'TIMESTAMP'",
    ),
    "file name too long": (["replay", "--trace", "x" * 300 + ".jsonl"], {}, "cannot open: File name too long"),
    "slo nan in a spec": (
        ["replay", "--workload", "w.toml"],
        {"w.toml": SPEC + "[slo]\nttft_ms = nan\n"},
        "slo.ttft_ms",
    ),
    "a 400-digit integer in a spec": (
        ["replay", "--workload", "w.toml"],
        {"w.toml": SPEC + '[arrivals]\nprocess = "poisson"\nrate = ' + "1" * 400 + "\n"},
        "arrivals.rate must be",
    ),
    "a profile whose kind is a list": (
        ["replay", "--trace", SAMPLE, "--target", "p.toml"],
        {"p.toml": "kind = []\n"},
        "p.toml: key 'kind' must be one of sim, openai, fixed, got []",
    ),
    "a router name that is a list": (
        ["replay", "--trace", SAMPLE, "--target", "sim:pd-2p2d", "--set", "router.name=[1,2]"],
        {},
        "router.name must be one of",
    ),
    "a tiny time scale": (["replay", "--trace", SAMPLE, "--time-scale", "1e-308"], {}, "--time-scale must be a finite"),
    "slo overflow": (["summary", "RUN", "--slo", "ttft=1e308"], {}, "ttft: expected milliseconds > 0 and <= 1e+09"),
    "deeply nested baseline": (["compare", "b.json", "RUN"], {"b.json": "[" * 50_000}, "b.json: not valid JSON"),
    "baseline with non-numbers": (
        ["compare", "b.json", "RUN"],
        {"b.json": '{"kvbench_summary": 1, "metrics": {"ttft_ms.p50": "a"}}'},
        "b.json: metrics.ttft_ms.p50: expected a number or null",
    ),
    "count overflow": (["kv-transfer", "-m", "Llama-3.1-8B", "-n", "1e308"], {}, "is too large"),
    "a line of 17 MiB of spaces": (
        ["replay", "--trace", "t.jsonl"],
        {"t.jsonl": Path(SAMPLE).read_text().splitlines()[0] + "\n" + " " * (17 << 20)},
        "t.jsonl:2: line longer than 16 MiB",
    ),
    "a window with no requests": (["replay", "--trace", SAMPLE, "--start", "100000"], {}, "no requests to replay"),
}


def _kvbench(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", "from kvbench.cli.app import main; main()", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def ref_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "run"
    done = _kvbench(["replay", "--trace", SAMPLE, "-n", "30", "-q", "--out", str(out)], out.parent)
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_and_exit_2(name, tmp_path, ref_run):
    args, files, expected = CASES[name]
    for file, text in files.items():
        (tmp_path / file).write_text(text)
    args = [str(ref_run) if a == "RUN" else a for a in args]
    if args[0] == "replay":
        args += ["-q", "--out", str(tmp_path / "out")]
    done = _kvbench(args, tmp_path)
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("kvbench: error: "), done.stderr
    assert expected in lines[0], lines[0]
