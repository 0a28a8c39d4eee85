"""`kvbench profile aic`: a measured step-time profile CSV for the simulator, from NVIDIA AIConfigurator."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated

import typer

profile_app = typer.Typer(
    no_args_is_help=True, help="Build step-time profiles (CSV) for the simulator's `profile = FILE` cost model."
)


class Backend(enum.StrEnum):
    trtllm = "trtllm"
    vllm = "vllm"
    sglang = "sglang"


@profile_app.command("aic")
def aic(
    model: Annotated[str, typer.Option("--model", "-m", help="Catalog model, e.g. Llama-3.1-8B, DeepSeek-V3.")],
    gpu: Annotated[str, typer.Option("--gpu", "-g", help="Catalog GPU: A100-80GB, H100, H200 or B200.")],
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel GPUs of one engine.")] = 1,
    backend: Annotated[Backend, typer.Option("--backend", "-b", help="Engine whose measured kernels to use.")] = (
        Backend.vllm
    ),
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the CSV here (default: print the cached copy's path).")
    ] = None,
) -> None:
    """Turn AIConfigurator's per-step predictions into a profile CSV (cached per model, GPU, TP, backend and
    AIConfigurator version under ~/.cache/kvbench/aic/). Needs the extra: pip install 'kvbench[aic]'."""
    import shutil

    from kvbench.config import ConfigError
    from kvbench.sim import spec
    from kvbench.sim.cost.aic import cached_profile

    m, g = spec.model(model, "--model"), spec.gpu(gpu, "--gpu")
    if tp < 1 or m.n_heads % tp:
        raise ConfigError(f"--tp {tp}: must divide n_heads = {m.n_heads} of {m.name}")
    if out is not None and out.is_dir():
        raise ConfigError(f"{out}: is a directory, expected an output file path")
    path = cached_profile(m, g, tp, backend.value)
    if out is None:
        typer.echo(str(path))  # the cached CSV, for `profile = "$(kvbench profile aic ...)"`
        return
    shutil.copyfile(path, out)
    typer.echo(f"wrote {out} (cached copy: {path})", err=True)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the kvbench app."""
    app.add_typer(profile_app, name="profile")
