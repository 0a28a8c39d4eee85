"""`kvbench calibrate` (a real server's step times as a sim profile CSV) and `kvbench fidelity` (sim vs real run)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.command import Command
from kvbench.cli.options import Overrides


def _ints(text: str, name: str) -> tuple[int, ...]:
    from kvbench.config import ConfigError

    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"{name}: expected comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ConfigError(f"{name}: expected whole numbers >= 1, got {text!r}")
    return values


def calibrate(
    target: Annotated[str, typer.Option("--target", "-t", help="Real endpoint: http://HOST:PORT/v1 or a profile.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Profile CSV to write (report: OUT.calibration.json).")],
    overrides: Overrides = None,
    prompts: Annotated[str, typer.Option(help="Cold prefill ladder (prompt tokens).")] = "64,256,512,1024,1536,2048",
    batches: Annotated[str, typer.Option(help="Decode batch sizes (closed-loop concurrency; <= server slots).")] = (
        "1,2,4"
    ),
    contexts: Annotated[str, typer.Option(help="Decode prompt lengths (tokens).")] = "128,1024,2048",
    repeats: Annotated[int, typer.Option(help="Samples per prefill shape.")] = 3,
    budget_s: Annotated[float, typer.Option("--budget", help="Start no decode run after this many seconds.")] = 120.0,
    runs: Annotated[Path | None, typer.Option(help="Directory for the phases' runs (default: OUT's stem + .runs).")] = (
        None
    ),
) -> None:
    """Measure a real engine (TTFT over prompt lengths, cold and after a cached prefix; decode steps from ITL at
    batch 1..N) and write a step-time profile CSV the simulator loads with `profile = "OUT"`."""
    from kvbench.plan.calibrate import CalibrationPlan, report_path
    from kvbench.plan.calibrate import calibrate as run_calibration
    from kvbench.targets import registration, resolve

    spec = resolve(target, overrides or [])
    if not registration(spec.kind).realtime:
        from kvbench.config import ConfigError

        raise ConfigError(f"--target {target}: calibrate measures a real server, not a {spec.kind!r} target")
    plan = CalibrationPlan(
        spec,
        runs or out.with_name(out.stem + ".runs"),
        prompt_tokens=_ints(prompts, "--prompts"),
        batches=_ints(batches, "--batches"),
        contexts=_ints(contexts, "--contexts"),
        repeats=max(1, repeats),
        budget_s=budget_s,
    )
    report = run_calibration(plan, out)
    worst = report["max_abs_residual"]
    typer.echo(
        f"wrote {out} and {report_path(out)}: fit residual max prefill {worst['prefill']:.1%}, "
        f"decode {worst['decode']:.1%}" + (f"; skipped {', '.join(report['skipped'])}" if report["skipped"] else "")
    )


def fidelity(
    sim_run: Annotated[Path, typer.Argument(help="Run directory of the simulated replay.")],
    real_run: Annotated[Path, typer.Argument(help="Run directory of the same workload on the real server.")],
    html: Annotated[Path | None, typer.Option("--html", help="Also write an HTML page with overlay figures.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Per metric (TTFT, TPOT, ITL, E2E, throughput, cache hit ratio): p50/p90/p99 of both runs and the sim's
    relative error against the real run."""
    import json

    from kvbench.analysis.fidelity import compare
    from kvbench.present.fidelity import render_html, table_text

    result = compare(sim_run, real_run)
    typer.echo(json.dumps(result.rows, indent=2) if as_json else table_text(result))
    if html is not None:
        html.write_text(render_html(result), encoding="utf-8")
        typer.echo(f"wrote {html}", err=True)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the kvbench app."""
    app.command(cls=Command)(calibrate)
    app.command(cls=Command)(fidelity)
