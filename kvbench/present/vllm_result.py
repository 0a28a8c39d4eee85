"""A run's results as `vllm bench serve --save-result` writes them (its key names), for dashboards that read those.

Keys as vLLM's benchmarks/serve.py writes them (without --save-detailed): date, endpoint_type, backend, label,
model_id, tokenizer_id, num_prompts, request_rate ("inf" or a number), burstiness, max_concurrency, duration,
completed, failed, total_input_tokens, total_output_tokens, request_throughput, request_goodput (null without
--goodput), output_throughput, total_token_throughput, max_output_tokens_per_s, max_concurrent_requests, and for
each of --percentile-metrics M: mean_M_ms, median_M_ms, std_M_ms and pP_M_ms per --metric-percentiles P (P
printed as an integer when it is one). Values come from the run's event log: duration is kvbench's (first ARRIVE to
last terminal event), std is the population standard deviation (numpy's default), percentiles interpolate
linearly (numpy's default), ITL pools every gap of the finished requests. A `kvbench` object names the run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from kvbench.analysis.runset import check_run, open_runs
from kvbench.analysis.slo import slo_from_manifest
from kvbench.analysis.sqlfiles import sql_text
from kvbench.analysis.tables import prepare
from kvbench.present import summary as summary_doc
from kvbench.units import ns_to_ms

COLUMNS = {"ttft": "ttft_ns", "tpot": "tpot_ns", "e2el": "e2e_ns"}  # per_request columns; itl from itl.sql
DEFAULT_NAME = "vllm_result.json"


def _stats(values: Sequence[float], weights: Sequence[int], percentiles: Sequence[float]) -> dict[str, float]:
    """mean, median, population std and linear percentiles (ms) of ns values, value i counted weights[i] times."""
    import numpy as np

    v, w = np.asarray(values, dtype=np.float64), np.asarray(weights, dtype=np.int64)
    if not len(v) or w.sum() == 0:
        return {"mean": 0.0, "median": 0.0, "std": 0.0, **{p: 0.0 for p in map(str, percentiles)}}
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    ends = np.cumsum(w)  # value k covers sorted ranks ends[k-1] .. ends[k]-1
    n = int(ends[-1])
    mean = float(np.dot(v, w) / n)

    def at(q: float) -> float:
        h = q * (n - 1)
        lo, hi = int(np.floor(h)), int(np.ceil(h))
        a, b = v[np.searchsorted(ends, lo, side="right")], v[np.searchsorted(ends, hi, side="right")]
        return float(a + (b - a) * (h - lo))

    std = float(np.sqrt(np.dot(w, (v - mean) ** 2) / n))
    out = {"mean": mean, "median": at(0.5), "std": std}
    out.update({str(p): at(p / 100) for p in percentiles})
    return {k: ns_to_ms(x) for k, x in out.items()}


def _distributions(run_dir: Path, metrics: Sequence[str]) -> dict[str, tuple[list, list]]:
    """(values ns, counts) per metric over the finished requests of the run."""
    con = open_runs([run_dir])
    try:
        prepare(con, slo_from_manifest(check_run(run_dir)))
        out: dict[str, tuple[list, list]] = {}
        for m in metrics:
            if m == "itl":
                rows = con.execute(sql_text("itl")).fetchall()
                out[m] = ([r[1] for r in rows], [r[2] for r in rows])
            else:
                col = COLUMNS[m]
                query = f"SELECT {col} FROM per_request WHERE status = 'FINISH' AND {col} IS NOT NULL"
                vals = [r[0] for r in con.execute(query).fetchall()]
                out[m] = (vals, [1] * len(vals))
        tokens = con.execute(
            "SELECT coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0) FROM per_request "
            "WHERE status = 'FINISH'"
        ).fetchone()
        out["_tokens"] = (list(tokens or (0, 0)), [])
        return out
    finally:
        con.close()


def _p_word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def document(run_dir: str | Path, metrics: Sequence[str], percentiles: Sequence[float], traffic: dict) -> dict:
    """The result JSON of a finished run. `traffic`: num_prompts, request_rate (None: the run's nominal rate, for
    a trace replayed at its timestamps), burstiness, max_concurrency."""
    run_dir = Path(run_dir)
    manifest = check_run(run_dir)
    saved = run_dir / "summary.json"
    doc = summary_doc.load(saved) if saved.is_file() else summary_doc.build(run_dir)
    m, ts = doc["metrics"], doc.get("timeseries") or {}
    dists = _distributions(run_dir, metrics)
    total_in, total_out = dists.pop("_tokens")[0]
    target = manifest.get("target") or {}
    model = str((target.get("params") or {}).get("model") or target.get("name") or "")
    out: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": target.get("kind"),
        "backend": target.get("kind"),
        "label": None,
        "model_id": model,
        "tokenizer_id": model,
        **traffic,
        "request_rate": traffic.get("request_rate") or (doc.get("rates") or {}).get("nominal_per_s"),
        "duration": m.get("duration_s"),
        "completed": m.get("finished"),
        "failed": (m.get("errors") or 0) + (m.get("rejected") or 0) + (m.get("cancelled") or 0),
        "total_input_tokens": int(total_in),
        "total_output_tokens": int(total_out),
        "request_throughput": m.get("request_throughput"),
        "request_goodput": m.get("goodput") if doc.get("slo_ms") else None,
        "output_throughput": m.get("output_token_throughput"),
        "total_token_throughput": m.get("total_token_throughput"),
        "max_output_tokens_per_s": max((x for x in ts.get("output_tok_s") or [] if x is not None), default=None),
        "max_concurrent_requests": max((x for x in ts.get("in_flight") or [] if x is not None), default=None),
    }
    for name in metrics:
        s = _stats(*dists[name], percentiles)
        out.update({f"mean_{name}_ms": s["mean"], f"median_{name}_ms": s["median"], f"std_{name}_ms": s["std"]})
        out.update({f"p{_p_word(p)}_{name}_ms": s[str(p)] for p in percentiles})
    out["kvbench"] = {"run_id": manifest.get("run_id"), "run_dir": str(run_dir), "target": target.get("name")}
    return out


def file_name(doc: dict, max_concurrency: int | None) -> str:
    """vLLM's default name: {label}-{request_rate}qps[-concurrency{N}]-{model}-{date}.json."""
    conc = f"-concurrency{max_concurrency}" if max_concurrency is not None else ""
    model = str(doc["model_id"]).split("/")[-1]
    return f"{doc['backend']}-{doc['request_rate']}qps{conc}-{model}-{doc['date']}.json"


def save(
    run_dir: str | Path,
    directory: Path | None,
    filename: str | None,
    metrics: Sequence[str],
    percentiles: Sequence[float],
    traffic: dict,
) -> Path:
    """Write the result JSON: `filename` in `directory`; by default RUN/vllm_result.json, or vLLM's name pattern
    when only `directory` is given."""
    doc = document(run_dir, metrics, percentiles, traffic)
    if directory is None:
        path = Path(run_dir) / (filename or DEFAULT_NAME)
    else:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / (filename or file_name(doc, traffic.get("max_concurrency")))
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path
