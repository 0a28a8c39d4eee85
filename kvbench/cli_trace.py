"""Command-line signatures of the trace commands (placeholder until they land)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the kvbench app."""
