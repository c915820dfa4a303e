"""What crosses the wire in a codec plan: hidden states, never zeros (docs/CODECS.md).

- `synthetic(...)`: seeded BF16 hidden states with documented statistics (below), labelled
  "synthetic" wherever a ratio is printed: a ratio on them is not a claim about any model.
- `from_file(path, layers, width)`: real hidden states, safetensors (the format the study's
  hidden-state export writes) or .npy, checked when read against the configured shape
  (layers x width values per token), their checksum and shape recorded.

A `Source` is a token pool (tokens x layers x width BF16, as uint16 bits). A plan's
request bodies are windows of it: body i starts at token i x T (wrapping), so the cycles go
through the file's tokens in order.

Synthetic statistics (seed 0 unless given): per channel a scale drawn log-normal
(sigma 0.6) around 1, per token a gain drawn log-normal (sigma 0.2), values normal around
0 times both; every layer has its own draw; 4 channels of every 6,144 (at least 1) carry
"massive activations", 60x their scale, as real transformer residual streams do. Rounded
to BF16 (round to nearest even, ml_dtypes).
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hopbench.errors import ConfigError

SYNTHETIC_TOKENS = 64  # the synthetic pool: enough windows for every T, small enough to build in ms
MAX_FILE_TOKENS = 4096  # tokens read from a file at most (the rest is not needed to cycle)
MAX_HEADER_BYTES = 16 * 1024 * 1024  # a safetensors header larger than this is not one
_ST_DTYPES = {"BF16": 2, "F16": 2, "F32": 4}
MAX_BODIES = 64  # distinct request bodies per plan (the cycles go round them)
MAX_BODY_MEMORY = 256 * 1024 * 1024


@dataclass(frozen=True)
class Source:
    """A pool of hidden states: `bits` is (tokens, layers * width) uint16 (BF16 bits)."""

    bits: np.ndarray
    layers: int
    width: int
    label: str  # "synthetic (seed 0)" or the file's name
    record: dict[str, Any] = field(default_factory=dict)  # what results keep about it

    @property
    def tokens(self) -> int:
        return int(self.bits.shape[0])

    @property
    def synthetic(self) -> bool:
        return bool(self.record.get("synthetic"))

    def bodies(self, body_bytes: int, tokens: int | None, count: int) -> list[np.ndarray]:
        """`count` distinct request bodies of body_bytes (capped: MAX_BODIES, MAX_BODY_MEMORY):
        consecutive windows of the pool, T tokens each for a token payload, else bytes."""
        flat = self.bits.reshape(-1).view(np.uint8)
        step = tokens * self.bits.shape[1] * 2 if tokens else body_bytes + body_bytes % 2  # whole BF16 values
        count = max(1, min(count, MAX_BODIES, MAX_BODY_MEMORY // max(1, body_bytes)))
        out = []
        for i in range(count):
            start = (i * step) % flat.size
            idx = (start + np.arange(body_bytes)) % flat.size if start + body_bytes > flat.size else None
            out.append(np.ascontiguousarray(flat[idx] if idx is not None else flat[start:start + body_bytes]))
        return out


def synthetic(layers: int, width: int, seed: int = 0, tokens: int = SYNTHETIC_TOKENS) -> Source:
    import ml_dtypes

    rng = np.random.default_rng(seed)
    channel = rng.lognormal(0.0, 0.6, size=(1, layers, width)).astype(np.float32)
    massive = rng.choice(width, size=max(1, width * 4 // 6144), replace=False)
    channel[:, :, massive] *= 60.0
    gain = rng.lognormal(0.0, 0.2, size=(tokens, layers, 1)).astype(np.float32)
    x = rng.standard_normal((tokens, layers, width), dtype=np.float32) * channel * gain
    bits = x.astype(ml_dtypes.bfloat16).view(np.uint16).reshape(tokens, layers * width)
    return Source(bits, layers, width, f"synthetic (seed {seed})",
                  {"synthetic": True, "seed": seed, "tokens": tokens, "layers": layers, "width": width,
                   "statistics": "docs/CODECS.md#synthetic-hidden-states"})


def to_bf16_bits(arr: np.ndarray, dtype: str) -> np.ndarray:
    import ml_dtypes

    if dtype in ("BF16", "uint16"):
        return np.ascontiguousarray(arr).view(np.uint16)
    return np.asarray(arr, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def _shaped(arr: np.ndarray, layers: int, width: int, what: str) -> np.ndarray:
    """(tokens, layers * width): accepts [tokens, layers, width], [tokens, layers*width] and
    either with leading 1s (a batch of one)."""
    shape = list(arr.shape)
    while len(shape) > 2 and shape[0] == 1:
        shape = shape[1:]
    per = layers * width
    if (len(shape) == 3 and shape[1:] == [layers, width]) or (len(shape) == 2 and shape[1] == per):
        if shape[0] < 1:
            raise ConfigError(f"{what}: no tokens")
        return arr.reshape(shape[0], per)
    raise ConfigError(f"{what} has shape {list(arr.shape)}; the configured shape is {layers} layers x {width} values "
                      f"per token (configs/shape.toml): expected [tokens, {layers}, {width}] or [tokens, {per}]")


def _read_safetensors(path: Path, name: str | None) -> tuple[np.ndarray, str, str]:
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ConfigError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
        (n,) = struct.unpack("<Q", head)
        if n > min(MAX_HEADER_BYTES, size - 8):
            raise ConfigError(f"{path}: not a safetensors file (header length {n} does not fit the file)")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{path}: not a safetensors file (header is not JSON: {exc})") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{path}: not a safetensors file (header is not an object)")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    if name is None:
        if len(tensors) != 1:
            raise ConfigError(f"{path} holds {len(tensors)} tensors ({', '.join(sorted(tensors)[:8])}): name one, "
                              f"--payload taps,from={path}:NAME")
        name = next(iter(tensors))
    info = tensors.get(name)
    if not isinstance(info, dict):
        raise ConfigError(f"{path}: no tensor {name!r} (it holds {', '.join(sorted(tensors)[:8])})")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in _ST_DTYPES:  # (a list is unhashable: found by fuzzing)
        raise ConfigError(f"{path}:{name}: dtype {dtype!r}; hidden states must be BF16, F16 or F32")
    if (not isinstance(shape, list) or not all(isinstance(d, int) and 0 <= d <= 1 << 40 for d in shape)
            or not isinstance(offsets, list) or len(offsets) != 2 or not all(isinstance(o, int) for o in offsets)):
        raise ConfigError(f"{path}:{name}: malformed shape or data_offsets in the header")
    begin, end = offsets
    nbytes = math.prod(shape) * _ST_DTYPES[dtype]  # Python ints: a huge shape cannot overflow
    if not 0 <= begin <= end or end - begin != nbytes or 8 + n + end > size:
        raise ConfigError(f"{path}:{name}: data_offsets {offsets} do not hold {shape} x {dtype} inside the file "
                          f"({size} B): truncated or corrupt")
    np_dtype = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}[dtype]
    arr = np.memmap(path, dtype=np_dtype, mode="r", offset=8 + n + begin, shape=tuple(shape) or (1,))
    return arr, dtype, name


def _read_npy(path: Path) -> tuple[np.ndarray, str]:
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except MemoryError:
        raise
    except Exception as exc:  # numpy's header parser raises what it meets (ValueError, TokenError, ...)
        raise ConfigError(f"{path}: not a readable .npy file ({exc.__class__.__name__}: {str(exc)[:120]})") from None
    kind = str(arr.dtype)
    if kind in ("bfloat16", "|V2", "V2"):
        return arr.view(np.uint16), "BF16"
    if kind not in ("uint16", "float16", "float32"):
        raise ConfigError(f"{path}: dtype {kind}; hidden states must be bfloat16 (or uint16 BF16 bits), "
                          "float16 or float32")
    return arr, kind


def from_file(spec: str, layers: int, width: int) -> Source:
    """Real hidden states: FILE or FILE:TENSOR (safetensors), FILE (.npy)."""
    path, name = Path(spec), None
    if not path.exists() and ":" in spec:
        head, _, tail = spec.rpartition(":")
        path, name = Path(head), tail
    if not path.is_file():
        raise ConfigError(f"--payload taps,from={spec}: no such file")
    if path.suffix == ".npy":
        arr, dtype = _read_npy(path)
    elif path.suffix == ".safetensors":
        arr, dtype, name = _read_safetensors(path, name)
    else:
        raise ConfigError(f"--payload taps,from={spec}: hidden states are read from .safetensors or .npy files")
    what = f"{path}" + (f":{name}" if name else "")
    rows = _shaped(arr, layers, width, what)
    used = rows[:MAX_FILE_TOKENS]
    bits = np.ascontiguousarray(to_bf16_bits(np.asarray(used), dtype))
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return Source(bits, layers, width, path.name,
                  {"synthetic": False, "file": str(path), "tensor": name, "sha256": digest.hexdigest(),
                   "shape": list(arr.shape), "dtype": dtype, "tokens": int(rows.shape[0]), "tokens_used": used.shape[0],
                   "layers": layers, "width": width})


def source_for(payload_from: str | None, layers: int, width: int) -> Source:
    """The hidden states a codec encodes: `layers` (the shape's aux layers, as the run's
    config records them: RunConfig.taps) x `width` values a token."""
    if layers < 1:
        raise ConfigError("a codec's hidden states need the shape's aux layers (the config records none)")
    return from_file(payload_from, layers, width) if payload_from else synthetic(layers, width)
