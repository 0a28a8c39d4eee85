"""`kvbench trace info` (statistics of a trace or workload) and `kvbench trace gen` (write a workload as JSONL)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.command import Command, Group
from kvbench.cli.options import OUTPUT

trace_app = typer.Typer(
    cls=Group, no_args_is_help=True, help="Inspect traces and write generated workloads as trace files."
)


def _lru_capacities(text: str) -> list[int]:
    from kvbench.config import ConfigError
    from kvbench.units import parse_count

    caps = []
    for part in (p for p in text.split(",") if p.strip()):
        try:
            caps.append(parse_count(part))
        except ValueError as e:
            raise ConfigError(f"--lru: {e}") from None
    if any(c < 1 for c in caps):
        raise ConfigError("--lru: capacities must be >= 1 token")
    return caps


def _workload(source: str, seed: int):
    """A trace file, or a workload NAME|spec.toml."""
    from kvbench.workload import load

    p = Path(source)
    if p.suffix != ".toml" and (p.exists() or "/" in source or p.suffix):
        return load.select(source, None, seed)
    return load.select(None, source, seed)


@trace_app.command("info", cls=Command)
def info(
    source: Annotated[
        str,
        typer.Argument(
            help="Trace file (Mooncake JSONL, Azure CSV, ShareGPT JSON, length CSV) or workload NAME|spec.toml."
        ),
    ],
    lru: Annotated[
        str,
        typer.Option(
            "--lru",
            help="Capacities in tokens of a single global LRU over 512-token blocks, comma-separated "
            "(3M = 3,000,000). Empty: none.",
        ),
    ] = "3M,10M,50M",
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the statistics as JSON instead of a table.", rich_help_panel=OUTPUT)
    ] = False,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed for generated workloads and for arrivals of untimed files.")
    ] = 0,
) -> None:
    """Print requests, duration, rate, inter-arrival CV, length percentiles, block reuse and LRU hit ratios."""
    from kvbench.workload.stats import format_table, trace_stats

    caps = _lru_capacities(lru)
    w = _workload(source, seed)
    stats = trace_stats(w.make(), caps)
    if json_out:
        import orjson

        typer.echo(orjson.dumps({"source": w.source, **stats}, option=orjson.OPT_INDENT_2).decode())
    else:
        typer.echo(format_table(w.source, stats))


@trace_app.command("gen", cls=Command)
def gen(
    workload: Annotated[
        str,
        typer.Argument(help="Workload NAME (in ./workloads or the shipped specs), spec.toml, or a trace file."),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Output Mooncake-format JSONL (timestamp ms, input_length, output_length, hash_ids).",
            rich_help_panel=OUTPUT,
        ),
    ],
    seed: Annotated[
        int, typer.Option("--seed", help="Seed for every random choice; the same seed writes a byte-identical file.")
    ] = 0,
    max_requests: Annotated[int | None, typer.Option("--max-requests", "-n", help="Write at most N requests.")] = None,
) -> None:
    """Write a workload as Mooncake JSONL so any Mooncake-trace tool can replay it."""
    from kvbench.config import ConfigError
    from kvbench.workload.load import shape
    from kvbench.workload.mooncake import write_mooncake

    if out.is_dir():
        raise ConfigError(f"{out}: is a directory, expected an output file path")
    w = _workload(workload, seed)
    if max_requests is not None:
        w = shape(w, max_requests=max_requests)
    tmp = out.with_name(out.name + ".tmp")
    n = write_mooncake(w.make(), tmp)
    tmp.replace(out)  # never leave a half-written trace behind under the final name
    typer.echo(f"wrote {n:,} requests to {out}", err=True)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the kvbench app."""
    app.add_typer(trace_app, name="trace")
