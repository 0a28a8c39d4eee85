"""--tokenizer server: token counts from the target's /tokenize (a real `kvbench serve` in its own process, whose
tokenizer is whitespace words), asked before the run; the estimate, with a warning, when there is none."""

from __future__ import annotations

import http.server
import json
import threading

import duckdb
import pytest
from support.cli import kvbench
from support.serve_proc import start_serve

from kvbench.devservers.llamacpp import stop
from kvbench.eventlog import table_glob
from kvbench.workload.servertokens import TokenizeEndpoint, count_all, probe
from kvbench.workload.sharegpt import block_ids, read_counted
from kvbench.workload.tokens import ESTIMATE_SOURCE, server_counter, tokens_label


@pytest.fixture(scope="module")
def serve_root():
    proc, url = start_serve("--target", "fixed:ttft_ms=1,itl_ms=1")
    try:
        yield url.removesuffix("/v1")
    finally:
        stop(proc)


def _chat(tmp_path, words: list[int]):
    data = tmp_path / "chat.json"
    convs = [
        {
            "id": str(i),
            "conversations": [{"from": "human", "value": " ".join(["w"] * n)}, {"from": "gpt", "value": "a b"}],
        }
        for i, n in enumerate(words)
    ]
    data.write_text(json.dumps(convs))
    return data


def test_probe_picks_the_body_shape_and_counts_distinct_texts(serve_root):
    ep = probe(serve_root + "/tokenize", {})
    assert ep == TokenizeEndpoint(serve_root + "/tokenize", (), "", "llama.cpp")
    assert count_all(ep, ["a b c", "a b c", "x"]) == {"a b c": 3, "x": 1}  # words; asked once per distinct text
    missing = probe(serve_root + "/no-such-path", {})
    assert isinstance(missing, str) and "HTTP 404" in missing


def test_server_blocks_are_512_tokens_at_the_measured_characters_per_token(serve_root):
    ep = probe(serve_root + "/tokenize", {})
    assert isinstance(ep, TokenizeEndpoint)
    text = " ".join(["abc"] * 1000)  # 3,999 characters, 1,000 words: 3.999 characters a token
    counter = server_counter(ep, [text])
    assert counter.count(text) == 1000 and counter.chars_per_token == pytest.approx(3.999)
    assert counter.block_ends(text) == [2047, 3999]  # round(512 x 3.999) = 2047
    assert block_ids(text[:2047] + "zz", counter)[0] == block_ids(text, counter)[0]  # a shared prefix, a shared id


def test_read_counted_asks_the_server(tmp_path, serve_root):
    ep = probe(serve_root + "/tokenize", {})
    assert isinstance(ep, TokenizeEndpoint)
    (session,) = read_counted(_chat(tmp_path, [5]), ep)
    # "User: w w w w w\n\n": 'User:' and 5 words; the reply "a b": 2
    assert [(t.input_tokens, t.output_tokens) for t in session] == [(6, 2)]


def _input_tokens(out) -> list[int]:
    q = f"SELECT input_tokens FROM read_parquet('{table_glob(out, 'requests')}') ORDER BY req_id"
    return [n for (n,) in duckdb.connect().execute(q).fetchall()]


def test_replay_counts_with_the_servers_tokenize(tmp_path, serve_root):
    data, out = _chat(tmp_path, [1, 2, 30]), tmp_path / "run"
    r = kvbench("replay", "--trace", str(data), "-t", serve_root + "/v1", "--tokenizer", "server", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert _input_tokens(out) == [2, 3, 31]  # the estimate would give ceil(len / 4): 3, 3, 17
    source = json.loads((out / "run.json").read_text())["workload"]["tokens"]
    assert source == f"server /tokenize (llama.cpp): {serve_root}/tokenize"
    assert f"token counts: tokenizer: {source}" in r.stdout
    summary = kvbench("summary", str(out))
    assert f"token counts: tokenizer: {source}" in summary.stdout


def test_replay_without_tokenize_warns_and_estimates(tmp_path, serve_root):
    data, out = _chat(tmp_path, [1, 2, 30]), tmp_path / "run"
    r = kvbench(
        "replay", "--trace", str(data), "-t", serve_root + "/v1", "--set", 'tokenize_path="/nope"',
        "--tokenizer", "server", "-o", str(out), "-q",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert f"warning: {serve_root}/nope: no token counts" in r.stderr and "estimated (chars/4)" in r.stderr
    assert _input_tokens(out) == [3, 3, 17]  # ceil(len / 4) of "User: w\n\n" and its kin: 9, 11, 67 characters
    assert json.loads((out / "run.json").read_text())["workload"]["tokens"] == ESTIMATE_SOURCE
    assert tokens_label(ESTIMATE_SOURCE) == "estimated (chars/4)"


def test_server_tokenizer_needs_an_http_target(tmp_path):
    data = _chat(tmp_path, [1])
    r = kvbench("replay", "--trace", str(data), "-t", "sim", "--tokenizer", "server", "-o", str(tmp_path / "r"))
    assert r.returncode != 0 and "--tokenizer server counts with an HTTP target's /tokenize" in r.stderr


class _VllmTokenize(http.server.BaseHTTPRequestHandler):
    """vLLM's /tokenize as its API documents it: `prompt` required (400 without it), whitespace words as tokens."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)  # type: ignore[attr-defined]
        if not isinstance(body.get("prompt"), str):
            status, out = 400, {"object": "error", "message": "Field required: prompt"}
        else:
            words = body["prompt"].split()
            status, out = 200, {"count": len(words), "tokens": list(range(len(words))), "max_model_len": 4096}
        data = json.dumps(out).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def test_a_vllm_shaped_tokenize_is_asked_with_prompt_and_model():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _VllmTokenize)
    srv.bodies = []  # type: ignore[attr-defined]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/tokenize"
        ep = probe(url, {"Authorization": "Bearer k"}, "m")
        assert isinstance(ep, TokenizeEndpoint) and ep.shape == "vllm"
        assert count_all(ep, ["a b c"]) == {"a b c": 3}
    finally:
        srv.shutdown()
    first, *_, last = srv.bodies  # type: ignore[attr-defined]
    assert "prompt" not in first  # the llama.cpp body first, refused with 400
    assert last == {"prompt": "a b c", "add_special_tokens": False, "model": "m"}
