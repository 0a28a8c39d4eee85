"""Token counting of one streamed response: chunks that skip JSON parsing (the learnt plain-chunk shape) count
exactly what a full parse of every chunk counts, whatever the text, spacing, usage or finish reason."""

from __future__ import annotations

import json

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.http.stream import Response, _fits, _plain_prefix, terminal
from kvbench.records import Request


def feed(chat: bool, payloads: list[bytes], hint=None) -> tuple[Response, list[tuple]]:
    events: list[tuple] = []
    r = Response(events.append, 7, 0, chat, 1 << 20, 0, send_event=False, hint=hint)
    r.on_head(200, 10, {})
    for i, p in enumerate(payloads):  # one SSE event per read, as a server streaming token by token sends them
        r.on_data(b"data: " + p + b"\n\n", 100 + i)
    r.on_end(1000)
    return r, events


def chunk(chat: bool, text: str | None, finish: str | None = None, spaced: bool = False, created: int = 1) -> bytes:
    choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
    choice["finish_reason"] = finish
    obj = {"id": "cmpl-1", "created": created, "choices": [choice]}
    return json.dumps(obj).encode() if spaced else orjson.dumps(obj)


def test_plain_chunks_count_without_parsing_and_usage_still_read():
    texts = [" a", " b", " c", ""]  # 3 non-empty texts = 3 tokens; the empty one counts 0
    payloads = [chunk(False, t) for t in texts] + [
        chunk(False, "", "length"),
        b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}}',
        b"[DONE]",
    ]
    r, events = feed(False, payloads)
    pre, suf = b'{"id":"cmpl-1","created":1,"choices":[{"index":0,"text":"', b'","finish_reason":null}]}'
    assert r.tpl == (pre, suf, len(pre), len(suf))
    assert r.tokens == 3 and r.finish_reason == "length" and r.done
    assert r.usage == {"prompt_tokens": 5, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}}
    assert [(e[0], e[4]) for e in events] == [(100, 1), (101, 1), (102, 1)]  # one event per read with tokens


def test_a_changed_shape_or_escaped_text_is_parsed_in_full():
    # the finish chunk shares the prefix but not the suffix; an escaped quote and non-ASCII text are parsed;
    # a new `created` second is parsed and relearnt: 5 tokens in all, then the finish reason is seen
    payloads = [
        chunk(True, " a"),
        chunk(True, 'say "hi"'),
        chunk(True, "é"),
        chunk(True, " b", created=2),
        chunk(True, " c", created=2),
        chunk(True, None, "stop"),
    ]
    r, _ = feed(True, payloads)
    assert r.tokens == 5 and r.finish_reason == "stop"
    assert r.tpl[0].endswith(b'"created":2,"choices":[{"index":0,"delta":{"content":"')


def test_an_error_object_after_plain_chunks_still_ends_the_stream():
    r = Response([].append, 7, 0, False, 1 << 20, 0, send_event=False)
    r.on_head(200, 10, {})
    r.on_data(b"data: " + chunk(False, " a") + b"\n\n", 11)
    try:
        r.on_data(b'data: {"error":{"message":"boom"}}\n\n', 12)
    except Exception as e:  # a StreamFault classified server_error
        assert "boom" in str(e)
    else:
        raise AssertionError("an error object must raise")
    assert r.tokens == 1


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.one_of(st.none(), st.text(max_size=6)), st.integers(1, 2)), min_size=1, max_size=12),
    st.booleans(),
    st.booleans(),
)
def test_counts_match_a_full_parse_of_every_chunk(items, chat, spaced):
    payloads = [chunk(chat, text, spaced=spaced, created=created) for text, created in items]
    r, _ = feed(chat, payloads)
    # the reference: parse every chunk; a chunk counts 1 when its text is non-empty
    assert r.tokens == sum(1 for text, _ in items if text)
    # the same with the shape an earlier response learnt (created 1) tried first
    hint = feed(chat, [chunk(chat, " z", spaced=spaced)])[0].tpl
    assert hint is not None and feed(chat, payloads, hint)[0].tokens == r.tokens


