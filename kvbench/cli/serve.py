"""Command-line signatures of the http commands: `kvbench serve` (machinery imported inside the bodies)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the kvbench app."""
    app.command("serve")(serve)


def serve(
    target: str = typer.Option(
        "fixed:ttft_ms=50,itl_ms=10",
        "--target",
        "-t",
        help="Timing: fixed:ttft_ms=MS,itl_ms=MS[,prefill_us_per_token=US][,eos_tokens=N] "
        "(TTFT in ms after the request arrives, then one token every ITL ms; optional "
        "µs per uncached prompt token; stop after N tokens unless ignore_eos) "
        "or sim[:PRESET] (each request timed by the simulated cluster, alone).",
    ),
    set_: list[str] = typer.Option([], "--set", help="Override a target field, e.g. --set ttft_ms=20 (repeatable)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port", "-p", help="TCP port; 0 lets the OS pick (the URL is printed)."),
    model: str = typer.Option("kvbench", "--model-name", help="Model id reported by /v1/models and in chunks."),
    block_tokens: int = typer.Option(16, "--block-tokens", help="Prefix-cache block size in tokens (words)."),
    cache_blocks: int = typer.Option(65_536, "--cache-blocks", help="Prefix-cache capacity in blocks (LRU)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the simulator's random choices (sim targets)."),
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
    raise typer.Exit(run_server(resolve(target, set_), opts, host, port, seed, ready))
