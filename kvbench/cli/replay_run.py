"""What `kvbench replay` does: select and shape the workload, resolve the target, run with a progress bar, print
counts and the summary."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from kvbench.analysis.slo import Slo
from kvbench.cli.replay_options import SERVER_TOKENIZER, ResultOptions, Timing
from kvbench.config import ConfigError
from kvbench.replayer import ReplayStats
from kvbench.run import RunOptions, execute, load_run
from kvbench.rundir import check_out
from kvbench.target import TargetSpec
from kvbench.targets import resolve
from kvbench.workload import load
from kvbench.workload.dataset import Dataset, dataset_workload
from kvbench.workload.tokens import Tokenizer

# Piped output (a CI log, `| tee`) is not a terminal of 80 columns: lines are as long as they need.
WIDE = 200


def replay_command(
    *,
    trace: Path | None,
    workload: str | None,
    dataset: Dataset | None,
    tokenizer: str,
    target: str,
    model: str | None,
    overrides: list[str],
    out: Path | None,
    overwrite: bool,
    seed: int,
    time_scale: float,
    timing: Timing,
    start: float,
    duration: float | None,
    max_requests: int | None,
    slo: Slo | None,
    workers: int,
    quiet: bool,
    result: ResultOptions,
    ray: str | None = None,
) -> int:
    if out is not None:
        check_out(out, overwrite)  # before reading the trace: a taken --out is known at once
    spec = _target(target, overrides, model)
    counter = _tokenizer(tokenizer, spec)
    dataset = dataset if dataset is None else replace(dataset, tokenizer=counter)
    wl = _workload(trace, workload, dataset, counter, timing, seed)
    wl = load.shape(wl, time_scale, start, duration, max_requests)
    load.require_requests(wl)
    if slo:
        wl = replace(wl, slo_ms={**wl.slo_ms, **slo.as_ms()})
    if timing.concurrency is not None and not timing.closed and load.all_at_once(wl):
        timing = replace(timing, closed=True)  # N at a time from one instant: the closed loop of vLLM's inf rate
    opts = RunOptions(seed, timing.concurrency, out, workers, overwrite, timing.closed, timing.think_s)
    if ray is not None:
        from kvbench.run_ray import execute_on_ray

        run_dir, stats = execute_on_ray(wl, spec, opts, ray)
    elif quiet or workers != 1:  # worker processes report their counts at the end only
        run_dir, stats = execute(wl, spec, opts)
    else:
        run_dir, stats = _execute_with_progress(wl, spec, opts, None if dataset is None else dataset.num_prompts)
    errors = load_run(run_dir).get("worker_errors")
    if errors and not quiet:
        print("kvbench: " + "; ".join(errors), file=sys.stderr)
    if not quiet:
        _print_result(run_dir, stats)
    else:
        print(run_dir)  # -q: the one line a script needs to find the run
    if result.save:
        _save_vllm_result(run_dir, result, timing, dataset, quiet)
    if stats.status == "complete" and stats.submitted and not stats.finished:  # it measured nothing: a failure
        print(f"kvbench: error: {_none_finished(run_dir, stats)}", file=sys.stderr)
        return 1
    return {"complete": 0, "interrupted": 130}.get(stats.status, 1)


def _tokenizer(tokenizer: str, spec: TargetSpec) -> Tokenizer:
    """--tokenizer as the workload takes it: `server` becomes the target's probed /tokenize, or "" (the estimate,
    with a warning) when the target does not serve one."""
    if tokenizer != SERVER_TOKENIZER:
        return tokenizer
    if spec.kind != "openai":
        raise ConfigError(f"--tokenizer server counts with an HTTP target's /tokenize; target {spec.name!r} is not one")
    from kvbench.http.probe import tokenize_endpoint

    found = tokenize_endpoint(spec.params, spec.source)
    if isinstance(found, str):
        print(f"kvbench: warning: {found}; token counts are estimated (chars/4)", file=sys.stderr)
        return ""
    return found


def _workload(
    trace: Path | None, workload: str | None, dataset: Dataset | None, tokenizer: Tokenizer, timing: Timing, seed: int
) -> load.Workload:
    """The workload of --trace, --workload or --dataset-name, timed by --request-rate/--burstiness."""
    if dataset is not None:
        rate = timing.rate if timing.rate is not None else float("inf")
        wl = dataset_workload(dataset, load.request_arrivals(rate, timing.burstiness), seed)
        return replace(wl, shaping={**wl.shaping, "rate_per_s": "inf" if rate == float("inf") else rate})
    wl = load.select(trace, workload, seed, tokenizer=tokenizer)
    return wl if timing.rate is None else load.retime(wl, timing.rate, timing.burstiness, seed)


def _target(target: str, overrides: list[str], model: str | None) -> TargetSpec:
    """--target with --set; --model names the model an endpoint is asked for (a simulator models its own)."""
    spec = resolve(target, overrides)
    if model and spec.kind == "openai":
        quoted = '"' + model.replace("\\", "\\\\").replace('"', '\\"') + '"'
        spec = resolve(target, [*overrides, f"model={quoted}"])
    return spec


def _save_vllm_result(run_dir: Path, result: ResultOptions, timing: Timing, dataset: Dataset | None, quiet: bool):
    from kvbench.present import vllm_result

    rate = timing.rate
    traffic = {
        "num_prompts": dataset.num_prompts if dataset is not None else load_run(run_dir)["counts"]["submitted"],
        "request_rate": None if rate is None else "inf" if rate == float("inf") else rate,
        "burstiness": timing.burstiness,
        "max_concurrency": timing.concurrency,
    }
    path = vllm_result.save(run_dir, result.directory, result.filename, result.metrics, result.percentiles, traffic)
    if not quiet:
        print(f"kvbench: vLLM result JSON → {path}", file=sys.stderr)


def _none_finished(run_dir: Path, st: ReplayStats) -> str:
    """One line: no request finished, the most common failure class and one of its details."""
    import duckdb

    from kvbench.eventlog import table_parts

    top = (
        duckdb.connect()
        .execute(
            "SELECT count(*) AS n, min(detail) FROM read_parquet(?) WHERE kind IN ('ERROR', 'REJECT', 'CANCEL') "
            "GROUP BY split_part(detail, ':', 1) ORDER BY n DESC, min(detail) LIMIT 1",
            [table_parts(run_dir)],
        )
        .fetchone()
    )
    example = f"; {top[0]:,} like: {top[1]}" if top else ""
    return f"none of {st.submitted:,} requests finished ({st.errors:,} errors, {st.rejected:,} rejected){example}"


def _execute_with_progress(wl, spec, opts, total: int | None):
    # rich and the live figures are for a run with a progress bar: a -q run never imports them
    from rich.console import Console

    from kvbench.cli.progress import LiveLatency, count_later, describe, progress_bar

    console = Console(stderr=True, width=None if Console(stderr=True).is_terminal else WIDE)
    live = LiveLatency()
    with progress_bar(console) as progress:
        task = progress.add_task(f"replay {wl.name} → {spec.name}", total=total, state="starting")
        if total is None:
            count_later(wl.requests, lambda n: progress.update(task, total=n))

        def show(st: ReplayStats) -> None:
            progress.update(task, completed=st.ended, state=describe(st, live))

        return execute(wl, spec, opts, progress=show, watch=live.observe)


def _print_result(run_dir: Path, st: ReplayStats) -> None:
    from rich.console import Console

    console = Console(stderr=True, width=None if Console(stderr=True).is_terminal else WIDE)
    console.print(
        f"[bold]{st.status}[/]: {st.submitted:,} requests, {st.finished:,} finished, {st.errors:,} errors, "
        f"{st.rejected:,} rejected, {st.cancelled:,} cancelled; {st.events:,} events → {run_dir}"
    )
    try:
        from kvbench.present.summary import print_run_summary
    except ImportError:
        return
    print_run_summary(run_dir, file=sys.stdout)