def test_a_shape_an_earlier_response_learnt_counts_the_next_ones_first_chunk_unparsed():
    hint = feed(True, [chunk(True, " a")])[0].tpl
    role = orjson.dumps({"id": "cmpl-1", "created": 1, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    r, events = feed(True, [role, chunk(True, " b"), chunk(True, " c")], hint)
    assert r.tpl is hint and r.tokens == 2 and [(e[0], e[4]) for e in events] == [(101, 1), (102, 1)]
    other = [chunk(True, t).replace(b"cmpl-1", b"cmpl-2") for t in (" b", " c")]  # another id: parsed, learnt
    r, _ = feed(True, other, hint)
    assert r.tpl is not hint and r.tpl[0].startswith(b'{"id":"cmpl-2"') and r.tokens == 2


def test_bytes_that_close_the_text_string_are_parsed_not_counted():
    # same bytes before and after as the learnt chunk, but the middle ends the string and adds a finish reason
    # and usage (completion_tokens 5): the full parse reads them, so 5 tokens and "stop", not 2 and None
    pre, suf = b'{"choices":[{"index":0,"text":"', b'","finish_reason":null}]}'
    sneaky = pre + b' b","finish_reason":"stop"}],"usage":{"completion_tokens":5},"w":[{"x":"' + suf
    assert orjson.loads(sneaky)["usage"] == {"completion_tokens": 5}  # valid JSON
    r, _ = feed(False, [pre + b" a" + suf, sneaky])
    assert r.tpl[0] == pre and r.tokens == 5 and r.finish_reason == "stop"


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.one_of(st.none(), st.text(max_size=6)), st.integers(1, 2)), min_size=1, max_size=12),
    st.booleans(),
    st.lists(st.integers(1, 400), max_size=12),
)
def test_any_grouping_of_events_into_reads_counts_the_same(items, chat, cuts):
    # the stream cut into reads at arbitrary byte offsets: several whole events in one read (the counted-in-bulk
    # path), events split across reads (the parser), in any mix; the reference counts non-empty texts
    stream = b"".join(b"data: " + chunk(chat, text, created=created) + b"\n\n" for text, created in items)
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    events: list[tuple] = []
    r = Response(events.append, 7, 0, chat, 1 << 20, 0, send_event=False)
    r.on_head(200, 10, {})
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        r.on_data(stream[a:b], 100 + i)
    r.on_end(1000)
    expected = sum(1 for text, _ in items if text)
    assert r.tokens == expected and sum(e[4] for e in events) == expected
    assert all(e[0] < 100 + len(bounds) for e in events)  # each event carries the time of the read it came in


def test_whole_plain_events_in_one_read_are_one_event_and_a_stray_byte_is_parsed():
    texts = [" a", " b", " c"]
    first, rest = chunk(False, " w"), [b"data: " + chunk(False, t) + b"\n\n" for t in texts]
    events: list[tuple] = []
    r = Response(events.append, 7, 0, False, 1 << 20, 0, send_event=False)
    r.on_head(200, 10, {})
    r.on_data(b"data: " + first + b"\n\n", 100)  # learns the shape from the first, parsed chunk
    r.on_data(b"".join(rest), 200)  # three whole learnt events in one read: one event of 3 tokens at t=200
    assert r.fast is not None and events[-1][0] == 200 and events[-1][4] == 3 and r.tokens == 4
    r.on_data(b"data: " + chunk(False, " d") + b"\n\n:", 300)  # a trailing comment byte: the parser takes it
    assert events[-1][0] == 300 and events[-1][4] == 1 and r.tokens == 5 and r.fast is None  # ':' held back


