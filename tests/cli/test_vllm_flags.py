"""vLLM `bench serve` spellings of `kvbench replay`: datasets, request rate, closed loop, goodput, result JSON.

Runs go through the real console entry point against the fixed target (virtual time, so every figure is
computable by hand): TTFT 50 ms, one token every 10 ms, unlimited servers unless said otherwise.
"""

from __future__ import annotations

import json
import math

import duckdb
import pytest
from support.cli import kvbench

from kvbench.cli.replay_options import DATASETS, Timing, join_values, timing
from kvbench.config import ConfigError
from kvbench.eventlog import table_glob
from kvbench.workload import dataset

FIXED = "fixed:ttft_ms=50,itl_ms=10"
MS = 1_000_000


def arrivals_ms(run) -> list[float]:
    rows = duckdb.connect().execute(
        f"SELECT t_ns FROM read_parquet('{table_glob(run)}') WHERE kind = 'ARRIVE' ORDER BY t_ns, req_id"
    )
    return [t / MS for (t,) in rows.fetchall()]


def requests_table(run) -> list[tuple[int, int]]:
    q = f"SELECT input_tokens, output_tokens FROM read_parquet('{table_glob(run, 'requests')}') ORDER BY req_id"
    return duckdb.connect().execute(q).fetchall()


def test_goodput_takes_vllms_space_separated_pairs():
    assert join_values(["--goodput", "ttft:200", "tpot:50", "-q"]) == ["--goodput", "ttft:200,tpot:50", "-q"]
    assert join_values(["--goodput", "e2el:900"]) == ["--goodput", "e2el:900"]
    assert join_values(["--seed", "3", "--goodput"]) == ["--seed", "3", "--goodput"]  # click says it needs a value


def test_timing_modes():
    inf = math.inf
    # vLLM: --max-concurrency N with --request-rate inf = N at a time, all due at once: a closed loop of N users
    assert timing(inf, 1.0, 32, None, 0.0, False) == Timing(inf, 1.0, 32, True, 0.0)
    assert timing(10.0, 1.0, 32, None, 0.0, False) == Timing(10.0, 1.0, 32, False, 0.0)  # a cap on a schedule
    assert timing(None, 1.0, None, 8, 2.5, False) == Timing(None, 1.0, 8, True, 2.5)
    assert timing(None, 1.0, None, None, 0.0, True).rate == inf  # a --dataset-name run: vLLM's default rate
    assert timing(None, 1.0, None, None, 0.0, False) == Timing()  # a trace at its timestamps
    for bad, message in [
        ((None, 1.0, 4, 4, 0.0, False), "not both"),
        ((5.0, 1.0, None, 4, 0.0, False), "ignores arrival times"),
        ((None, 0.5, None, None, 0.0, False), "give --request-rate"),
        ((10.0, 1.0, None, None, 1.0, False), "--think-time"),
        ((None, 1.0, None, 0, 0.0, False), "--users must be >= 1"),
    ]:
        with pytest.raises(ConfigError, match=message):
            timing(*bad)


def test_dataset_names_agree():
    assert DATASETS == dataset.DATASETS  # the CLI checks names before importing the workload package


def test_random_lengths_follow_vllms_range():
    assert dataset.lengths(1024, 0.0, "--random-input-len").tokens == 1024
    spread = dataset.lengths(100, 0.25, "--random-input-len")
    assert (spread.dist, spread.min, spread.max) == ("uniform", 75, 125)
    odd = dataset.lengths(7, 0.5, "--random-output-len")  # floor(3.5) .. ceil(10.5)
    assert (odd.min, odd.max) == (3, 11)


