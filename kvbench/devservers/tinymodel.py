"""A tiny random-weight llama GGUF (word vocabulary, embedded tokenizer and chat template) for live llama.cpp tests.

Shape: 2 layers, d=64, 4 heads, FFN 128, ~790 tokens; about 0.3 MB, written in well under a second, byte-identical
for a seed. The vocabulary is the prompt synthesiser's word list (`kvbench.http.prompts.WORDS`), each word with
and without a leading space, plus the 256 single bytes. The tokenizer is llama.cpp's `rwkv` type (greedy longest
match over a trie of the token strings), so a word needs no BPE merges: every prompt word is exactly one token
(a block of N words plus its LF is N + 1 tokens) and any other byte falls back to a one-byte token. A shared text
prefix is therefore a shared token prefix, and llama.cpp's prefix cache sees exactly the trace's reuse.

The model never samples an end-of-generation token, so outputs always run to `max_tokens`: one residual
dimension (`_CONST_DIM`) is a large constant in every embedding and no layer writes to it, so after the final
RMSNorm it is ~sqrt(d) for every position; the output rows of every non-word token weigh that dimension with
-1000 (logit ~ -8000) while word rows have 0 there and tiny random weights elsewhere (near-uniform over words).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

FORMAT_VERSION = 1  # bump when the file layout changes: it is part of the cached file name
N_LAYERS, D_MODEL, N_HEADS, D_FFN, N_CTX = 2, 64, 4, 128, 16384
_CONST_DIM, _CONST, _FORBID = 0, 10.0, -1000.0
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2; 0 is EOS
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def cache_dir() -> Path:
    """$KVBENCH_CACHE, else $XDG_CACHE_HOME/kvbench, else ~/.cache/kvbench."""
    if os.environ.get("KVBENCH_CACHE"):
        return Path(os.environ["KVBENCH_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kvbench"


def words() -> list[str]:
    """The word tokens without their leading space: the prompt synthesiser's words, sorted."""
    from kvbench.http.prompts import WORDS

    return sorted(set(WORDS))


def _escape(raw: bytes) -> str:
    """A token's text in the rwkv vocabulary's escaped form (llama.cpp unescapes \\t \\n \\r \\\\ \\xNN)."""
    out = []
    for b in raw:
        if b == 0x5C:
            out.append("\\\\")
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\x{b:02x}")
    return "".join(out)


def vocabulary() -> tuple[list[str], int]:
    """(escaped token strings, index of the first sampled token): specials, 256 bytes, "word"s, then " word"s.

    Only " word" tokens are ever sampled, so generated text re-tokenizes to the same count (multi-turn chat).
    """
    tokens = list(SPECIALS) + [_escape(bytes([b])) for b in range(256)] + words()
    first_sampled = len(tokens)
    tokens += [" " + w for w in words()]
    return tokens, first_sampled


def _weights(n_vocab: int, first_sampled: int, seed: int) -> dict[str, np.ndarray]:
    import numpy as np

    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int, scale: float = 0.02) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    embd = mat(n_vocab, D_MODEL)
    embd[:, _CONST_DIM] = _CONST
    out = mat(n_vocab, D_MODEL, 0.002)
    out[:, _CONST_DIM] = 0.0
    out[:first_sampled, _CONST_DIM] = _FORBID  # specials, bytes, bare words: never sampled (EOS included)
    t: dict[str, np.ndarray] = {
        "token_embd.weight": embd.astype(np.float16),
        "output_norm.weight": np.ones(D_MODEL, np.float32),
        "output.weight": out.astype(np.float16),
    }
    for i in range(N_LAYERS):
        wo, down = mat(D_MODEL, D_MODEL), mat(D_MODEL, D_FFN)
        wo[_CONST_DIM, :] = 0.0  # nothing writes to the constant dimension (numpy rows = output features)
        down[_CONST_DIM, :] = 0.0
        layer = {
            "attn_norm": np.ones(D_MODEL, np.float32),
            "ffn_norm": np.ones(D_MODEL, np.float32),
            "attn_q": mat(D_MODEL, D_MODEL),
            "attn_k": mat(D_MODEL, D_MODEL),
            "attn_v": mat(D_MODEL, D_MODEL),
            "attn_output": wo,
            "ffn_gate": mat(D_FFN, D_MODEL),
            "ffn_up": mat(D_FFN, D_MODEL),
            "ffn_down": down,
        }
        for name, w in layer.items():
            t[f"blk.{i}.{name}.weight"] = w if w.ndim == 1 else w.astype(np.float16)
    return t


def write_tiny_model(path: str | Path, seed: int = 0) -> Path:
    """Write the tiny model to `path` (atomically: a temp file renamed into place); returns the path."""
    import gguf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens, first_sampled = vocabulary()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name(f"kvbench-tiny-seed{seed}")
    for add, value in (
        (w.add_context_length, N_CTX),
        (w.add_embedding_length, D_MODEL),
        (w.add_block_count, N_LAYERS),
        (w.add_feed_forward_length, D_FFN),
        (w.add_head_count, N_HEADS),
        (w.add_head_count_kv, N_HEADS),
        (w.add_rope_dimension_count, D_MODEL // N_HEADS),
        (w.add_vocab_size, len(tokens)),
    ):
        add(value)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("rwkv")
    w.add_token_list(tokens)
    control, normal = gguf.TokenType.CONTROL, gguf.TokenType.NORMAL
    w.add_token_types([control if i < len(SPECIALS) else normal for i in range(len(tokens))])
    w.add_eos_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    for name, tensor in _weights(len(tokens), first_sampled, seed).items():
        w.add_tensor(name, tensor)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)
    return path


def tiny_model_path(seed: int = 0) -> Path:
    """The cached tiny model for `seed`, written on first use (cheap, so no lock: the rename is atomic)."""
    vocab = hashlib.sha256("\n".join(vocabulary()[0]).encode()).hexdigest()[:8]  # a new word list, a new file
    path = cache_dir() / "models" / f"tiny-v{FORMAT_VERSION}-{vocab}-seed{seed}.gguf"
    if not path.is_file():
        write_tiny_model(path, seed)
    return path
