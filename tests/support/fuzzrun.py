"""Run fuzz cases through `kvbench`'s real entry point, one forked child per case, and judge each outcome.

Run as a script (`python tests/support/fuzzrun.py --per-family 25`): it imports kvbench once, then forks a child per
case so a case costs milliseconds, a hang is killed at its deadline, and no case can disturb another.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support.fuzzcases import SAMPLE, Case, cases  # noqa: E402

HANG_S = 30.0


@dataclass(frozen=True)
class Outcome:
    family: str
    argv: list[str]
    code: int | None  # None: killed at the deadline
    seconds: float
    stderr: str
    verdict: str  # ok | clean_error | traceback | messy_error | hang


def _child(argv: list[str], cwd: Path) -> None:
    from kvbench.cli.app import main

    os.chdir(cwd)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        f = os.open(cwd / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(f, fd)
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    sys.argv = ["kvbench", *argv]
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - an escaped exception is what the fuzz test looks for
        import traceback

        traceback.print_exc()
        code = 99
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_in_child(argv: list[str], cwd: Path, hang_s: float = HANG_S) -> tuple[int | None, float]:
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(argv, cwd)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), time.monotonic() - t0
        if time.monotonic() - t0 > hang_s:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None, time.monotonic() - t0
        time.sleep(0.005)


def judge(code: int | None, stderr: str) -> str:
    """ok (exit 0); clean_error (exit 1/2 whose only non-warning stderr line is one `kvbench: error:` line)."""
    if code is None:
        return "hang"
    if "Traceback" in stderr or code == 99:
        return "traceback"
    if code == 0:
        return "ok"
    lines = [ln for ln in stderr.splitlines() if ln.strip() and "warning" not in ln.lower()]
    if code in (1, 2) and len(lines) == 1 and lines[0].startswith("kvbench: "):
        return "clean_error"
    return "messy_error"


def run_case(case: Case, workdir: Path, ref_run: Path) -> Outcome:
    cwd = Path(tempfile.mkdtemp(dir=workdir))
    for name, data in case.files:
        (cwd / name).write_bytes(data)
    argv = [str(ref_run) if a == "@RUN" else a for a in case.argv]
    code, seconds = run_in_child(argv, cwd)
    stderr = (cwd / "stderr").read_text(errors="replace") if (cwd / "stderr").exists() else ""
    return Outcome(case.family, argv, code, round(seconds, 3), stderr[-2000:], judge(code, stderr))


def reference_run(workdir: Path) -> Path:
    run = workdir / "ref"
    code, _ = run_in_child(
        ["replay", "--trace", str(SAMPLE), "--target", "sim", "-n", "60", "-q", "--out", str(run)], workdir, 120.0
    )
    if code != 0:
        raise SystemExit(f"fuzzrun: the reference run failed (exit {code})")
    return run


def _warm_imports() -> None:
    """Import every kvbench module once in this parent, so a forked case starts warm (imports only: no threads)."""
    import importlib
    import pkgutil

    import kvbench

    for mod in pkgutil.walk_packages(kvbench.__path__, "kvbench."):
        if not mod.name.startswith("kvbench.devservers"):
            importlib.import_module(mod.name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-family", type=int, default=25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print every outcome as JSON lines")
    args = ap.parse_args()
    _warm_imports()

    with tempfile.TemporaryDirectory(prefix="kvbench-fuzz-") as tmp:
        workdir = Path(tmp)
        ref = reference_run(workdir)
        outcomes = [run_case(c, workdir, ref) for c in cases(args.seed, args.per_family)]
    if args.json:
        for o in outcomes:
            print(json.dumps(asdict(o)))
        return
    verdicts = Counter(o.verdict for o in outcomes)
    print(f"{len(outcomes)} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())))
    for o in outcomes:
        if o.verdict in ("traceback", "hang", "messy_error"):
            print(
                f"{o.verdict} [{o.family}] {' '.join(o.argv)[:160]} ({o.seconds}s)\n    {o.stderr.strip().splitlines()[-1:]}"
            )


if __name__ == "__main__":
    main()
