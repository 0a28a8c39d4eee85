"""Seeded malformed inputs for every reader, spec and option family of the CLI (the fuzz test's corpus)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

WEIRD_NUMBERS = ("nan", "inf", "-inf", "1e308", "-1e308", "1e-308", "1e-10", "-1", "0", "abc", "", "1" * 400)
WEIRD_JSON = (None, -1, 0, 1e308, "x", [], {}, True, -(2**70), "NaN", [1.5], "9" * 5000)
SAMPLE = Path(__file__).resolve().parents[2] / "traces" / "kimi-sample.jsonl"


@dataclass(frozen=True)
class Case:
    """One CLI invocation; `files` are written into the case's directory first (name -> bytes)."""

    family: str
    argv: tuple[str, ...]
    files: tuple[tuple[str, bytes], ...] = ()


def _mooncake_lines(rng: random.Random) -> list[dict]:
    lines = [json.loads(x) for x in SAMPLE.read_text().splitlines()[:12]]
    return lines


def _mutate_record(rng: random.Random, rec: dict) -> str:
    key = rng.choice([*rec.keys(), "extra"])
    action = rng.randrange(4)
    if action == 0:
        rec.pop(key, None)
    elif action == 1:
        rec[key] = rng.choice(WEIRD_JSON)
    elif action == 2:
        rec[key] = "__RAW__"
    else:
        rec[key] = [rng.choice(WEIRD_JSON) for _ in range(rng.randrange(3))]
    text = json.dumps(rec)
    raw = rng.choice(("NaN", "Infinity", "1" * 4400, "-0", "1e400", '"\\ud800"'))
    return text.replace('"__RAW__"', raw)


def _replay(name: str, n: int = 20) -> tuple[str, ...]:
    return ("replay", "--trace", name, "--target", "sim", "-q", "--out", "run", "-n", str(n))


def mooncake(rng: random.Random) -> Case:
    recs = _mooncake_lines(rng)
    lines = [json.dumps(r) for r in recs]
    kind = rng.randrange(6)
    if kind <= 2:
        i = rng.randrange(len(lines))
        lines[i] = _mutate_record(rng, recs[i])
    elif kind == 3:
        i = rng.randrange(len(lines))
        lines[i] = lines[i][: rng.randrange(len(lines[i]))]
    elif kind == 4:
        lines.append(rng.choice(("\x00" * 1000, " " * 5000, "{" * 20000, "[]", "null", "\ufeff{}")))
    else:
        lines = [rng.choice(("", "\n\n", "{}", '{"timestamp": 0}'))]
    return Case("mooncake", _replay("t.jsonl"), (("t.jsonl", "\n".join(lines).encode("utf-8", "surrogatepass")),))


def azure(rng: random.Random) -> Case:
    rows = ["2023-11-16 18:15:46.6805900,374,44", "2023-11-16 18:15:50.9951690,396,109"]
    bad = rng.choice(
        (
            "9999-12-31 23:59:59.9999999,10,10",
            "0001-01-01 00:00:00.0000000,10,10",
            "garbage,10,10",
            "2023-11-16 18:15:51.0000000,-5,10",
            "2023-11-16 18:15:51.0000000,1e308,10",
            "2023-11-16 18:15:51.0000000," + "9" * 200_000 + ",1",
            '"' + "x" * 140_000 + '",1,1',
            "2023-11-16 18:15:51.0000000,10",
            "2023-11-16 18:15:51.0000000,10,10,10",
            "",
        )
    )
    rows.insert(rng.randrange(3), bad)
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n"
    return Case("azure", _replay("a.csv"), (("a.csv", text.encode()),))