def test_learnt_events_before_the_tail_in_one_read_are_counted_once_with_it():
    # a read holding 3 learnt token events then the finish chunk, usage and [DONE] (a client that fell behind):
    # the 3 are counted without the parser, the tail parsed; one event of 3 tokens, at the read's time
    tail = [chunk(True, None, "length"), b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4}}', b"[DONE]"]
    events: list[tuple] = []
    r = Response(events.append, 7, 0, True, 1 << 20, 0, send_event=False)
    r.on_head(200, 10, {})
    role = b'{"id":"cmpl-1","created":1,"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'
    r.on_data(b"data: " + role + b"\n\ndata: " + chunk(True, " w") + b"\n\n", 100)  # learns from the 2nd
    assert r.fast is not None and [(e[0], e[4]) for e in events] == [(100, 1)]
    r.on_data(b"".join(b"data: " + p + b"\n\n" for p in [chunk(True, t) for t in (" a", " b", " c")] + tail), 200)
    assert [(e[0], e[4]) for e in events] == [(100, 1), (200, 3)]
    assert r.tokens == 4 and r.finish_reason == "length" and r.done and r.usage["completion_tokens"] == 4


def test_a_first_chat_chunk_carrying_role_costs_one_relearn_only():
    # vLLM/SGLang open with a delta carrying `role`: that chunk's shape is learnt, the next chunk (no role) does
    # not fit it and is parsed and relearnt, and from the third on the learnt shape counts them unparsed
    def delta_chunk(delta: dict) -> bytes:
        return orjson.dumps({"id": "c1", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})

    events: list[tuple] = []
    r = Response(events.append, 7, 0, True, 1 << 20, 0, send_event=False)
    r.on_head(200, 10, {})
    r.on_data(b"data: " + delta_chunk({"role": "assistant", "content": " a"}) + b"\n\n", 100)
    assert r.tpl is not None and b'"role"' in r.tpl[0]
    r.on_data(b"data: " + delta_chunk({"content": " b"}) + b"\n\n", 101)
    assert r.tpl is not None and r.tpl[0] == b'{"id":"c1","choices":[{"index":0,"delta":{"content":"'
    assert r.fast is not None and r.fast[0] == b"data: " + r.tpl[0]
    r.on_data(b"data: " + delta_chunk({"content": " c"}) + b"\n\n", 102)
    assert r.tokens == 3 and [(e[0], e[4]) for e in events] == [(100, 1), (101, 1), (102, 1)]


def test_usage_that_disagrees_with_the_chunks_streamed_is_flagged():
    # 4 chunks with text; usage says 8 (over-claims: all asked), 2 (under-claims: short) or 4 (agrees)
    req = Request(3, 0, 21, 8)
    details = []
    for claimed in (8, 2, 4):
        usage = b'{"choices":[],"usage":{"prompt_tokens":21,"completion_tokens":%d}}' % claimed
        r, _ = feed(False, [chunk(False, f" w{i}") for i in range(4)] + [chunk(False, "", "length"), usage, b"[DONE]"])
        ev = terminal(r, req, None, [], 99)
        details.append((ev.kind, ev.tokens, ev.detail))
    assert details == [
        ("FINISH", 8, "usage_mismatch: usage says 8 completion tokens, 4 streamed; prompt_tokens=21"),
        (
            "FINISH",
            2,
            "short_output: got 2 of 8 tokens; usage_mismatch: usage says 2 completion tokens, 4 streamed; "
            "prompt_tokens=21",
        ),
        ("FINISH", 4, "short_output: got 4 of 8 tokens; prompt_tokens=21"),
    ]


