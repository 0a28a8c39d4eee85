"""Turn a workload spec (or a bare trace file) into a Workload: read or generate, re-time, mix, shape."""

from __future__ import annotations

import hashlib
import heapq
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from kvbench.config import ConfigError
from kvbench.records import Request
from kvbench.units import MOONCAKE_BLOCK_TOKENS
from kvbench.workload import servegen
from kvbench.workload.arrivals import ArrivalSpec, Seed, arrival_times_ns, iter_arrivals_ns
from kvbench.workload.csvtraces import read_azure, read_lengths
from kvbench.workload.dists import LengthSpec, sample_lengths
from kvbench.workload.inputs import check_file, file_digest
from kvbench.workload.mooncake import first_unsorted_line, read_mooncake, read_sorted
from kvbench.workload.sharegpt import read_counted, to_requests
from kvbench.workload.spec import WorkloadSpec
from kvbench.workload.stream import Workload, shape
from kvbench.workload.synth import SynthSpec, finalize, think_times_ns
from kvbench.workload.synth import draw as synth_draw
from kvbench.workload.synth import requests as synth_requests
from kvbench.workload.tokens import TokenizeEndpoint, Tokenizer, counts_source, tokenizer_file

# Outputs for workloads whose source has none: lognormal through the Azure 2023 conversation trace's output
# p50 129 / p99 601 tokens (SOURCES.md §2), the public record of production chat reply lengths we have.
CHAT_OUTPUT = LengthSpec("lognormal", p50=129, p99=601, max=4096)
UNTIMED_ARRIVALS = ArrivalSpec("poisson", 1.0)  # files without timestamps, unless the spec says otherwise
MIX_ID_SHIFT = 52  # component i's block ids are XORed with i << 52 so components never share a block


def detect_format(path: Path) -> str:
    """mooncake | azure | sharegpt | lengths, from the first bytes (the suffix is not trusted)."""
    check_file(path)
    with open(path, "rb") as f:
        head = f.read(4096)
    if not head.strip():
        raise ConfigError(f"{path}: empty file, expected a trace")
    if b"\0" in head:
        raise ConfigError(f"{path}: binary data, expected a text trace (JSONL, JSON or CSV)")
    head = head.removeprefix(b"\xef\xbb\xbf").lstrip()  # a UTF-8 BOM, as spreadsheet exports write
    first = head[:1]
    if first == b"{":
        return "mooncake"
    if first == b"[":
        return "sharegpt"
    header = head.split(b"\n", 1)[0].decode("utf-8", "replace")
    if "TIMESTAMP" in header and "ContextTokens" in header:
        return "azure"
    if "num_prefill_tokens" in header:
        return "lengths"
    raise ConfigError(
        f"{path}:1: unknown trace format: expected Mooncake JSONL, ShareGPT JSON, an Azure CSV "
        f"(TIMESTAMP,ContextTokens,GeneratedTokens) or a length CSV (num_prefill_tokens,num_decode_tokens)"
    )


def _warn_sorted(path: Path, line: int) -> None:
    print(
        f"kvbench: warning: {path}:{line}: timestamps go back in time; replaying the trace stably sorted by timestamp",
        file=sys.stderr,
    )


def _sorted_list(reqs: list[Request], path: Path) -> list[Request]:
    """The documented repair for any materialised trace: stable sort (warned once), offsets from the earliest."""
    bad = next((i for i in range(1, len(reqs)) if reqs[i].arrival_ns < reqs[i - 1].arrival_ns), None)
    if bad is None:
        return reqs
    _warn_sorted(path, bad + 2)  # data row i (0-based) is line i + 2 below the header, without blank lines
    t0 = min(r.arrival_ns for r in reqs)
    return finalize([r._replace(arrival_ns=r.arrival_ns - t0) for r in reqs])


def mooncake_make(path: Path, name: str = "") -> Callable[[], Iterator[Request]]:
    """Streaming when the timestamps are sorted (a cheap scan checks), else the documented sort repair."""
    line = first_unsorted_line(path)
    if line is None:
        return lambda: read_mooncake(path, MOONCAKE_BLOCK_TOKENS, name)
    _warn_sorted(path, line)
    return lambda: read_sorted(path, MOONCAKE_BLOCK_TOKENS, name)


