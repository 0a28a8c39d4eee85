"""The `kvbench` command line: the typer app and one module per command group."""

from kvbench.cli.app import main

__all__ = ["main"]
