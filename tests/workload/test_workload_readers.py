"""Trace readers: Mooncake (with the sort repair), Azure CSV, length CSV, ShareGPT sessions; bad input errors."""

from __future__ import annotations

import pytest

from kvbench.config import ConfigError
from kvbench.workload import load
from kvbench.workload.build import detect_format
from kvbench.workload.csvtraces import read_azure, read_lengths, wall_clock_ns
from kvbench.workload.mooncake import read_mooncake, write_mooncake
from kvbench.workload.sharegpt import block_ids, conversation_turns, estimate_tokens, read_sharegpt


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def test_mooncake_units_and_ids(tmp_path):
    p = _write(
        tmp_path,
        "t.jsonl",
        '{"timestamp": 1500, "input_length": 513, "output_length": 7, "hash_ids": [4, 9]}\n'
        '\n{"timestamp": 2000.5, "input_length": 1, "output_length": 0, "hash_ids": [4]}\n',
    )
    a, b = list(read_mooncake(p))
    assert (a.req_id, a.arrival_ns, a.input_tokens, a.output_tokens, a.hash_ids) == (0, 1_500_000_000, 513, 7, (4, 9))
    assert (b.req_id, b.arrival_ns) == (1, 2_000_500_000)  # 2000.5 ms


def test_mooncake_unsorted_is_sorted_with_one_warning(tmp_path, capsys):
    p = _write(
        tmp_path,
        "u.jsonl",
        "".join(
            f'{{"timestamp": {t}, "input_length": {n}, "output_length": 1}}\n'
            for t, n in [(0, 1), (30, 2), (10, 3), (10, 4)]
        ),
    )
    w = load.from_trace(p)
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and f"{p}:3" in err
    for _ in range(2):  # a fresh iterator each call, still sorted, and no second warning
        reqs = list(w.make())
        assert [r.input_tokens for r in reqs] == [1, 3, 4, 2]  # stable: the two 10 ms keep file order
        assert [r.req_id for r in reqs] == [0, 1, 2, 3]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "line, field",
    [
        ('{"timestamp": "x", "input_length": 1, "output_length": 1}', "'timestamp'"),
        ('{"timestamp": -1, "input_length": 1, "output_length": 1}', "'timestamp'"),
        ('{"timestamp": 0, "output_length": 1}', "'input_length'"),
        ('{"timestamp": 0, "input_length": 1.5, "output_length": 1}', "'input_length'"),
        ('{"timestamp": 0, "input_length": 99999999999, "output_length": 1}', "'input_length'"),
        ('{"timestamp": 0, "input_length": 10, "output_length": -2}', "'output_length'"),
        ('{"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}', "'hash_ids'"),
        ('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": ["a"]}', "'hash_ids'"),
        ('{"timestamp": 0, "input_length": 10', "invalid JSON"),
        ("[1, 2]", "JSON object"),
    ],
)
def test_mooncake_bad_lines_name_file_line_field(tmp_path, line, field):
    p = _write(tmp_path, "bad.jsonl", '{"timestamp": 0, "input_length": 1, "output_length": 1}\n' + line + "\n")
    with pytest.raises(ConfigError) as e:
        list(read_mooncake(p))
    msg = str(e.value)
    assert msg.startswith(f"{p}:2: ") and field in msg and "\n" not in msg


def test_hash_ids_count_message_shows_the_arithmetic(tmp_path):
    p = _write(tmp_path, "h.jsonl", '{"timestamp": 0, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}\n')
    with pytest.raises(ConfigError, match=r"2 ids, but input_length 1025 needs ceil\(1025/512\) = 3 blocks"):
        list(read_mooncake(p))


@pytest.mark.parametrize(
    "content, expect", [(b"", "empty"), (b"\0\1\2\3garbage", "binary"), (b"hello,world\n1,2\n", "unknown trace format")]
)
def test_detect_rejects_empty_binary_unknown(tmp_path, content, expect):
    p = _write(tmp_path, "x.dat", content)
    with pytest.raises(ConfigError, match=expect):
        load.from_trace(p)


