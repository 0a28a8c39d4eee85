"""Output directories of runs and searches: refused when they already hold output, replaced whole with --overwrite.

Writing a run into a directory that holds another one mixes them (parts numbered from part-00000 again beside the
old ones, old side tables kept), so a non-empty directory is refused unless the user asks to replace it. Replacing
renames the old directory aside first, then deletes it: at no moment does the path hold half of each.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from kvbench.config import ConfigError


def is_run(path: Path) -> bool:
    """A run directory: it holds run.json (written before the first event)."""
    return (path / "run.json").is_file()


def check_out(out: Path, overwrite: bool, ours: Callable[[Path], bool] = is_run, what: str = "a run") -> None:
    """A one-line ConfigError unless `out` can take new output: it is absent or an empty directory, or (with
    `overwrite`) kvbench output that `ours` recognises. Nothing is changed here (see `claim`)."""
    if not out.exists() and not out.is_symlink():
        return
    if not out.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a directory")
    if not any(out.iterdir()):
        return
    if not overwrite:
        raise ConfigError(
            f"--out {out}: already holds {what if ours(out) else 'files'}; pass --overwrite to replace it "
            "or choose another directory (--resume is not supported)"
        )
    if not ours(out) or out.is_symlink():
        raise ConfigError(
            f"--out {out}: holds files that are not {what}; --overwrite replaces only kvbench output in a directory"
        )


def claim(out: Path, overwrite: bool, ours: Callable[[Path], bool] = is_run, what: str = "a run") -> Path:
    """Make `out` an empty directory for new output (checked as `check_out` does; an old run is renamed aside,
    then deleted) and return it."""
    check_out(out, overwrite, ours, what)
    if out.is_dir() and any(out.iterdir()):
        real = out.resolve()
        aside = real.with_name(f".{real.name}.replaced-{os.getpid()}")
        os.replace(real, aside)
        shutil.rmtree(aside)
    out.mkdir(parents=True, exist_ok=True)
    return out


def fresh(path: Path) -> Path:
    """`path`, or `path-2`, `path-3` ... the first that does not exist (a default directory never reuses one)."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def refuse_resume() -> None:
    """`--resume`: a run's stream position, sessions and target state are not saved, so a run cannot continue."""
    raise ConfigError(
        "--resume is not supported: a run cannot be continued; replay into a new --out or pass --overwrite"
    )