def trace_requests(spec: WorkloadSpec, fmt: str, seed: Seed) -> Callable[[], Iterator[Request]]:
    """A fresh-iterator factory for a trace file of format `fmt` (arrivals as recorded or generated)."""
    path = Path(spec.path)
    generated = spec.arrivals if spec.arrivals is not None and spec.arrivals.process != "trace" else None
    retime = generated is not None
    arrivals = generated or UNTIMED_ARRIVALS
    if fmt == "mooncake":
        make = mooncake_make(check_file(path), spec.name)
    elif fmt == "azure":
        reqs = tuple(r._replace(workload=spec.name) for r in _sorted_list(read_azure(check_file(path)), path))
        make = lambda: iter(reqs)  # noqa: E731
    elif fmt == "lengths":
        pairs = read_lengths(check_file(path))[: spec.requests]
        reqs = tuple(Request(i, 0, a, b, workload=spec.name) for i, (a, b) in enumerate(pairs))
        make, retime = (lambda: iter(reqs)), True
    else:
        sessions = read_counted(check_file(path), spec.tokenizer)
        rng = np.random.default_rng(seed)
        starts = arrival_times_ns(arrivals, rng, len(sessions))
        n_turns = sum(len(s) for s in sessions)
        out, reason = sample_lengths(spec.output or CHAT_OUTPUT, rng, n_turns, "output")
        reqs = tuple(
            to_requests(
                sessions, starts, out, reason, think_times_ns(spec.sessions, rng, n_turns), spec.name, spec.requests
            )
        )
        return lambda: iter(reqs)
    return retimed(make, arrivals, seed) if retime else make


def retimed(
    make: Callable[[], Iterator[Request]], arrivals: ArrivalSpec, seed: Seed
) -> Callable[[], Iterator[Request]]:
    """Give the stream's session starts (a session's first request, or a request outside sessions), in order, the
    arrival times of a generated process (streaming): the process's rate is the rate of session starts. A later
    turn is released when the previous one ends (plus its think time), so it keeps the latest start's time, which
    only orders the stream."""

    def gen() -> Iterator[Request]:
        times, started, t = iter_arrivals_ns(arrivals, seed), set(), 0
        for r in make():
            if r.session_id < 0 or r.session_id not in started:
                started.add(r.session_id)
                t = next(times)
            yield r._replace(arrival_ns=t)

    return gen


def spec_digest(spec: WorkloadSpec) -> str:
    src = Path(spec.source)  # a spec file, or none for a workload made from command-line options
    h = hashlib.sha256(src.read_bytes() if src.is_file() else repr(spec).encode())
    p = Path(spec.path) if spec.path else None
    if p is not None and p.is_file():
        h.update(file_digest(p).encode())
    for c in spec.components:
        h.update(spec_digest(c.spec).encode())
    return _with_tokenizer(h.hexdigest()[:16], spec.tokenizer)


def _with_tokenizer(digest: str, tokenizer: Tokenizer) -> str:
    """A digest that also changes with the tokenizer counting the tokens."""
    if not tokenizer:
        return digest
    if isinstance(tokenizer, TokenizeEndpoint):
        return hashlib.sha256((digest + tokenizer.describe() + tokenizer.model).encode()).hexdigest()[:16]
    return hashlib.sha256((digest + file_digest(tokenizer_file(tokenizer))).encode()).hexdigest()[:16]


def build(spec: WorkloadSpec, seed: Seed) -> Workload:
    """The Workload a spec describes, deterministic for `seed`."""
    make = _make(spec, seed)
    slo = dict(spec.slo_ms)
    w = Workload(spec.name, spec.source, spec_digest(spec), make, slo, tokens=_tokens(spec))
    if spec.kind == "trace" and (
        spec.time_scale != 1.0 or spec.start_s or spec.duration_s is not None or spec.requests is not None
    ):
        w = shape(w, spec.time_scale, spec.start_s, spec.duration_s, spec.requests)
    return w


