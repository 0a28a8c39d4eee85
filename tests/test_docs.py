"""The documentation still runs: the README tour executes, relative links resolve, documented options exist.

The tour (the first bash block under "## A tour of the commands") is run command by command with the installed
`kvbench`, in a temporary directory holding the repo's `traces/` and committed `reports/`; a command ending in `&` is the
background server: it is started on a free port, and its URL replaces the README's http://127.0.0.1:8000/v1.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest

from kvbench.devservers.llamacpp import stop

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = [README, *sorted((REPO / "docs").glob("*.md"))]
SERVER_URL = "http://127.0.0.1:8000/v1"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M)


def kvbench_exe() -> str:
    beside = Path(sys.executable).with_name("kvbench")
    exe = str(beside) if beside.exists() else shutil.which("kvbench")
    assert exe, "the kvbench command is not installed (pip install -e .)"
    return exe


def logical_lines(block: str) -> list[str]:
    """The block's lines with backslash continuations joined; blank and comment-only lines dropped."""
    out, current = [], ""
    for line in block.splitlines():
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        if current.strip() and not current.lstrip().startswith("#"):
            out.append(" ".join(current.split()))
        current = ""
    return out


def tour_commands() -> list[str]:
    tour = README.read_text().split("## A tour of the commands", 1)[1]
    return logical_lines(FENCE.search(tour).group(1))


def _start_server(exe: str, args: list[str], cwd: Path) -> tuple[subprocess.Popen, str]:
    assert args[args.index("--port") + 1] == "8000", "the tour's server listens on port 8000"
    args[args.index("--port") + 1] = "0"  # a free port: CI may run other servers
    proc = subprocess.Popen([exe, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = proc.stdout.readline().strip()  # its first line; EOF (an empty line) if it exits
    if not url.startswith("http://"):
        stop(proc)
        raise AssertionError(f"kvbench {' '.join(args)} did not start: {url!r} {proc.stderr.read()}")
    return proc, url


def test_tour_is_kvbench_commands():
    commands = tour_commands()
    assert len(commands) >= 15
    assert all(shlex.split(c, comments=True)[0] == "kvbench" for c in commands), commands
    assert sum(c.endswith("&") for c in commands) == 1 and any(SERVER_URL in c for c in commands)


def test_readme_tour_runs(tmp_path):
    (tmp_path / "traces").symlink_to(REPO / "traces")
    shutil.copytree(REPO / "reports" / "baselines", tmp_path / "reports" / "baselines")  # not the local runs beside
    shutil.copy(REPO / "reports" / "gates.toml", tmp_path / "reports")
    exe, server, url = kvbench_exe(), None, SERVER_URL
    try:
        for command in tour_commands():
            args = shlex.split(command, comments=True)[1:]
            if args[-1] == "&":
                server, url = _start_server(exe, args[:-1], tmp_path)
                continue
            args = [url if a == SERVER_URL else a for a in args]
            r = subprocess.run(
                [exe, *args], cwd=tmp_path, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
            )
            assert r.returncode == 0, f"{command}\nexit {r.returncode}\n{r.stderr[-3000:]}"
    finally:
        if server is not None:
            stop(server)
    assert len((tmp_path / "kimi.jsonl").read_text().splitlines()) == 300
    for out in ("report.html", "summary.md", "gate.md", "gate.xml", "goodput.html", "pd-trace.json"):
        assert (tmp_path / out).stat().st_size > 0, out
    assert '"status": "complete"' in (tmp_path / "runs" / "http" / "run.json").read_text()


def _links(doc: Path) -> list[str]:
    text = FENCE.sub("", doc.read_text())
    return [t.split("#", 1)[0] for t in LINK.findall(text) if not re.match(r"[a-z]+:|#", t)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc):
    missing = [t for t in _links(doc) if not (doc.parent / t).exists()]
    assert not missing, f"{doc.name}: links to missing files: {missing}"


def doc_commands() -> list[tuple[str, list[str]]]:
    """(page, words) of every `kvbench ...` and `python -m kvbench...` command in the docs' code blocks."""
    found = []
    for doc in DOCS:
        for block in FENCE.findall(doc.read_text()):
            for line in logical_lines(block):
                for part in re.split(r"&&|\|", re.sub(r"\s#\s.*$", "", line)):
                    words = part.replace("[", " ").replace("]", " ").split()
                    if words[:1] == ["kvbench"] or (words[:2] == ["python", "-m"] and words[2].startswith("kvbench")):
                        found.append((doc.name, words))
    return found


def _command_path(words: list[str]) -> tuple[str, ...]:
    """The words naming the (sub)command: `kvbench replay`, `kvbench trace info`, `python -m MODULE SUB`."""
    n = 4 if words[0] == "python" else 3 if words[1] == "trace" else 2
    return tuple(words[:n])


@cache
def help_text(*path: str) -> str:
    argv = [sys.executable, *path[1:]] if path[0] == "python" else [kvbench_exe(), *path[1:]]
    r = subprocess.run(
        [*argv, "--help"], capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "300"}
    )
    assert r.returncode == 0, f"{' '.join(path)} --help: {r.stderr}"
    return r.stdout


def test_documented_commands_and_options_exist():
    bad = []
    for page, words in doc_commands():
        path = _command_path(words)
        text = help_text(*path)
        options = sorted({w.split("=", 1)[0] for w in words[len(path) :] if w.startswith("--")} - {"--help"})
        bad += [f"{page}: {' '.join(words)}: {o}" for o in options if o not in text]
    assert len(doc_commands()) >= 30
    assert not bad, "\n".join(bad)


PATH_REF = re.compile(r"`((?:kvbench|tests|adapters|workloads|reports|traces|docs)/[^`\s]*)`")
MODULE_REF = re.compile(r"\bkvbench(?:\.[a-z_]+)+")


def _placeholder(path: str) -> bool:
    """`adapters/NAME.toml`, `reports/<run-id>/`: a pattern for the reader, not a file."""
    return "<" in path or any(part.split(".")[0].isupper() for part in path.split("/"))


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_named_files_and_modules_exist(doc):
    text = doc.read_text()
    paths = [p for p in PATH_REF.findall(text) if not _placeholder(p)]
    missing = [p for p in paths if not any(REPO.glob(p.split("::")[0].rstrip("/")))]  # tests/x.py::test_y too
    modules = {m for m in MODULE_REF.findall(text) if "." in m}
    unknown = [m for m in sorted(modules) if not _importable(m)]
    assert not missing and not unknown, f"{doc.name}: no such file {missing}, no such module or name {unknown}"


def _importable(dotted: str) -> bool:
    """A module, or a name inside one (`kvbench.analysis.metrics.timeseries`)."""
    try:
        if importlib.util.find_spec(dotted) is not None:
            return True
    except ModuleNotFoundError:  # the parent is a module, not a package: `dotted` may name something in it
        pass
    module, _, name = dotted.rpartition(".")
    try:
        return hasattr(importlib.import_module(module), name)
    except ModuleNotFoundError:
        return False


def test_readme_workload_spec_is_the_shipped_one_abridged():
    shown = tomllib.loads(re.search(r"^```toml\n(.*?)^```", README.read_text(), re.S | re.M).group(1))
    shipped = tomllib.loads((REPO / "kvbench" / "presets" / "workloads" / "kimi-sample.toml").read_text())

    def subset(a: dict, b: dict) -> bool:
        return all(k in b and (subset(v, b[k]) if isinstance(v, dict) else v == b[k]) for k, v in a.items())

    assert subset(shown, shipped)