def test_random_dataset_at_a_request_rate(tmp_path):
    out = tmp_path / "run"
    r = kvbench(
        "replay", "--dataset-name", "random", "--random-input-len", "100", "--random-output-len", "8",
        "--random-range-ratio", "0.5", "--num-prompts", "40", "--request-rate", "20", "--seed", "3",
        "--target", FIXED, "-o", str(out), "-q",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = requests_table(out)
    assert len(rows) == 40
    assert all(50 <= i <= 150 and 4 <= o <= 12 for i, o in rows) and len({i for i, _ in rows}) > 5
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["workload"]["name"] == "random" and manifest["workload"]["shaping"]["rate_per_s"] == 20
    t = arrivals_ms(out)
    assert t[0] == 0 and t == sorted(t) and len(set(t)) == 40  # Poisson gaps, the first at 0 as vLLM's


def test_request_rate_inf_sends_everything_at_once(tmp_path):
    out = tmp_path / "run"
    r = kvbench(
        "replay", "--dataset-name", "random", "--random-output-len", "3", "--num-prompts", "5",
        "--target", FIXED, "-o", str(out), "-q",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert arrivals_ms(out) == [0.0] * 5
    assert r.stdout == f"{out}\n"  # -q prints the run directory only
    assert requests_table(out) == [(1024, 3)] * 5  # vLLM's default input length


def test_max_concurrency_with_rate_inf_is_a_closed_loop(tmp_path):
    # 2 users, 5 output tokens: each request takes 50 + 4 x 10 = 90 ms, so pairs leave at 0, 90, 180 ms
    out = tmp_path / "run"
    r = kvbench(
        "replay", "--dataset-name", "random", "--random-output-len", "5", "--num-prompts", "6",
        "--max-concurrency", "2", "--request-rate", "inf", "--target", FIXED, "-o", str(out), "-q",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert arrivals_ms(out) == [0, 0, 90, 90, 180, 180]
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["concurrency"] == 2 and manifest["closed_loop"] == {"users": 2, "think_s": 0.0}


def test_users_ignore_trace_timestamps_and_think(tmp_path, conversation_trace):
    # the trace's own arrivals are ignored: 3 users, each waiting 0.1 s after its answer (90 ms on 5 tokens)
    out = tmp_path / "run"
    r = kvbench(
        "replay", "--trace", str(conversation_trace), "-n", "6", "--users", "3", "--think-time", "0.1",
        "--target", FIXED, "-o", str(out), "-q",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    t = arrivals_ms(out)
    assert t[:3] == [0, 0, 0] and len(t) == 6
    ends = (
        duckdb.connect()
        .execute(
            f"SELECT a.t_ns, f.t_ns FROM read_parquet('{table_glob(out)}') a JOIN read_parquet('{table_glob(out)}') f "
            "USING (req_id) WHERE a.kind = 'ARRIVE' AND f.kind = 'FINISH' ORDER BY a.t_ns, req_id"
        )
        .fetchall()
    )
    first_ends = sorted(e for _, e in ends)[:3]  # the k-th later request goes at the k-th end + the think time
    assert [a for a, _ in ends[3:]] == [e + 100 * MS for e in first_ends]
    assert min(a for a, _ in ends[3:]) > 0  # the trace has them all at timestamp 0


def test_goodput_and_the_vllm_result_json(tmp_path):
    out = tmp_path / "run"
    r = kvbench(
        "replay", "--dataset-name", "random", "--random-output-len", "5", "--num-prompts", "6",
        "--max-concurrency", "2", "--request-rate", "inf", "--goodput", "ttft:60", "tpot:10",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99.9",
        "--target", FIXED, "-o", str(out), "-q", "--save-result",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "run.json").read_text())["workload"]["slo_ms"] == {"ttft": 60.0, "tpot": 10.0}
    doc = json.loads((out / "vllm_result.json").read_text())
    # closed loop of 2: last request ends at 180 + 90 = 270 ms; every TTFT 50, TPOT and ITL 10, E2E 90 ms
    assert (doc["completed"], doc["failed"], doc["num_prompts"]) == (6, 0, 6)
    assert (doc["request_rate"], doc["burstiness"], doc["max_concurrency"]) == ("inf", 1.0, 2)
    assert doc["duration"] == pytest.approx(0.27)
    assert doc["request_throughput"] == pytest.approx(6 / 0.27)
    assert doc["request_goodput"] == pytest.approx(6 / 0.27)  # TTFT 50 <= 60 and TPOT 10 <= 10: all good
    assert (doc["total_input_tokens"], doc["total_output_tokens"]) == (6 * 1024, 30)
    for name, ms in (("ttft", 50), ("tpot", 10), ("itl", 10), ("e2el", 90)):
        assert doc[f"mean_{name}_ms"] == doc[f"median_{name}_ms"] == doc[f"p50_{name}_ms"] == pytest.approx(ms)
        assert doc[f"p99.9_{name}_ms"] == pytest.approx(ms) and doc[f"std_{name}_ms"] == pytest.approx(0)
    assert doc["kvbench"]["run_dir"] == str(out)


def test_result_dir_takes_vllms_file_name(tmp_path):
    out, results = tmp_path / "run", tmp_path / "results"
    r = kvbench(
        "replay", "--dataset-name", "random", "--num-prompts", "2", "--random-output-len", "2",
        "--target", FIXED, "-o", str(out), "-q", "--result-dir", str(results),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (path,) = results.iterdir()
    assert path.name.startswith("fixed-infqps-") and path.suffix == ".json"  # {backend}-{rate}qps-{model}-{date}
    assert "request_goodput" in json.loads(path.read_text())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dataset-name", "sonnet"], "--dataset-name 'sonnet': expected one of random, sharegpt"),
        (["--dataset-name", "sharegpt"], "--dataset-name sharegpt needs --dataset-path"),
        (
            ["--dataset-name", "random", "--goodput", "ttft:fast"],
            "--slo (--goodput) 'ttft:fast': cannot parse 'ttft:fast'",
        ),
        (["--dataset-name", "random", "--percentile-metrics", "ttft,latency"], "--percentile-metrics"),
        (["--dataset-name", "random", "--users", "2", "--max-concurrency", "2"], "not both"),
        (["--trace", "x.jsonl", "--dataset-name", "random"], "give exactly one of --trace FILE, --workload"),
        (["--dataset-name", "sharegpt", "--dataset-path", "none.json"], "none.json: no such file"),
        (["--dataset-path", "x.json", "--workload", "kimi-sample"], "goes with --dataset-name"),
    ],
)
def test_bad_vllm_flags_are_one_line_errors(args, message):
    r = kvbench("replay", *args, "--target", FIXED, "-q")
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and r.stderr.count("\n") == 1, r.stderr
