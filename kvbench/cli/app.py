"""The `kvbench` command line: a thin typer app; heavy imports happen inside commands so --help is instant."""

from __future__ import annotations

import errno
import functools
import gc
import importlib
import os
import signal
import sys
from types import FrameType
from typing import Annotated, NoReturn

import typer

from kvbench.cli.command import Group
from kvbench.config import ConfigError

EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

# Each command (or group) name and the module of kvbench.cli that registers it (tests/cli/test_app_commands.py
# checks this against the modules). `kvbench NAME ...` registers that module alone: typer builds the click
# parameters of every registered command before it parses, ~7x the instructions of the replay command's own.
COMMANDS = {
    "replay": "replay",
    "trace": "trace",
    "kv-transfer": "sim",
    "summary": "metrics",
    "sql": "metrics",
    "compare": "metrics",
    "gate": "metrics",
    "report": "report",
    "timeline": "report",
    "goodput": "goodput",
    "sweep": "sweep",
    "plan": "plan",
    "serve": "serve",
    "profile": "profile",
    "calibrate": "calibrate",
    "fidelity": "calibrate",
}
MODULES = tuple(dict.fromkeys(COMMANDS.values()))  # in the order `kvbench --help` lists them


def _version(value: bool) -> None:
    if value:
        from kvbench import __version__

        print(f"kvbench {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Exit codes: 0 ok, 1 failed run or gate regression, 2 bad input, 130 interrupted."""


def build_app(modules: tuple[str, ...] = MODULES) -> typer.Typer:
    """The kvbench app with the commands of these modules of kvbench.cli. Each module only declares typer
    signatures and imports its machinery lazily inside the command bodies."""
    built = typer.Typer(
        name="kvbench",
        cls=Group,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
        help="Replay LLM-serving workloads against a simulated PD cluster or a real OpenAI-compatible endpoint; "
        "every run writes one Parquet event log that summaries, reports and CI gates are computed from.",
    )
    built.callback()(_root)
    for name in modules:
        importlib.import_module(f"kvbench.cli.{name}").register(built)
    return built


def _app_for(args: list[str]) -> typer.Typer:
    """The app that runs `kvbench ARGS`: the named command's module alone; every command for anything else (no
    command, --help, --version, an unknown name), so that listings and errors read as they always did."""
    module = COMMANDS.get(args[0]) if args else None
    return build_app((module,)) if module else _every_command()


@functools.cache
def _every_command() -> typer.Typer:
    return build_app()


def __getattr__(name: str) -> typer.Typer:
    """`kvbench.cli.app.app`: the app with every command, built when first asked for (tests, completion)."""
    if name == "app":
        return _every_command()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _stdout_file() -> tuple[int, int] | None:
    """(device, inode) of the file behind stdout's descriptor, None when stdout is not a real file."""
    try:
        st = os.fstat(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # e.g. captured in-process by a test runner
        return None
    return st.st_dev, st.st_ino


def _discard_stdout() -> None:
    # Point stdout's descriptor at /dev/null so the interpreter's final flush of what is still buffered cannot
    # fail again ("Exception ignored ... BrokenPipeError" and exit 120): recipe from the `signal` docs' SIGPIPE note.
    if _stdout_file() is None:
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _exit(code: int | str | None) -> NoReturn:
    """Exit with `code`, first flushing stdout so a reader that has gone is noticed here: exit 0 quietly then."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
        code = EXIT_OK
    # The interpreter's closing collection would walk every object still alive (all the imported modules: ~20 ms
    # after a run) to find cycles the process exit frees anyway; everything kvbench writes is closed by now.
    gc.freeze()
    sys.exit(code)


def _usage_line(e: Exception) -> str:
    """click's error (vendored by typer) as one line: 'replay: Invalid value for --seed: ... (see --help)'."""
    names, ctx = [], getattr(e, "ctx", None)
    while ctx is not None and ctx.parent is not None:  # the subcommand path, without the program's own name
        names.append(ctx.info_name)
        ctx = ctx.parent
    where = f"{' '.join(reversed(names))}: " if names else ""
    message = " ".join(e.format_message().split())  # type: ignore[attr-defined]
    return f"{where}{message} (see --help)"


def _is_click_error(e: Exception) -> bool:
    # typer >= 0.20 vendors click: match its ClickException by shape rather than by a private import path.
    return hasattr(e, "format_message") and isinstance(getattr(e, "exit_code", None), int)


def _terminate_as_interrupt() -> None:
    """SIGTERM (a batch scheduler, `timeout`, `kill`) stops a run as Ctrl-C does: the requests still open are
    cancelled, the logs flushed and run.json says interrupted, rather than losing the buffered events."""
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """Whatever handles Ctrl-C now (asyncio's runner cancels its main task; else KeyboardInterrupt), also when
    the shell started us with SIGINT ignored (a background job)."""
    on_sigint = signal.getsignal(signal.SIGINT)
    if callable(on_sigint):
        on_sigint(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def main() -> None:
    stdout, stdout_file = sys.stdout, _stdout_file()
    _terminate_as_interrupt()
    try:
        code = _app_for(sys.argv[1:])(standalone_mode=False)
    except SystemExit as e:
        # Both libraries that print for us turn EPIPE into exit 1 before we can see it. typer's click
        # (typer/core.py _main) wraps sys.stdout in a PacifyFlushWrapper (attribute .wrapped); rich
        # (Console.on_broken_pipe) dup2()s /dev/null over stdout's descriptor. Either means the reader has gone.
        if getattr(sys.stdout, "wrapped", None) is stdout or _stdout_file() != stdout_file:
            _discard_stdout()
            sys.exit(EXIT_OK)
        _exit(e.code)
    except ConfigError as e:
        print(f"kvbench: error: {e}", file=sys.stderr)
        _exit(EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        print("kvbench: interrupted", file=sys.stderr)
        _exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        _discard_stdout()
        sys.exit(EXIT_OK)
    except OSError as e:
        # The file system said no (disk full, a name too long, no permission): one line, never a traceback.
        print(f"kvbench: error: {e.strerror or e}: {str(e.filename or '')[:200]}", file=sys.stderr)
        _exit(EXIT_REGRESSION if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO) else EXIT_BAD_INPUT)
    except Exception as e:
        if not _is_click_error(e):
            raise
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `kvbench` or a bare command group: show its help
            print(e.format_message(), file=sys.stderr)  # type: ignore[attr-defined]
        else:
            print(f"kvbench: error: {_usage_line(e)}", file=sys.stderr)
        _exit(e.exit_code)  # type: ignore[attr-defined]
    _exit(code if isinstance(code, int) else EXIT_OK)
