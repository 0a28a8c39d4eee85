"""llama.cpp's llama-server for live tests: build it once per version from PyPI sources, cache it, start and stop it.

`python -m kvbench.devservers.llamacpp build|model|serve|path` is the script interface (used by .ci/run):
- `build`: download the `llama-cpp-python==VERSION` sdist with pip (its sources only), build only the `llama-server`
  target with cmake (the README's set-up section gives the measured time) and keep the binary in
  `~/.cache/kvbench/llama-server-VERSION/` ($KVBENCH_CACHE or $XDG_CACHE_HOME move it); a second call, or a
  concurrent one (a file lock serialises them), reuses it. `$KVBENCH_LLAMA_SERVER` points at another binary.
- `model`: write (or reuse) the tiny random-weight GGUF of `kvbench.devservers.tinymodel` and print its path.
- `serve`: run llama-server on the tiny model on 127.0.0.1 until Ctrl-C (prints the base URL).
- `path`: print the cached binary's path, exit 1 if it is not built.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from kvbench.devservers.tinymodel import cache_dir, tiny_model_path

VERSION = "0.3.36"  # llama-cpp-python release whose vendor/llama.cpp is built
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
)
# -t 1: on 2 cores, ggml's spinning worker threads starve the client on the other core (REFERENCE §6).
SERVER_ARGS = ("-a", "tiny", "-c", "16384", "-np", "4", "-t", "1", "--metrics", "--no-webui", "--offline")


class BuildError(RuntimeError):
    """llama-server could not be built or found (missing tools, failed download or compile)."""


def binary_path(version: str = VERSION) -> Path:
    return cache_dir() / f"llama-server-{version}" / "llama-server"


def find_binary(version: str = VERSION) -> Path | None:
    """$KVBENCH_LLAMA_SERVER if set, else the cached build for `version`, else None."""
    env = os.environ.get("KVBENCH_LLAMA_SERVER")
    if env:
        return Path(env)
    path = binary_path(version)
    return path if path.is_file() and os.access(path, os.X_OK) else None


def require_binary(version: str = VERSION) -> Path:
    path = find_binary(version)
    if path is None or not path.is_file():
        raise BuildError(
            f"llama-server {version} is not built (expected {binary_path(version)}); "
            f"run: python -m kvbench.devservers.llamacpp build"
        )
    return path


def _check_tools() -> None:
    missing = [t for t in ("cmake", "make") if shutil.which(t) is None]
    if shutil.which("c++") is None and shutil.which("g++") is None and shutil.which("clang++") is None:
        missing.append("a C++ compiler (g++ or clang++)")
    if missing:
        raise BuildError(
            f"building llama-server needs {', '.join(missing)}; install them "
            f"(Debian/Ubuntu: apt-get install cmake make g++) or set KVBENCH_LLAMA_SERVER"
        )


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock: a second builder waits here, then finds the binary already cached."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run(cmd: list[str], log: Path, what: str) -> None:
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        code = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT)
    if code != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-25:])
        raise BuildError(f"{what} failed (exit {code}); full log: {log}\n{tail}")


def build(version: str = VERSION, jobs: int = 2, say: Callable[[str], object] = print) -> Path:
    """The llama-server binary for `version`, building it first if it is not cached (idempotent, locked)."""
    target = binary_path(version)
    if target.is_file():
        return target
    _check_tools()
    started = time.monotonic()
    with _file_lock(target.parent.with_name(target.parent.name + ".lock")):
        if target.is_file():  # another process built it while we waited for the lock
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        log = target.parent / "build.log"
        log.write_text("")
        with tempfile.TemporaryDirectory(prefix="kvbench-llama-", dir=target.parent.parent) as tmp:
            say(f"building llama-server {version}, a long compile (README: Set up); log: {log}")
            src = _fetch_sources(version, Path(tmp), log)
            build_dir = Path(tmp) / "build"
            _run(["cmake", "-S", str(src), "-B", str(build_dir), *CMAKE_FLAGS], log, "cmake configure")
            _run(["cmake", "--build", str(build_dir), "--target", "llama-server", f"-j{jobs}"], log, "cmake build")
            built = build_dir / "bin" / "llama-server"
            if not built.is_file():
                raise BuildError(f"cmake finished but {built} is missing; log: {log}")
            partial = target.with_name(".llama-server.partial")
            shutil.copy2(built, partial)
            os.replace(partial, target)  # atomic: a reader never sees a half-copied binary
    say(f"llama-server {version} built in {(time.monotonic() - started) / 60:.1f} min: {target}")
    return target


def _fetch_sources(version: str, tmp: Path, log: Path) -> Path:
    """pip-download the llama-cpp-python sdist and unpack it; returns its vendor/llama.cpp directory."""
    # --no-binary names only llama-cpp-python: `:all:` would also build its build dependencies (scikit-build-core
    # and theirs) from source just so pip can read the sdist's metadata, minutes before compiling starts.
    _run(
        [
            *(sys.executable, "-m", "pip", "download", f"llama-cpp-python=={version}"),
            *("--no-deps", "--no-binary", "llama-cpp-python", "-d", str(tmp)),
        ],
        log,
        "pip download of llama-cpp-python sources",
    )
    sdists = sorted(tmp.glob("llama_cpp_python-*.tar.gz"))
    if not sdists:
        raise BuildError(f"pip download produced no llama_cpp_python sdist in {tmp}; log: {log}")
    with tarfile.open(sdists[0]) as tar:
        tar.extractall(tmp, filter="data")
    src = tmp / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if not (src / "CMakeLists.txt").is_file():
        raise BuildError(f"{src} has no CMakeLists.txt: unexpected sdist layout")
    return src


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_port_free(port: int) -> None:
    """Fail before starting a server on a taken port: its /health would be answered by the other server."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT leftovers do not count, listeners do
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            raise RuntimeError(f"127.0.0.1:{port} is in use ({e.strerror}); pick another --port") from None


