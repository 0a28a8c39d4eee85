"""Headless Chromium for the report tests: a page's DOM after it loaded (with its console), and a screenshot."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def _chromium(profile: Path) -> list[str]:
    exe = shutil.which("chromium")
    assert exe, "Debian's chromium is needed: apt-get install -y chromium"
    return [
        exe,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
    ]


def dump_dom(page: Path, profile: Path) -> subprocess.CompletedProcess:
    """The DOM Chromium built from `page` (stdout) and its log (stderr: console messages, script errors)."""
    return subprocess.run(
        [*_chromium(profile), "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )


def screenshot(page: Path, profile: Path, out: Path, size: str = "1200,1600") -> Path:
    """`page` as a PNG of `size` (width,height in CSS pixels) at `out`."""
    args = [*_chromium(profile), "--hide-scrollbars", f"--window-size={size}", f"--screenshot={out}", page.as_uri()]
    subprocess.run(args, capture_output=True, timeout=120, check=True)
    return out