def _tokens(spec: WorkloadSpec) -> str:
    """How a text trace's token counts were made (run.json's workload.tokens); "" where the source gives them."""
    if spec.kind != "trace" or (spec.format if spec.format != "auto" else detect_format(Path(spec.path))) != "sharegpt":
        return ""
    return counts_source(spec.tokenizer)


def _make(spec: WorkloadSpec, seed: Seed) -> Callable[[], Iterator[Request]]:
    if spec.kind == "trace":
        fmt = detect_format(Path(spec.path)) if spec.format == "auto" else spec.format
        return trace_requests(spec, fmt, seed)
    if spec.kind == "synthetic":
        if spec.requests is None and spec.duration_s is None:
            raise ConfigError(f"{spec.source}: kind = 'synthetic' needs `requests` or `duration_s`")
        synth = SynthSpec(
            spec.arrivals or UNTIMED_ARRIVALS,
            spec.input,
            spec.output or CHAT_OUTPUT,
            spec.prefix,
            spec.sessions,
            spec.requests,
            spec.duration_s,
        )
        draws = synth_draw(synth, seed)  # now, before the run's clock starts; the requests are built as taken
        return lambda: synth_requests(synth, draws, spec.name)
    if spec.kind == "servegen":
        reqs = tuple(
            servegen.generate(
                Path(spec.path),
                list(spec.clients) or None,
                spec.start_s,
                spec.duration_s if spec.duration_s is not None else 600.0,
                spec.rate_scale,
                seed,
                spec.name,
            )[: spec.requests]
        )
        return lambda: iter(reqs)
    return _mix(spec, seed)


def _component_stream(i: int, make: Callable[[], Iterator[Request]], n_comp: int, name: str) -> Iterator[Request]:
    mask = i << MIX_ID_SHIFT
    for r in make():
        ids = tuple(h ^ mask for h in r.hash_ids) if mask else r.hash_ids
        sid = r.session_id * n_comp + i if r.session_id >= 0 else -1
        yield r._replace(hash_ids=ids, session_id=sid, workload=name)


def _mix(spec: WorkloadSpec, seed: Seed) -> Callable[[], Iterator[Request]]:
    """Weighted mixture: each arrival of [arrivals] takes the next request of a component drawn by weight;
    without [arrivals], the components keep their own timelines and are merged (weights unused)."""
    comps = spec.components
    makes = [_make(c.spec, [seed, i]) for i, c in enumerate(comps)]
    n = len(comps)
    if spec.arrivals is None:

        def merged() -> Iterator[Request]:
            streams = [_component_stream(i, m, n, c.name) for i, (m, c) in enumerate(zip(makes, comps))]
            for k, r in enumerate(heapq.merge(*streams, key=lambda r: r.arrival_ns)):
                if spec.requests is not None and k >= spec.requests:
                    return
                yield r._replace(req_id=k)

        return merged
    weights = np.array([c.weight for c in comps], dtype=np.float64)
    if weights.sum() <= 0:
        raise ConfigError(f"{spec.source}: components: weights must not all be 0")
    times = arrival_times_ns(spec.arrivals, np.random.default_rng([seed, n]), spec.requests, spec.duration_s)
    picks = np.random.default_rng([seed, n, 1]).choice(n, size=len(times), p=weights / weights.sum()).tolist()

    def drawn() -> Iterator[Request]:
        streams = [_component_stream(i, m, n, c.name) for i, (m, c) in enumerate(zip(makes, comps))]
        for k, (t, i) in enumerate(zip(times.tolist(), picks)):
            r = next(streams[i], None)
            if r is None:
                return  # a component ran out: the mixture ends (documented)
            yield r._replace(req_id=k, arrival_ns=t)

    return drawn


def for_trace(path: str | Path, seed: Seed, tokenizer: Tokenizer = "") -> Workload:
    """A bare trace file as a workload (arrivals as recorded; Poisson 1 req/s where the file has none); `tokenizer`:
    a tokenizer.json counting a text trace's tokens."""
    p = check_file(path)
    spec = WorkloadSpec(name=p.stem, source=str(p), kind="trace", path=str(p), tokenizer=tokenizer)
    make = _make(spec, seed)
    return Workload(p.stem, str(p), _with_tokenizer(file_digest(p), tokenizer), make, tokens=_tokens(spec))