def sharegpt(rng: random.Random) -> Case:
    good = {"id": "a", "conversations": [{"from": "human", "value": "hi there"}, {"from": "gpt", "value": "hello"}]}
    choice = rng.randrange(6)
    if choice == 0:
        text = "[" * 100_000 + "]" * 100_000
    elif choice == 1:
        text = json.dumps([{"id": rng.choice(WEIRD_JSON), "conversations": rng.choice(WEIRD_JSON)}])
    elif choice == 2:
        text = json.dumps(
            [good, {"conversations": [{"from": rng.choice(WEIRD_JSON), "value": rng.choice(WEIRD_JSON)}]}]
        )
    elif choice == 3:
        text = json.dumps([good])[:-3]
    elif choice == 4:
        text = json.dumps([good, rng.choice(WEIRD_JSON)])
    else:
        text = "[]"
    return Case("sharegpt", _replay("s.json"), (("s.json", text.encode()),))


def length_csv(rng: random.Random) -> Case:
    rows = ["100,10", "200,20"]
    rows.insert(rng.randrange(3), rng.choice(("x,1", "-1,5", "1e400,1", "5", "", "1,2,3", "9" * 5000 + ",1")))
    text = "num_prefill_tokens,num_decode_tokens\n" + "\n".join(rows) + "\n"
    return Case("length_csv", _replay("l.csv"), (("l.csv", text.encode()),))


SPEC_BASE = """kind = "synthetic"
requests = 30
[arrivals]
process = "poisson"
rate = 3.0
[input]
dist = "lognormal"
p50 = 200
p99 = 800
[output]
dist = "lognormal"
p50 = 50
p99 = 200
[slo]
ttft_ms = 2000.0
"""
SPEC_KEYS = ("requests", "rate", "p50", "p99", "ttft_ms", "kind", "process", "dist")
TOML_VALUES = ("nan", "inf", "-inf", "-1", "0", "1e308", "[]", '"x"', "1" * 4300, "{}", "true", "1.5")


def spec(rng: random.Random) -> Case:
    lines = SPEC_BASE.splitlines()
    key = rng.choice(SPEC_KEYS)
    idx = [i for i, ln in enumerate(lines) if ln.startswith(key + " ")]
    i = rng.choice(idx)
    lines[i] = f"{key} = {rng.choice(TOML_VALUES)}"
    if rng.random() < 0.2:
        lines.insert(rng.randrange(len(lines)), rng.choice(("bogus = 1", "[bogus]", "kind = ", "= 3")))
    argv = ("replay", "--workload", "w.toml", "--target", "sim", "-q", "--out", "run", "-n", "20")
    return Case("spec", argv, (("w.toml", "\n".join(lines).encode()),))


REPLAY_OPTIONS = ("--duration", "--time-scale", "--start", "--rate", "--concurrency", "--max-requests", "--seed")


def options(rng: random.Random) -> Case:
    argv = ["replay", "--trace", str(SAMPLE), "--target", "sim", "-q", "--out", "run"]
    for opt in rng.sample(REPLAY_OPTIONS, rng.randrange(1, 3)):
        argv += [opt, rng.choice(WEIRD_NUMBERS)]
    if "--max-requests" not in argv:
        argv += ["-n", "20"]
    return Case("options", tuple(argv))


OVERRIDE_KEYS = (
    "pools.prefill.instances",
    "pools.decode.instances",
    "pools.prefill.tp",
    "router.name",
    "model",
    "gpu",
    "pools.decode.max_batch",
    "token_budget",
    "bogus.key",
    "",
)


def overrides(rng: random.Random) -> Case:
    value = rng.choice((*WEIRD_NUMBERS, "10000000", "[1,2]", "{a=1}", '"'))
    argv = (
        "replay",
        "--trace",
        str(SAMPLE),
        "--target",
        "sim:pd-2p2d",
        "-q",
        "--out",
        "run",
        "-n",
        "20",
        "--set",
        f"{rng.choice(OVERRIDE_KEYS)}={value}",
    )
    return Case("overrides", argv)


def slo(rng: random.Random) -> Case:
    text = rng.choice(
        (
            "ttft=nan",
            "ttft=inf",
            "ttft=-1",
            "tpot=",
            "=5",
            "ttft=1e308",
            "x=1",
            "ttft=1,ttft=2",
            "ttft:abc",
            ",,,",
            "ttft=" + "9" * 400,
        )
    )
    command = rng.choice((("summary", "@RUN"), ("compare", "@RUN", "@RUN")))
    return Case("slo", (*command, "--slo", text))