def vllm_chat(texts: list[str]) -> list[bytes]:
    """A vLLM-shaped chat stream's payloads: a first chunk carrying `role` (and empty content), a chunk per
    text, the finish chunk, usage, [DONE]."""

    def delta(d: dict, finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": d, "logprobs": None, "finish_reason": finish}
        return orjson.dumps({"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 5, "choices": [choice]})

    usage = b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}' % len(texts)
    return (
        [delta({"role": "assistant", "content": ""})]
        + [delta({"content": t}) for t in texts]
        + [
            delta({"content": ""}, "length"),
            usage,
            b"[DONE]",
        ]
    )


def has_text(payload: bytes) -> bool:
    """A full parse of one chat payload: does it carry content (one token)?"""
    if payload == b"[DONE]":
        return False
    choices = orjson.loads(payload)["choices"]
    return bool(choices and choices[0]["delta"].get("content"))


def reference(reads: list[list[bytes]]) -> list[tuple[int, int]]:
    """The slow path by hand: every payload parsed; (read time, chunks with text in it) per read with any, the
    reads timed 100, 101, ... as the tests feed them."""
    counts = [sum(map(has_text, read)) for read in reads]
    return [(100 + i, k) for i, k in enumerate(counts) if k]


def test_a_first_chunk_carrying_role_leaves_the_rest_to_the_fast_path():
    # one event a read (a server streaming token by token): the role chunk is parsed (no text: it teaches
    # nothing), the first token chunk is parsed and learnt, and every later token chunk fits the learnt shape,
    # so it is counted unparsed; tokens and time stamps are those of parsing every chunk
    payloads = vllm_chat([" The", " cat", " sat", " on", " it"])
    events: list[tuple] = []
    r = Response(events.append, 7, 0, True, 1 << 20, 0, send_event=False)
    r.on_head(200, 10, {})
    for i, p in enumerate(payloads):
        r.on_data(b"data: " + p + b"\n\n", 100 + i)
        if i == 1:
            assert r.fast is not None and b'"role"' not in r.fast[0]
            assert all(_fits(b"data: " + q + b"\n\n", r.fast) for q in payloads[2:6])  # the rest: unparsed
    assert [(e[0], e[4]) for e in events] == reference([[p] for p in payloads]) == [(101 + i, 1) for i in range(5)]
    assert [e[2] for e in events] == ["FIRST_TOKEN"] + ["CHUNK"] * 4
    assert r.tokens == 5 and r.finish_reason == "length" and r.done


def test_a_whole_response_in_one_read_learns_from_its_first_token_chunk():
    # the client read the whole stream at once (a fast server, or the client fell behind): one event of all its
    # tokens at that read's time, as a full parse gives; the chunks after the first token fit the shape learnt
    # from it within the same read, and the same holds when the first token's read also held the role chunk
    payloads = vllm_chat([" a", " b", " c", " d"])
    stream = [b"data: " + p + b"\n\n" for p in payloads]
    events: list[tuple] = []
    r = Response(events.append, 7, 0, True, 1 << 20, 0, send_event=False)
    r.on_head(200, 10, {})
    r.on_data(b"".join(stream), 100)
    assert [(e[0], e[4]) for e in events] == reference([payloads]) == [(100, 4)] and events[0][2] == "FIRST_TOKEN"
    assert r.fast is not None and all(_fits(s, r.fast) for s in stream[2:5])
    assert r.tokens == 4 and r.done and r.usage["completion_tokens"] == 4
    events.clear()
    r = Response(events.append, 7, 0, True, 1 << 20, 0, send_event=False)
    r.on_head(200, 10, {})
    for i, read in enumerate((stream[:2], stream[2:4], stream[4:])):
        r.on_data(b"".join(read), 100 + i)
    assert (
        [(e[0], e[4]) for e in events]
        == reference([payloads[:2], payloads[2:4], payloads[4:]])
        == [(100, 1), (101, 2), (102, 1)]
    )


def reference_prefix(data: bytes, fast: tuple[bytes, bytes, int, int]) -> tuple[int, int]:
    """Event by event: how many whole learnt events `data` starts with (each checked alone), and their end."""
    n = pos = 0
    while True:
        end = data.find(b"\n\n", pos) + 2  # a learnt event holds no LF but its last two bytes
        if end < 2 or not _fits(data[pos:end], fast):
            return n, pos
        n, pos = n + 1, end


TEXT = st.lists(st.sampled_from(["a", " ", '"', "\\", "é", "\n", '","x":"', "}]}"]), max_size=4).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(TEXT, st.just(None)), min_size=1, max_size=10), st.booleans())
def test_learnt_events_at_the_start_of_a_read_are_counted_as_one_by_one(texts, chat):
    # texts with quotes, escapes, LFs, non-ASCII or pieces of the suffix are not plain; None is a finish chunk
    r, _ = feed(chat, [chunk(chat, " w")])
    events = [b"data: " + chunk(chat, t, None if t is not None else "stop") + b"\n\n" for t in texts]
    data = b"".join(events)
    assert _plain_prefix(data, r.fast) == reference_prefix(data, r.fast)
