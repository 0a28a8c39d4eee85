"""`--help` of every command: closed sets list their values, defaults stay visible, flags carry no type."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

COMMANDS = [
    ("replay",),
    ("kv-transfer",),
    ("summary",),
    ("sql",),
    ("compare",),
    ("gate",),
    ("report",),
    ("goodput",),
    ("sweep",),
    ("timeline",),
    ("serve",),
    ("trace", "info"),
    ("trace", "gen"),
]


def help_text(*command: str) -> str:
    r = subprocess.run(
        [sys.executable, "-c", "from kvbench.cli.app import main; main()", *command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_flags_show_no_type(command):
    assert "<bool>" not in help_text(*command)


@pytest.mark.parametrize(
    ("command", "values"),
    [
        (("report",), "<html|md>"),
        (("goodput",), "<scale|poisson>"),
        (("kv-transfer",), "<layer-block|layer|request>"),
    ],
)
def test_closed_sets_list_their_values(command, values):
    assert values in help_text(*command)


def test_descriptive_defaults_are_not_eaten_as_markup():
    # rich reads "[default: ...]" as a style tag and drops it when it is written into the help string.
    assert "[default: (reports/<run-id>/)]" in help_text("replay")
    assert "[default: (the workload's, from run.json)]" in help_text("report")
    assert "kvbench[ray]" in help_text("sweep")


def test_replay_options_sit_in_panels():
    text = help_text("replay")
    panels = [line.split("─ ")[1].split(" ─")[0] for line in text.splitlines() if line.startswith("╭─ ")]
    assert panels == ["Options", "Workload", "Target", "Timing", "Output"]
