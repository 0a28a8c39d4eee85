"""Nothing heavy after t0: a scraping profile's HTTP client (aiohttp) is imported by the target's prepare step."""

from __future__ import annotations

import subprocess
import sys

import pytest

# The prepare step of the openai target, in a fresh interpreter; `model` and `word_tokens` are given, so it
# probes no server. Prints whether aiohttp was imported before, and after, the step.
PROBE = """
import sys
from kvbench.target import TargetSpec
from kvbench.targets import registration

params = {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m", "word_tokens": 1.0,
          "scrape_interval_s": INTERVAL}
before = "aiohttp" in sys.modules
registration("openai").prepare(TargetSpec("openai", "t", params))
print(before, "aiohttp" in sys.modules)
"""


@pytest.mark.parametrize(("interval", "loaded"), [(1.0, True), (0.0, False)])
def test_prepare_step_imports_the_scraper_client_only_when_scraping(interval, loaded):
    code = PROBE.replace("INTERVAL", repr(interval))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", str(loaded)]
