"""Command-line signatures of the http commands: `kvbench serve` (machinery imported inside the bodies)."""

from __future__ import annotations

from typing import Annotated

import typer

from kvbench.cli.command import Command
from kvbench.cli.options import TARGET, Overrides


def register(app: typer.Typer) -> None:
    """Add this module's commands to the kvbench app."""
    app.command("serve", cls=Command)(serve)


def serve(
    target: Annotated[
        str,
        typer.Option(
            "--target",
            "-t",
            help="Timing: fixed:ttft_ms=MS,itl_ms=MS[,prefill_us_per_token=US][,eos_tokens=N] "
            "(TTFT in ms after the request arrives, then one token every ITL ms; optional "
            "µs per uncached prompt token; stop after N tokens unless ignore_eos) "
            "or sim[:PRESET] (each request timed by the simulated cluster, alone).",
            rich_help_panel=TARGET,
        ),
    ] = "fixed:ttft_ms=50,itl_ms=10",
    set_: Overrides = None,
    seed: Annotated[
        int,
        typer.Option("--seed", help="Seed of the simulator's random choices (sim targets).", rich_help_panel=TARGET),
    ] = 0,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", "-p", help="TCP port; 0 lets the OS pick (the URL is printed).")
    ] = 8000,
    model: Annotated[
        str, typer.Option("--model-name", help="Model id reported by /v1/models and in chunks.")
    ] = "kvbench",
    block_tokens: Annotated[
        int, typer.Option("--block-tokens", help="Prefix-cache block size in tokens (words).")
    ] = 16,
    cache_blocks: Annotated[
        int, typer.Option("--cache-blocks", help="Prefix-cache capacity in blocks (LRU).")
    ] = 65_536,
) -> None:
    """Run an OpenAI-compatible streaming server (/v1/completions, /v1/chat/completions, /v1/models, /health,
    /metrics, /tokenize) whose timing is fixed or simulated; prints its base URL, serves until Ctrl-C."""
    import sys

    from kvbench.serve.server import ServeOptions, run_server
    from kvbench.targets import resolve

    def ready(url: str) -> None:
        print(url, flush=True)
        print(f"kvbench serve: listening on {url} (Ctrl-C stops)", file=sys.stderr, flush=True)

    opts = ServeOptions(model=model, block_tokens=block_tokens, cache_blocks=cache_blocks)
    raise typer.Exit(run_server(resolve(target, set_ or []), opts, host, port, seed, ready))