def baseline(rng: random.Random) -> Case:
    doc = rng.choice(
        (
            "[" * 50_000,
            "{}",
            '{"metrics": []}',
            '{"metrics": {"ttft_ms": "x"}}',
            "null",
            '{"metrics": {"ttft_ms": {"p50": "a"}}}',
            '{"metrics": {"ttft_ms": {"p50": NaN}}}',
            "",
            "\x00",
        )
    )
    command = rng.choice((("compare", "base.json", "@RUN"), ("gate", "--baseline", "base.json", "--candidate", "@RUN")))
    return Case("baseline", command, (("base.json", doc.encode()),))


def rules(rng: random.Random) -> Case:
    body = rng.choice(
        (
            '[[rule]]\nmetric = "ttft_ms"\ntolerance_pct = nan',
            "[[rule]]\nmetric = 5",
            '[[rule]]\nmetric = "nope"',
            "rule = 3",
            '[[rule]]\nmetric = "ttft_ms"\nstatistic = "p101"',
            '[[rule]]\nmetric = "ttft_ms"\nmax = "x"',
            "[[rule]]",
            "garbage ===",
        )
    )
    return Case(
        "rules",
        ("gate", "--baseline", "@RUN", "--candidate", "@RUN", "--rules", "g.toml"),
        (("g.toml", body.encode()),),
    )


def kv_transfer(rng: random.Random) -> Case:
    argv = [
        "kv-transfer",
        "-m",
        rng.choice(("Llama-3.1-8B", "nope", "", "x" * 300)),
        "-n",
        rng.choice(("7500", *WEIRD_NUMBERS)),
    ]
    if rng.random() < 0.5:
        argv += ["--granularity", rng.choice(("layer", "block", "x", ""))]
    return Case("kv_transfer", tuple(argv))


def paths(rng: random.Random) -> Case:
    name = rng.choice(("x" * 300 + ".jsonl", "missing.jsonl", "dir", "/dev/null", "o'brien\";--.jsonl"))
    return Case("paths", _replay(name))


PROFILE_BASE = """kind = "sim"
model = "Llama-3.1-8B"
gpus_per_node = 8
[engine]
token_budget = 8192
max_running = 256
block_tokens = 16
[pools.prefill]
role = "prefill"
instances = 2
gpu = "H100"
[pools.decode]
role = "decode"
instances = 2
gpu = "H100"
[router]
name = "least_loaded"
[transfer]
link = "roce-mooncake"
granularity = "layer"
[tiers.dram]
capacity_tokens = "3M"
link = "pcie5"
"""


def profile(rng: random.Random) -> Case:
    """A simulator preset with one value replaced (or a stray key or table added)."""
    lines = PROFILE_BASE.splitlines()
    idx = [i for i, ln in enumerate(lines) if " = " in ln]
    i = rng.choice(idx)
    key = lines[i].split(" = ")[0]
    value = rng.choice((*TOML_VALUES, "10000000", '"nope"', "-5"))
    lines[i] = f"{key} = {value}"
    if rng.random() < 0.2:
        lines.insert(rng.randrange(len(lines)), rng.choice(("bogus = 1", "[pools.x]", "[bogus]", "kind = []")))
    argv = ("replay", "--trace", str(SAMPLE), "--target", "p.toml", "-q", "--out", "run", "-n", "20")
    return Case("profile", argv, (("p.toml", "\n".join(lines).encode()),))


FAMILIES: dict[str, Callable[[random.Random], Case]] = {
    f.__name__: f
    for f in (
        mooncake,
        azure,
        sharegpt,
        length_csv,
        spec,
        profile,
        options,
        overrides,
        slo,
        baseline,
        rules,
        kv_transfer,
        paths,
    )
}


def cases(seed: int, per_family: int) -> Iterator[Case]:
    """`per_family` cases of every family, deterministic for `seed`."""
    for name, make in FAMILIES.items():
        rng = random.Random(f"{seed}:{name}")
        for _ in range(per_family):
            yield make(rng)
