"""kvbench.cli.app.COMMANDS names each command with the one module that registers it (`kvbench NAME` registers
that module alone)."""

from __future__ import annotations

import subprocess
import sys

import typer.main

from kvbench.cli.app import COMMANDS, MODULES, build_app


def _names(app) -> set[str]:
    return set(typer.main.get_command(app).commands)


def test_every_module_registers_exactly_the_commands_the_table_gives_it():
    for module in MODULES:
        assert _names(build_app((module,))) == {name for name, m in COMMANDS.items() if m == module}


def test_the_full_app_has_every_command_of_the_table_and_no_other():
    assert _names(build_app()) == set(COMMANDS)


def test_a_command_runs_without_importing_the_other_commands_modules(tmp_path):
    code = (
        "import sys; from kvbench.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('kvbench.cli.') and m != 'kvbench.cli.app'))"
    )
    args = ["replay", "--trace", str(tmp_path / "missing.jsonl"), "--target", "sim", "-q"]
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=tmp_path)
    assert "no such file" in done.stderr
    loaded = eval(done.stdout.strip().splitlines()[-1])
    assert "kvbench.cli.replay" in loaded and not {
        "kvbench.cli.metrics",
        "kvbench.cli.sweep",
        "kvbench.cli.trace",
    } & set(loaded)