def wait_healthy(base: str, proc: subprocess.Popen, log: Path | None, timeout_s: float = 60.0) -> None:
    """Poll GET {base}/health until 200; fail early, with the server's log tail, if the process exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode} before it was ready{_tail(log)}")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"server at {base} not healthy after {timeout_s:.0f} s{_tail(log)}")


def _tail(log: Path | None) -> str:
    if log is None or not log.is_file():
        return ""
    return "; log tail:\n" + "".join(log.read_text(errors="replace").splitlines(keepends=True)[-20:])


def stop(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`; always reaps the process."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def llama_server(
    model: Path | None = None, port: int | None = None, extra: tuple[str, ...] = (), log: Path | None = None
) -> Iterator[str]:
    """Run llama-server on 127.0.0.1 (tiny model by default); yields the base URL `http://127.0.0.1:PORT`.

    The server is terminated on exit, also when the body raises. Its output goes to `log` (a temp file if None).
    """
    binary = require_binary()
    model = model or tiny_model_path()
    port = port or free_port()
    check_port_free(port)
    if log is None:
        fd, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
        os.close(fd)
        log = Path(name)
    base = f"http://127.0.0.1:{port}"
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), *SERVER_ARGS, *extra]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_healthy(base, proc, log)
        yield base
    finally:
        stop(proc)


def serve_until_stopped(seed: int, port: int) -> int:
    """Run the tiny model until Ctrl-C or SIGTERM (both stop llama-server too) or until llama-server exits."""
    import signal

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    proc_log = cache_dir() / f"llama-server-{port}.log"
    with llama_server(tiny_model_path(seed), port, log=proc_log) as base:
        print(f"llama-server ready: {base}/v1 (model 'tiny', log {proc_log}); Ctrl-C stops it", file=sys.stderr)
        with contextlib.suppress(KeyboardInterrupt):
            while _health_ok(base):
                time.sleep(1.0)
            print(f"llama-server stopped answering; log tail:{_tail(proc_log)}", file=sys.stderr)
            return 1
    return 0


def _health_ok(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvbench.devservers.llamacpp", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build llama-server (or reuse the cached build); prints its path")
    b.add_argument("--jobs", "-j", type=int, default=2, help="parallel compile jobs (default 2)")
    m = sub.add_parser("model", help="write (or reuse) the tiny GGUF model; prints its path")
    m.add_argument("--seed", type=int, default=0, help="seed of the weights and word list (default 0)")
    s = sub.add_parser("serve", help="run llama-server on the tiny model on 127.0.0.1 until Ctrl-C")
    s.add_argument("--port", type=int, default=8080, help="TCP port (default 8080)")
    s.add_argument("--seed", type=int, default=0, help="tiny model seed (default 0)")
    sub.add_parser("path", help="print the cached llama-server path; exit 1 if it is not built")
    a = ap.parse_args(argv)
    try:
        return _dispatch(a)
    except RuntimeError as e:  # BuildError, or a server that would not start
        print(f"kvbench.devservers.llamacpp: error: {e}", file=sys.stderr)
        return 1


def _dispatch(a: argparse.Namespace) -> int:
    if a.cmd == "build":
        print(build(jobs=a.jobs, say=lambda msg: print(msg, file=sys.stderr)))
    elif a.cmd == "model":
        print(tiny_model_path(a.seed))
    elif a.cmd == "path":
        path = find_binary()
        if path is None:
            print(f"not built: {binary_path()}", file=sys.stderr)
            return 1
        print(path)
    else:
        return serve_until_stopped(a.seed, a.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
