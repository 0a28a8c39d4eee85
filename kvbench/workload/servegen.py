"""ServeGen per-client distributions: 600 s rate windows with Gamma/Weibull gaps, and 6 h PMFs of request lengths.

Sampling follows ServeGen (SOURCES.md §3): in each 600 s window with traffic, n = round(rate * 600 * rate_scale)
inter-arrival gaps are drawn from the fitted Gamma(shape, scale) or Weibull(shape, scale) and rescaled so the
window holds exactly n arrivals (we draw n + 1 gaps and scale their sum to 600 s, so the window's last gap is a
sample too). A request's fields (input_tokens, output_tokens, reason_ratio) come from the PMFs of the 6 h window
containing its arrival, all by inverse CDF from ONE shared uniform (ServeGen's comonotonic coupling).
PMF literals are parsed by a strict number-pair check (`_fast_pairs`), falling back to `ast.literal_eval` (never `eval`).
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from kvbench.config import ConfigError
from kvbench.records import Request
from kvbench.units import s_to_ns
from kvbench.workload.arrivals import Seed

RATE_WINDOW_S = 600
MAX_RATE = 100_000  # req/s of one client: far above any ServeGen client (the busiest aggregate is ~600 req/s)
MAX_TOKENS = 10_000_000
MAX_WINDOW_REQUESTS = 10_000_000  # generated requests are materialised: bound the memory a spec can ask for
DATASET_WINDOW_S = 21_600
FIELDS = ("input_tokens", "output_tokens", "reason_ratio")


@dataclass(frozen=True)
class Pmf:
    values: np.ndarray  # float64, ascending
    cdf: np.ndarray  # float64, last = 1

    def quantile(self, u: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(self.cdf, u, side="right")
        return self.values[np.minimum(idx, len(self.values) - 1)]


def parse_pmf(text: object, where: str) -> Pmf | None:
    """'{45: 0.0096, ...}' -> Pmf with normalised CDF, None for '{}'; errors name `where` (file: window.field)."""
    if not isinstance(text, str):
        raise ConfigError(f"{where}: expected a PMF literal string, got {type(text).__name__}")
    nums = _fast_pairs(text)
    if nums is not None:
        values, probs = nums[0::2], nums[1::2]
    else:
        try:
            d = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise ConfigError(f"{where}: not a PMF literal {{value: probability, ...}}") from None
        if not isinstance(d, dict) or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for kv in d.items() for x in kv
        ):
            raise ConfigError(f"{where}: expected a dict of number: probability")
        values = np.array(list(d.keys()), dtype=np.float64)
        probs = np.array(list(d.values()), dtype=np.float64)
    if not len(values):
        return None
    if not np.all(np.isfinite(probs)) or np.any(probs < 0) or probs.sum() <= 0:
        raise ConfigError(f"{where}: PMF needs finite non-negative probabilities summing to more than 0")
    order = np.argsort(values, kind="stable")
    cdf = np.cumsum(probs[order])
    return Pmf(values[order], cdf / cdf[-1])


def _fast_pairs(text: str):
    """'{k: v, k: v}' -> [k, v, k, v] as float64, or None if the text is not exactly that shape.

    The separators must alternate ':' ',' and every token must parse as a float: the grammar, without a regex
    over a 100 kB literal (ServeGen PMFs have up to ~10^4 entries; this is ~10x faster than ast.literal_eval).
    """
    body = text.strip()
    if len(body) < 2 or body[0] != "{" or body[-1] != "}":
        return None
    body = body[1:-1].strip().removesuffix(",")
    if not body:
        return np.zeros(0)
    seps = body.translate(_NUMBER_CHARS)  # only separators (and any stray character) remain
    n = len(seps) // 2 + 1
    if seps != ":," * (n - 1) + ":":
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # older numpy warns and stops at a bad token: the count check catches it
            nums = np.fromstring(body.replace(":", ","), dtype=np.float64, sep=",")
    except ValueError:
        return None
    return nums if len(nums) == 2 * n else None


_NUMBER_CHARS = str.maketrans("", "", "0123456789.eE+- \t\r\n")


@dataclass(frozen=True)
class Client:
    client_id: int
    windows: np.ndarray  # (k, 4): start_s, rate, shape, scale; family in `families`
    families: tuple[str, ...]
    datasets: dict  # dataset window start_s -> {field: Pmf}


def client_ids(directory: Path) -> list[int]:
    """Ids of the clients that have both a trace and a dataset file in a ServeGen model directory."""
    if not directory.is_dir():
        raise ConfigError(f"{directory}: not a directory (expected a ServeGen model folder with chunk-*-trace.csv)")
    ids = sorted(
        int(m.group(1))
        for p in directory.glob("chunk-*-trace.csv")
        if (m := re.fullmatch(r"chunk-(\d+)-trace\.csv", p.name))
        and (directory / f"chunk-{m.group(1)}-dataset.json").is_file()
    )
    if not ids:
        raise ConfigError(f"{directory}: no chunk-N-trace.csv with a chunk-N-dataset.json beside it")
    return ids


def _read_windows(path: Path):
    rows, families = [], []
    for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        cells = line.split(",")
        if len(cells) != 6:
            raise ConfigError(f"{path}:{lineno}: expected 6 fields (start_s, rate, cv, family, shape, scale)")
        family = cells[3].strip()
        if family not in ("", "Gamma", "Weibull"):
            raise ConfigError(f"{path}:{lineno}: field 'family': expected Gamma, Weibull or empty, got {family!r}")
        try:
            start, rate, shape, scale = (float(cells[i]) for i in (0, 1, 4, 5))
        except ValueError:
            raise ConfigError(f"{path}:{lineno}: expected numbers in fields start_s, rate, shape, scale") from None
        if not (0 <= rate <= MAX_RATE and 0 <= start < 1e12) or (
            family and not (0 < shape < 1e12 and 0 < scale < 1e12)
        ):
            raise ConfigError(
                f"{path}:{lineno}: field 'rate'/'shape'/'scale': expected 0 <= rate <= {MAX_RATE:,} req/s, "
                f"finite shape and scale > 0"
            )
        rows.append((start, rate if family else 0.0, shape, scale))
        families.append(family)
    return np.array(rows, dtype=np.float64).reshape(-1, 4), tuple(families)


def load_client(directory: Path, client_id: int, fields: tuple[str, ...] = FIELDS) -> Client:
    path = directory / f"chunk-{client_id}-dataset.json"
    if not path.is_file() or not (directory / f"chunk-{client_id}-trace.csv").is_file():
        raise ConfigError(
            f"{directory}: client {client_id}: chunk-{client_id}-trace.csv and -dataset.json expected; "
            f"clients here: {', '.join(map(str, client_ids(directory)))}"
        )
    windows, families = _read_windows(directory / f"chunk-{client_id}-trace.csv")
    try:
        raw = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as e:
        raise ConfigError(f"{path}: invalid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected an object of window_start_s -> fields")
    datasets = {}
    for key, table in raw.items():
        if not isinstance(table, dict) or not re.fullmatch(r"\d+", key):
            raise ConfigError(f"{path}: window {key!r}: expected an integer start second mapping to PMFs")
        missing = [f for f in ("input_tokens", "output_tokens") if f in fields and f not in table]
        if missing:
            raise ConfigError(f"{path}: window {key}: field {missing[0]!r} missing (a PMF string, '{{}}' if none)")
        pmfs = {f: parse_pmf(table[f], f"{path}: window {key}.{f}") for f in fields if f in table}
        if all(pmf is not None for pmf in pmfs.values()):
            datasets[int(key)] = pmfs  # ServeGen writes '{}' for windows without data: skip them
    return Client(client_id, windows, families, datasets)


def dataset_at(client: Client, t_s: float) -> dict | None:
    """The PMFs of the 6 h dataset window holding t_s, else of the nearest window with data (None if none has)."""
    if not client.datasets:
        return None
    return client.datasets[min(client.datasets, key=lambda s: (abs(s + DATASET_WINDOW_S / 2 - t_s), s))]


def window_arrivals_s(
    rng: np.random.Generator, start_s: float, n: int, family: str, shape: float, scale: float
) -> np.ndarray:
    """n arrival times in [start_s, start_s + 600): fitted gaps rescaled so n + 1 of them span the window."""
    gaps = rng.gamma(shape, scale, n + 1) if family == "Gamma" else scale * rng.weibull(shape, n + 1)
    total = float(gaps.sum())
    if not np.isfinite(total) or total <= 0:  # shapes near 0 can underflow every gap: spread evenly instead
        gaps = np.ones(n + 1)
        total = float(n + 1)
    t = start_s + np.cumsum(gaps[:-1]) * (RATE_WINDOW_S / total)
    return np.minimum(t, start_s + RATE_WINDOW_S - 1e-9)  # a ~0 last gap must not leave the window (1 ns inside)


def sample_fields(pmfs: dict, u: np.ndarray) -> dict:
    """All fields for uniforms `u` (one shared uniform per request: ServeGen's coupling)."""
    return {f: pmf.quantile(u) for f, pmf in pmfs.items()}


def generate(
    directory: Path,
    clients: list[int] | None,
    start_s: float,
    duration_s: float,
    rate_scale: float,
    seed: Seed,
    name: str = "",
) -> list[Request]:
    """Requests of the chosen clients over [start_s, start_s + duration_s), arrival offsets from start_s."""
    rng = np.random.default_rng(seed)
    rows = []
    for cid in clients if clients is not None else client_ids(directory):
        c = load_client(directory, cid)
        for (w_start, rate, shape, scale), family in zip(c.windows, c.families):
            n = int(round(rate * RATE_WINDOW_S * rate_scale))
            if n > MAX_WINDOW_REQUESTS:
                raise ConfigError(
                    f"{directory}: client {cid} window {w_start:.0f} s: {n:,} requests at rate_scale "
                    f"{rate_scale}; at most {MAX_WINDOW_REQUESTS:,} per 600 s window"
                )
            if not family or n == 0 or w_start + RATE_WINDOW_S <= start_s or w_start >= start_s + duration_s:
                continue
            t = window_arrivals_s(rng, w_start, n, family, shape, scale)
            t = t[(t >= start_s) & (t < start_s + duration_s)]
            pmfs = dataset_at(c, w_start)
            if pmfs is None:
                continue
            f = sample_fields(pmfs, rng.random(len(t)))
            rows.append((t, f, cid))
    return _to_requests(rows, start_s, name)


def _to_requests(rows, start_s: float, name: str) -> list[Request]:
    reqs = []
    for t, f, _cid in rows:
        n_in = np.clip(f["input_tokens"], 1, MAX_TOKENS).astype(np.int64)
        n_out = np.clip(f["output_tokens"], 1, MAX_TOKENS).astype(np.int64)
        ratio = np.clip(f.get("reason_ratio", np.zeros(len(t))), 0.0, 1.0)
        reason = np.minimum(n_out, np.round(n_out * ratio).astype(np.int64))
        for ti, a, b, r in zip(t.tolist(), n_in.tolist(), n_out.tolist(), reason.tolist()):
            reqs.append(Request(0, s_to_ns(ti - start_s), a, b, reason_tokens=r, workload=name))
    reqs.sort(key=lambda r: r.arrival_ns)
    return [r._replace(req_id=i) for i, r in enumerate(reqs)]


def mixture(directory: Path, clients: list[int] | None = None) -> tuple[list[dict], np.ndarray]:
    """Request-weighted mixture over (client, 6 h window): components' PMFs and their weights (sum 1)."""
    comps, weights = [], []
    for cid in clients if clients is not None else client_ids(directory):
        c = load_client(directory, cid)
        for d_start, pmfs in sorted(c.datasets.items()):
            in_window = (c.windows[:, 0] >= d_start) & (c.windows[:, 0] < d_start + DATASET_WINDOW_S)
            n = float(c.windows[in_window, 1].sum() * RATE_WINDOW_S)
            if n > 0:
                comps.append(pmfs)
                weights.append(n)
    if not comps:
        raise ConfigError(f"{directory}: no client window with both traffic and a dataset")
    w = np.array(weights)
    return comps, w / w.sum()


def sample_mixture(
    comps: list[dict], weights: np.ndarray, rng: np.random.Generator, n: int, fields: tuple[str, ...]
) -> dict:
    """n draws from the mixture: a component by weight, then all `fields` from one shared uniform."""
    which = rng.choice(len(comps), size=n, p=weights)
    u = rng.random(n)
    out = {f: np.zeros(n) for f in fields}
    for k in np.unique(which):
        sel = which == k
        for f in fields:
            pmf = comps[k].get(f)
            if pmf is None:
                raise ConfigError(f"ServeGen component lacks field {f!r} (not a reasoning model?)")
            out[f][sel] = pmf.quantile(u[sel])
    return out
