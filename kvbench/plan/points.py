"""One sweep point: its workload and target built from a PointJob, its run, and its row of sweep.parquet (the
point's parameters, the run's summary figures, nominal vs achieved arrival rate). Runs in a worker process, a
Ray task or the driver alike."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbench.plan.sweepspec import PointJob

if TYPE_CHECKING:
    from kvbench.analysis.slo import Slo
    from kvbench.target import TargetSpec
    from kvbench.workload.load import Workload

ROW_FILE = "point.json"  # the point's row, written once its run completed and its figures were computed


def point_workload(job: PointJob) -> Workload:
    """The workload of a point: its spec with the point's workload keys set, re-timed and shaped."""
    from kvbench.workload import load

    wl = load.select(job.trace, job.workload, job.seed, job.workload_sets)
    if job.rate is not None:
        wl = load.retime_poisson(wl, job.rate, job.seed)
    wl = load.shape(wl, time_scale=job.time_scale, max_requests=job.max_requests)
    load.require_requests(wl)
    if job.workload_sets:  # the spec file's digest does not see the point's settings
        digest = json.dumps([wl.digest, job.workload_sets]).encode()
        wl = replace(wl, digest=_sha(digest))
    return wl


def _sha(blob: bytes) -> str:
    import hashlib

    return hashlib.sha256(blob).hexdigest()[:16]


def point_target(job: PointJob) -> TargetSpec:
    from kvbench.targets import resolve

    return resolve(job.target, job.target_sets)


def check_job(job: PointJob) -> None:
    """ConfigError (one line, naming the file and key) when a point's target or workload cannot be built: checked
    for every point before the sweep runs anything. A sim profile is parsed whole."""
    spec = point_target(job)
    if spec.kind == "sim":
        from kvbench.sim.cluster import parse_cluster

        parse_cluster(spec.params, spec.source)
    if job.workload_sets:
        from kvbench.workload.inputs import find_workload
        from kvbench.workload.spec import load_spec

        load_spec(find_workload(str(job.workload)), overrides=job.workload_sets)


def run_point(job: PointJob, run_dir: Path) -> dict[str, Any]:
    """Run the point into `run_dir` (which must not hold an earlier run), record its parameters in run.json and
    return its row; the row is also written to run_dir/point.json when the run completed."""
    from kvbench.eventlog import read_manifest, write_manifest
    from kvbench.run import RunOptions, execute

    try:
        wl, spec = point_workload(job), point_target(job)
        _, stats = execute(wl, spec, RunOptions(job.seed, job.concurrency, run_dir))
    except KeyboardInterrupt:
        return base_row(job) | {"status": "interrupted"}
    except Exception as e:  # a bad point must not end the sweep: its row says why, a rerun tries it again
        return base_row(job) | {"status": "error", "error": f"{type(e).__name__}: {e}"}
    manifest = read_manifest(run_dir)
    manifest["sweep"] = {"point": job.name, "params": job.params_dict()}
    write_manifest(run_dir, manifest)
    row = point_row(job, run_dir, manifest, spec)
    if stats.status == "complete":
        (run_dir / ROW_FILE).write_text(json.dumps(row, indent=1, default=str) + "\n")
    return row


def base_row(job: PointJob) -> dict[str, Any]:
    return {"point": job.name, "status": "error", **job.params_dict(), "run_dir": f"points/{job.name}"}


def point_row(job: PointJob, run_dir: Path, manifest: dict[str, Any], spec: TargetSpec | None) -> dict[str, Any]:
    """The point's parameters, the run's figures (catalogue keys) and its rates, as one flat row."""
    from kvbench.analysis.figures import summary
    from kvbench.analysis.rates import rates_of
    from kvbench.plan.goodput import sim_gpus

    slo = point_slo(job, manifest)
    figs = summary(run_dir, slo)
    rates = rates_of(manifest, figs)
    extra = {
        "nominal_rate": rates.nominal,
        "nominal_source": rates.source,
        "rate_gap": rates.gap,
        "gpus": sim_gpus(spec) if spec is not None else None,
        "wall_s": manifest.get("wall_s"),
        "slo": json.dumps(slo.as_ms(), sort_keys=True),
    }
    return base_row(job) | {"status": manifest.get("status", "unknown"), **figs, **extra}


def finished(job: PointJob, run_dir: Path) -> bool:
    """A completed run of exactly this point's parameters, with its row written."""
    from kvbench.eventlog import read_manifest

    try:
        m = read_manifest(run_dir)
    except (FileNotFoundError, ValueError):
        return False
    same = json.dumps((m.get("sweep") or {}).get("params"), sort_keys=True) == json.dumps(
        job.params_dict(), sort_keys=True
    )
    return same and m.get("status") == "complete" and (run_dir / ROW_FILE).is_file()


def finished_row(job: PointJob, run_dir: Path) -> dict[str, Any]:
    """The row of a finished point: as written, or recomputed from its run when the sweep's SLOs changed."""
    from kvbench.eventlog import read_manifest

    row = json.loads((run_dir / ROW_FILE).read_text())
    manifest = read_manifest(run_dir)
    if row.get("slo") != json.dumps(point_slo(job, manifest).as_ms(), sort_keys=True):
        row = point_row(job, run_dir, manifest, point_target(job))
        (run_dir / ROW_FILE).write_text(json.dumps(row, indent=1, default=str) + "\n")
    return row


def point_slo(job: PointJob, manifest: dict[str, Any]) -> Slo:
    """The sweep's SLOs, else those the point's workload declares."""
    from kvbench.analysis.slo import parse_slo, slo_from_manifest

    return parse_slo(job.slo) if job.slo else slo_from_manifest(manifest)