def test_directory_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        load.from_trace(tmp_path)
    with pytest.raises(ConfigError, match="no such file"):
        load.from_trace(tmp_path / "nope.jsonl")


def test_detect_formats_of_the_shared_files(traces_dir):
    assert detect_format(traces_dir / "conversation_trace.jsonl") == "mooncake"
    assert detect_format(traces_dir / "AzureLLMInferenceTrace_conv.csv") == "azure"
    assert detect_format(traces_dir / "ShareGPT_V3_filtered_1000.json") == "sharegpt"
    assert detect_format(traces_dir / "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv") == "lengths"


def test_azure_wall_clock_to_offsets(tmp_path):
    # 100 ns resolution: .6805900 s and one second + .0000001 s later.
    assert wall_clock_ns("1970-01-01 00:00:01.5", "w") == 1_500_000_000
    p = _write(
        tmp_path,
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.6806000,396,109\n",
    )
    a, b = read_azure(p)
    assert (a.arrival_ns, a.input_tokens, a.output_tokens) == (0, 374, 44)
    assert b.arrival_ns == 1_000_010_000  # 47.6806000 - 46.6805900 = 1.0000100 s
    assert a.hash_ids == ()


def test_azure_real_file(traces_dir):
    reqs = read_azure(traces_dir / "AzureLLMInferenceTrace_conv.csv")
    assert len(reqs) == 19_366
    assert reqs[-1].arrival_ns == pytest.approx(3501.7e9, rel=1e-4)  # SOURCES.md §2: duration 3,501.7 s


@pytest.mark.parametrize(
    "row, field",
    [
        ("2023-11-16 18:15:46,x,1", "'ContextTokens'"),
        ("16/11/2023,1,1", "'TIMESTAMP'"),
        ("2023-11-16 18:15:46,5,-1", "'GeneratedTokens'"),
        ("2023-11-16 18:15:46,5", "2 fields"),
    ],
)
def test_azure_bad_rows(tmp_path, row, field):
    p = _write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,1\n" + row + "\n")
    with pytest.raises(ConfigError) as e:
        read_azure(p)
    assert str(e.value).startswith(f"{p}:3: ") and field in str(e.value)


