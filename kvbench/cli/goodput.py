"""Command-line signature of `kvbench goodput` (the search, kvbench.plan.goodput, is imported when it runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvbench.cli.command import Command
from kvbench.cli.options import OUTPUT, TARGET, TIMING, WORKLOAD, GoodputArrivals, Overrides, WorkloadRef

Trace = Annotated[
    Path | None, typer.Option("--trace", help="Trace file to replay at scaled rates.", rich_help_panel=WORKLOAD)
]
MaxRequests = Annotated[
    int | None,
    typer.Option("--max-requests", "-n", help="Requests per probe run (the first N).", rich_help_panel=WORKLOAD),
]
RunSeed = Annotated[int, typer.Option("--seed", help="Seed of every probe run.", rich_help_panel=WORKLOAD)]
Target = Annotated[
    str,
    typer.Option(
        "--target",
        "-t",
        help="Target, as for replay: sim[:PRESET], fixed:..., http://HOST:PORT/v1, profile.",
        rich_help_panel=TARGET,
    ),
]
Gpus = Annotated[
    int | None,
    typer.Option(
        "--gpus",
        help="GPUs of the target, for goodput per GPU.",
        show_default="from the sim cluster spec",
        rich_help_panel=TARGET,
    ),
]
Slo = Annotated[
    str, typer.Option("--slo", help="SLOs in ms a request must all meet to be good, e.g. ttft=200,tpot=50.")
]
Attainment = Annotated[
    float, typer.Option("--attainment", help="Target SLO attainment, fraction of requests sent (0..1].")
]
Precision = Annotated[
    float, typer.Option("--precision", help="Stop when the pass/fail bracket is this narrow, relative (0.05 = 5 %).")
]
StartRate = Annotated[
    float | None,
    typer.Option(
        "--start-rate",
        help="First probe rate in requests/s.",
        show_default="the trace's own rate",
        rich_help_panel=TIMING,
    ),
]
Arrivals = Annotated[
    GoodputArrivals,
    typer.Option(
        "--arrivals",
        help="scale: time-scale the trace's arrivals; poisson: Poisson arrivals at the rate. On session workloads "
        "both scale the rate of session starts (a later turn waits for the previous answer and its think time), "
        "so fewer requests may arrive than the nominal rate: each probe records the achieved rate, goodput is the "
        "achieved rate of the best passing probe, and a gap over 5 % is warned about.",
        rich_help_panel=TIMING,
    ),
]
Out = Annotated[
    Path | None,
    typer.Option(
        "--out",
        "-o",
        help="Output directory: one subdirectory per probe run, goodput.json/csv.",
        show_default="reports/goodput-<time>",
        rich_help_panel=OUTPUT,
    ),
]
Overwrite = Annotated[
    bool,
    typer.Option(
        "--overwrite",
        help="Replace the goodput search already in --out (else a non-empty --out is refused).",
        rich_help_panel=OUTPUT,
    ),
]


def goodput(
    *,
    trace: Trace = None,
    workload: WorkloadRef = None,
    max_requests: MaxRequests = None,
    seed: RunSeed = 0,
    target: Target,
    set_: Overrides = None,
    gpus: Gpus = None,
    slo: Slo,
    attainment: Attainment = 0.9,
    precision: Precision = 0.05,
    start_rate: StartRate = None,
    arrivals: Arrivals = GoodputArrivals.scale,
    out: Out = None,
    overwrite: Overwrite = False,
) -> None:
    """Find the highest request rate whose SLO attainment stays >= --attainment (DistServe goodput)."""
    from kvbench.plan.goodput import goodput_command

    raise typer.Exit(
        goodput_command(
            trace=trace,
            workload=workload,
            target=target,
            overrides=set_ or [],
            slo=slo,
            attainment=attainment,
            precision=precision,
            max_requests=max_requests,
            start_rate=start_rate,
            arrivals=arrivals.value,
            gpus=gpus,
            out=out,
            overwrite=overwrite,
            seed=seed,
        )
    )


def register(app: typer.Typer) -> None:
    """Add this module's commands to the kvbench app."""
    app.command(cls=Command)(goodput)
