"""Options shared by several commands, the closed sets offered as Enum choices, and the help panels they sit in."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

# Help panels: `--help` groups a command's options under these titles.
WORKLOAD, TARGET, TIMING, OUTPUT = "Workload", "Target", "Timing", "Output"


class ReportFormat(StrEnum):
    html = "html"
    md = "md"


class GoodputArrivals(StrEnum):
    scale = "scale"
    poisson = "poisson"


SLO_HELP = "SLO thresholds in ms, vLLM keys plus Mooncake's tbt: e.g. ttft=200,tpot=50,e2el=5000,tbt=100"

Trace = Annotated[
    Path | None,
    typer.Option(
        "--trace",
        help="Trace file: Mooncake/Kimi JSONL, Azure CSV, ShareGPT JSON, length CSV.",
        rich_help_panel=WORKLOAD,
    ),
]
WorkloadRef = Annotated[
    str | None,
    typer.Option(
        "--workload", "-w", help="Workload spec: a name in workloads/ or a TOML path.", rich_help_panel=WORKLOAD
    ),
]
Overrides = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Override a target profile field, e.g. --set router.name=random (repeatable).",
        rich_help_panel=TARGET,
    ),
]