def test_length_csv_and_missing_column(tmp_path, traces_dir):
    pairs = read_lengths(traces_dir / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv")
    assert len(pairs) == 30_731 and pairs[0] == (74, 918)
    p = _write(tmp_path, "l.csv", "num_prefill_tokens,other\n1,2\n")
    with pytest.raises(ConfigError, match=r"l.csv:1: missing column 'num_decode_tokens'"):
        read_lengths(p)
    p = _write(tmp_path, "h.csv", "num_prefill_tokens,num_decode_tokens\n")
    with pytest.raises(ConfigError, match="empty trace"):
        read_lengths(p)


def test_length_csv_trace_gets_poisson_arrivals(traces_dir):
    w = load.from_trace(traces_dir / "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv", seed=3)
    reqs = list(w.make())
    assert len(reqs) == 28_257 and reqs[0].arrival_ns == 0
    # Poisson at the default 1 req/s: 28,256 gaps of mean 1 s -> the last arrival within ~1 % of 28,256 s.
    assert reqs[-1].arrival_ns / 1e9 == pytest.approx(28_256, rel=0.02)
    assert reqs == list(
        load.from_trace(traces_dir / "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv", seed=3).make()
    )


def test_sharegpt_turns_share_prefix_blocks():
    a = "x" * 3000
    msgs = [("human", a), ("gpt", "y" * 500), ("human", "z" * 10)]
    t0, t1 = conversation_turns(msgs)
    # Turn 0: "User: " + 3000 + "\n\n" = 3,008 chars -> ceil(3008/4) = 752 tokens, ceil(3008/2048) = 2 blocks.
    assert (t0.input_tokens, len(t0.hash_ids), t0.output_tokens) == (752, 2, 125)  # reply 500 chars -> 125
    # Turn 1: 3008 + "Assistant: "(11) + 500 + 2 + "User: "(6) + 10 + 2 = 3,539 chars -> 885 tokens, 2 blocks.
    assert t1.input_tokens == 885 and t1.prompt.startswith(t0.prompt)
    assert t1.hash_ids[0] == t0.hash_ids[0] and t1.hash_ids[1] != t0.hash_ids[1]  # full block shared, partial not
    assert t1.output_tokens is None
    assert block_ids(t0.prompt) == t0.hash_ids  # content-derived: same text, same ids, any process
    assert estimate_tokens("") == 1 and estimate_tokens("abcde") == 2


def test_sharegpt_file_sessions_and_outputs(traces_dir):
    sessions = read_sharegpt(traces_dir / "ShareGPT_V3_filtered_1000.json")
    assert len(sessions) == 1000 and all(len(s) == 1 for s in sessions)  # first user turns only
    w = load.from_trace(traces_dir / "ShareGPT_V3_filtered_1000.json")
    reqs = list(w.make())
    assert all(r.prompt and r.prompt.startswith("User: ") for r in reqs)
    assert all(len(r.hash_ids) == -(-r.input_tokens // 512) for r in reqs)


def test_sharegpt_multiturn_file_builds_sessions(tmp_path):
    conv = (
        '[{"id": "a", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello there"},'
        ' {"from": "human", "value": "more"}]}, {"id": "b", "conversations": []}]'
    )
    p = _write(tmp_path, "s.json", conv)
    reqs = list(load.from_trace(p).make())
    assert [(r.session_id, r.turn) for r in reqs] == [(0, 0), (0, 1)]
    assert reqs[0].output_tokens == 3  # "hello there" = 11 chars -> ceil(11/4)
    assert reqs[1].arrival_ns >= reqs[0].arrival_ns


@pytest.mark.parametrize(
    "text, expect",
    [
        ('{"id": 1}', "expected a JSON list"),
        ('[{"id": 1}]', "record 0: field 'conversations'"),
        ('[{"conversations": [{"from": "human"}]}]', "record 0: field 'conversations[0]'"),
        ('[{"conversations": [{"from": "robot", "value": "x"}]}]', "unknown role 'robot'"),
        ('[{"conversations": [', ":1: invalid JSON"),
        ("[]", "no conversation with a user message"),
    ],
)
def test_sharegpt_bad_input(tmp_path, text, expect):
    p = _write(tmp_path, "s.json", text)
    with pytest.raises(ConfigError, match=expect.replace("[", r"\[").replace("(", r"\(")):
        read_sharegpt(p)


def test_write_then_read_round_trip_keeps_sessions_and_reasoning(tmp_path):
    from kvbench.records import Request

    reqs = [Request(0, 1_000_000, 600, 50, (1, 2), 512, 3, 0, 0, 20), Request(1, 2_500_000, 10, 5, (7,))]
    p = tmp_path / "o.jsonl"
    assert write_mooncake(reqs, p) == 2
    back = list(read_mooncake(p))
    assert back[0][:10] == reqs[0][:10]
    assert back[1].arrival_ns == 2_000_000  # written as whole milliseconds (2.5 ms -> 2)
    assert p.read_text().splitlines()[1] == '{"timestamp":2,"input_length":10,"output_length":5,"hash_ids":[7]}'


def test_unsorted_scan_across_chunks(tmp_path):
    from kvbench.workload.mooncake import first_unsorted_line

    lines = [f'{{"timestamp": {t}, "input_length": 1, "output_length": 1}}' for t in [0, 5, 5, 9, 12, 11, 20]]
    p = _write(tmp_path, "c.jsonl", "\n".join(lines[:3]) + "\n\n" + "\n".join(lines[3:]) + "\n")
    # Line 7 holds 11 after 12 (line 4 is blank); any chunk size must find the same line.
    assert {first_unsorted_line(p, n) for n in (7, 30, 64, 1 << 20)} == {7}
    q = _write(tmp_path, "s.jsonl", "\n".join(lines[:5]) + "\n")
    assert first_unsorted_line(q, 16) is None
