"""Command-line signatures of the sim physics commands: kv-transfer (machinery imported lazily)."""

from __future__ import annotations

from typing import Annotated

import typer

from kvbench.cli.command import Command
from kvbench.cli.options import OUTPUT
from kvbench.sim.transfer import Granularity


def _fmt_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.3g}{unit}"
    return f"{int(n)} B"


def _print_table(doc: dict) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from kvbench.units import ns_to_ms

    title = (
        f"{doc['model']}: {doc['tokens']:,} tokens x {doc['kv_bytes_per_token'] / 1024:g} KiB/token = "
        f"{_fmt_bytes(doc['kv_bytes'])} of KV, {doc['granularity']} messages (block {doc['block_tokens']})"
    )
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0), collapse_padding=True)
    for col in ("link", "msgs", "msg size", "time ms", "RTT ms", "wire ms", "bound", "crossover"):
        table.add_column(col, justify="left" if col in ("link", "bound") else "right", no_wrap=True)
    for r in doc["links"]:
        table.add_row(
            r["link"],
            f"{r['messages']:,}",
            _fmt_bytes(r["bytes_per_message"]),
            *(f"{ns_to_ms(r[k]):.3g}" for k in ("transfer_ns", "latency_ns", "wire_ns")),
            "RTT" if r["regime"] == "rtt-bound" else "BW",
            _fmt_bytes(r["crossover_bytes"]),
        )
    console = Console()
    console.print(table)
    console.print(
        "bound: RTT when the latency part (per-request + alpha per round of messages) exceeds the wire part "
        "(bytes / beta). crossover: the message size at which they are equal (alpha x beta for a single "
        "message); smaller messages are RTT-bound."
    )


def kv_transfer_cmd(
    model: Annotated[
        str, typer.Option("--model", "-m", help="Model name from the catalog, e.g. Llama-3.1-8B, DeepSeek-V3.")
    ],
    tokens: Annotated[
        str, typer.Option("--tokens", "-n", help="Prompt length in tokens whose KV moves (7500, 8k, 1M).")
    ],
    link: Annotated[
        str | None,
        typer.Option(
            "--link",
            "-l",
            help="Link tier from the catalog, e.g. nvlink-h100, roce-mooncake.",
            show_default="every tier, in one table",
        ),
    ] = None,
    granularity: Annotated[
        Granularity,
        typer.Option(
            "--granularity",
            "-g",
            help="Message granularity: layer-block (one message per layer x KV block), "
            "layer (one per layer) or request (one per request).",
        ),
    ] = Granularity.LAYER_BLOCK,
    block_tokens: Annotated[
        int, typer.Option("--block-tokens", help="Tokens per KV block (page), for layer-block.")
    ] = 16,
    json_out: Annotated[
        bool,
        typer.Option(
            "--json", help="Print JSON instead of a table (times in ns, sizes in bytes).", rich_help_panel=OUTPUT
        ),
    ] = False,
) -> None:
    """KV bytes, messages, transfer time and RTT-bound vs bandwidth-bound for a prompt, per link tier."""
    doc = _transfer_doc(model, tokens, link, granularity, block_tokens)
    if json_out:
        import json

        print(json.dumps(doc, indent=1))
    else:
        _print_table(doc)


def _transfer_doc(model: str, tokens: str, link: str | None, granularity: Granularity, block_tokens: int) -> dict:
    from kvbench.config import ConfigError
    from kvbench.sim import spec
    from kvbench.sim.transfer import describe
    from kvbench.units import parse_count

    try:
        n = parse_count(tokens)
    except ValueError as e:
        raise ConfigError(f"--tokens: {e}") from None
    if n < 1 or block_tokens < 1:
        raise ConfigError(f"--tokens ({n}) and --block-tokens ({block_tokens}) must be >= 1")
    m = spec.model(model, "--model")
    links = [spec.link(link, "--link")] if link else list(spec.catalog("links").values())
    return {
        "model": m.name,
        "tokens": n,
        "kv_bytes_per_token": m.kv_bytes_per_token(),
        "kv_bytes": n * m.kv_bytes_per_token(),
        "granularity": granularity.value,
        "block_tokens": block_tokens,
        "links": [describe(lk, m, n, granularity, block_tokens) for lk in links],
    }


def register(app: typer.Typer) -> None:
    """Add this module's commands to the kvbench app."""
    app.command("kv-transfer", cls=Command)(kv_transfer_cmd)
