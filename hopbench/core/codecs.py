"""Payload codecs inside the measured hop (`--codec NAME[:OPTIONS]`, docs/CODECS.md).

The request body is BF16 hidden states. A codec plan's sender encodes each cycle's body
and the receiver decodes it, both inside the client's timed round trip; the reply is
unchanged. Each codec is a library made for it:

  none                  the raw bytes (the default; no codec frame at all)
  zstd:LEVEL            zstandard, LEVEL 1..19 (default 1)               lossless
  lz4                   lz4.block                                        lossless
  blosc2:FILTER+CODEC   blosc2 with typesize 2: FILTER shuffle|bitshuffle|none (the
                        exponent-plane trick), CODEC zstd|lz4|blosclz, :LEVEL (default 1)
                                                                          lossless
  fp8                   e4m3 with one float32 scale per token and layer (absmax / 448);
                        the rounding is ml_dtypes' own cast                  lossy
  int8                  round(x / s), s = absmax / 127 per token and layer   lossy

A group is `width` values (one token's layer for a token payload); the last group of a
byte-sized payload may be shorter, and an odd trailing byte crosses raw.

On the wire (docs/PROTOCOL.md "Codec plans") each request is two messages: a 16-byte
frame header (seq u64, encoded length u32, CRC-32 of the body the receiver must decode
to, 0 without --verify) and the encoded body: core/codec_wire.py, whose codec channels are
wrappers (like the GPU path's staged channels). A codec's profile off the wire:
orchestration/codecs.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hopbench.core import protocol as P
from hopbench.errors import ConfigError, ProtocolError, TransportUnavailable
from hopbench.records import HIDDEN_DEFAULT

INSTALL = "pip install 'hopbench[codecs]'"
FRAME, FRAME_BYTES = P.CODEC_FRAME, P.CODEC_FRAME_BYTES  # seq, encoded length, CRC-32 of the decoded body
NAMES = ("none", "zstd", "lz4", "blosc2", "fp8", "int8")
LIBRARY = {"zstd": "zstandard", "lz4": "lz4", "blosc2": "blosc2", "fp8": "ml_dtypes", "int8": "numpy"}
_FILTERS = ("shuffle", "bitshuffle", "none")
_BLOSC_CODECS = ("zstd", "lz4", "blosclz")
FP8_MAX = 448.0  # e4m3fn's largest finite value


class CodecUnavailable(TransportUnavailable):
    """A codec's library is not installed."""


def decodable() -> list[str]:
    """The codec names this install can encode and decode (their libraries importable), as a
    server announces them in its HELLO caps so a client refuses a codec it lacks before
    anything is measured."""
    import importlib.util

    def present(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            return False

    return [n for n in NAMES if n == "none" or present(LIBRARY[n])]


def _lib(name: str) -> Any:
    import importlib

    try:
        return importlib.import_module({"lz4": "lz4.block"}.get(name, name))
    except ImportError:
        raise CodecUnavailable(f"this codec needs {name} (not installed); install it with: {INSTALL}") from None


def _fail(spec: str, why: str) -> ConfigError:
    return ConfigError(f"--codec {spec}: {why}. Codecs: none, zstd[:LEVEL], lz4, blosc2[:FILTER+CODEC[:LEVEL]] "
                       f"(FILTER {'|'.join(_FILTERS)}, CODEC {'|'.join(_BLOSC_CODECS)}), fp8, int8 (docs/CODECS.md)")


class Codec:
    """encode(body uint8 array) -> bytes-like; decode(encoded, out uint8 array) fills out."""

    name = "none"
    lossless = True

    def __init__(self, width: int):
        self.width = width

    def encode(self, body: np.ndarray) -> Any:
        return body

    def decode(self, enc: Any, out: np.ndarray) -> None:
        got = np.frombuffer(enc, dtype=np.uint8)
        if got.size != out.size:  # none: the body as it is, exactly
            raise ProtocolError(f"a none frame carries {got.size} B; the body is {out.size} B (none sends it as it is)")
        out[:] = got

    def bound(self, body_bytes: int) -> int:
        """The largest encoded body a receiver accepts for body_bytes (a longer frame is
        malformed): none's is the body itself; the lossless libraries' body + body/8 + 4096
        (above zstd's, lz4's and blosc2's own worst cases); fp8's and int8's their exact size."""
        return body_bytes if self.name == "none" else body_bytes + body_bytes // 8 + 4096

    @property
    def library(self) -> str:
        """The library and its version (recorded with every codec result)."""
        from importlib.metadata import PackageNotFoundError, version

        dist = LIBRARY.get(self.name.split(":")[0])
        if dist is None:
            return "-"
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            return f"{dist} (version unknown)"


def _fill(out: np.ndarray, got: bytes, what: str) -> None:
    """A library's decoded bytes into the receive buffer, which they must fill exactly."""
    if len(got) != out.size:
        raise ProtocolError(f"{what} decodes to {len(got)} B, expected {out.size}")
    out[:] = np.frombuffer(got, dtype=np.uint8)


class Zstd(Codec):
    lossless = True

    def __init__(self, width: int, level: int):
        super().__init__(width)
        zstd = _lib("zstandard")
        self.name = f"zstd:{level}"
        self._c, self._d = zstd.ZstdCompressor(level=level), zstd.ZstdDecompressor()

    def encode(self, body: np.ndarray) -> Any:
        return self._c.compress(body)

    def decode(self, enc: Any, out: np.ndarray) -> None:
        _fill(out, self._d.decompress(enc, max_output_size=out.size), "zstd frame")


class Lz4(Codec):
    name = "lz4"

    def __init__(self, width: int):
        super().__init__(width)
        self._b = _lib("lz4")

    def encode(self, body: np.ndarray) -> Any:
        return self._b.compress(body, store_size=False)

    def decode(self, enc: Any, out: np.ndarray) -> None:
        _fill(out, self._b.decompress(enc, uncompressed_size=out.size), "lz4 block")


class Blosc2(Codec):
    def __init__(self, width: int, flt: str, codec: str, level: int):
        super().__init__(width)
        b = self._b = _lib("blosc2")
        self.name = f"blosc2:{flt}+{codec}:{level}"
        self._kw = {"typesize": 2, "clevel": level, "nthreads": 1,
                    "filters": [{"shuffle": b.Filter.SHUFFLE, "bitshuffle": b.Filter.BITSHUFFLE,
                                 "none": b.Filter.NOFILTER}[flt]],
                    "codec": {"zstd": b.Codec.ZSTD, "lz4": b.Codec.LZ4, "blosclz": b.Codec.BLOSCLZ}[codec]}

    def encode(self, body: np.ndarray) -> Any:
        return self._b.compress2(body, **self._kw)

    def decode(self, enc: Any, out: np.ndarray) -> None:
        try:
            n = self._b.decompress2(enc, dst=out)
        except Exception as exc:  # blosc2 raises RuntimeError/ValueError on a corrupt chunk
            raise ProtocolError(f"blosc2 chunk does not decode: {exc}") from None
        if n is not None and not isinstance(n, (bytes, bytearray)) and n != out.size:
            raise ProtocolError(f"blosc2 chunk decodes to {n} B, expected {out.size}")


def _compiled() -> Any:
    """hopbench._codec (hopbench/core/_codec.c) where it was built, else None (NumPy)."""
    try:
        from hopbench import _codec
    except ImportError:
        return None
    return _codec


class _Scratch:
    """The working arrays of one body size, made once (per plan: a codec is made per plan) and
    reused every cycle: a fresh array per cycle costs page faults that cost more than the
    arithmetic (seen: 1.4 ms instead of 0.2 ms for an int8 decode of 184 KB)."""

    def __init__(self, n: int, groups: int):
        self.wide = np.empty(n, dtype=np.uint32)  # BF16 bits widened, then the float32 values
        self.key = np.empty(n, dtype=np.uint32)
        self.low = np.empty(n, dtype=np.uint32)
        self.flag = np.empty(n, dtype=bool)
        self.mag = np.empty(n, dtype=np.uint16)
        self.inv = np.empty(groups, dtype=np.float32)


class _Scaled(Codec):
    """A lossy codec: one float32 scale per group of `width` values, then a byte per value;
    on the wire: scales (4 B per group), codes (a byte per value), an odd trailing byte raw.
    Every step writes into working arrays made once per body size (_Scratch)."""

    lossless = False
    qmax = 1.0

    def __init__(self, width: int, kernel: str = "auto"):
        super().__init__(width)
        self._scratch: dict[int, _Scratch] = {}
        self._encoded: dict[int, np.ndarray] = {}  # the encoded message per body size, reused every cycle
        #: the per-value loops: "compiled" (hopbench/core/_codec.c) where built, else "numpy"
        self.kernel = "numpy" if kernel == "numpy" or _compiled() is None else "compiled"

    def _groups(self, n_vals: int) -> int:
        return -(-n_vals // self.width)

    def _work(self, n: int) -> _Scratch:
        w = self._scratch.get(n)
        if w is None:
            w = self._scratch[n] = _Scratch(n, self._groups(n))
        return w

    def bound(self, body_bytes: int) -> int:
        n = body_bytes // 2
        return self._groups(n) * 4 + n + body_bytes % 2

    def _rows(self, n: int) -> list[tuple[int, int, int]]:
        """(first value, end, rows) of the full groups and of a short last group."""
        full = n // self.width
        parts = [(0, full * self.width, full)] if full else []
        return parts + ([(full * self.width, n, 1)] if n % self.width else [])

    def encode(self, body: np.ndarray) -> Any:
        n = body.size // 2
        bits = body[:2 * n].view(np.uint16)
        g = self._groups(n)
        out = self._encoded.get(body.size)
        if out is None:  # made once per body size: the channel has sent it before the next encode
            out = self._encoded[body.size] = np.empty(g * 4 + n + body.size % 2, dtype=np.uint8)
        scales = out[:g * 4].view(np.float32)
        codes = out[g * 4:g * 4 + n]
        if body.size % 2:
            out[-1] = body[-1]
        if self.kernel == "compiled":
            _compiled().encode(bits, self.width, self.qmax, self._table(), scales, codes)
            return out
        w = self._work(n)
        np.bitwise_and(bits, 0x7FFF, out=w.mag)  # |x| as BF16 bits: ordered like the values (finite ones)
        np.copyto(w.wide, bits)
        np.left_shift(w.wide, 16, out=w.wide)
        x = w.wide.view(np.float32)
        for lo, hi, rows in self._rows(n):
            g0 = lo // self.width
            amax = (w.mag[lo:hi].reshape(rows, -1).max(axis=1).astype(np.uint32) << 16).view(np.float32)
            s = scales[g0:g0 + rows]
            s[:] = np.where(amax > 0, amax / self.qmax, 1.0)
            inv = w.inv[g0:g0 + rows]
            np.divide(1.0, s, out=inv)
            np.multiply(x[lo:hi].reshape(rows, -1), inv[:, None], out=x[lo:hi].reshape(rows, -1))
        self._quantize(x, codes, w)
        return out

    def decode(self, enc: Any, out: np.ndarray) -> None:
        n = out.size // 2
        g = self._groups(n)
        buf = np.frombuffer(enc, dtype=np.uint8)
        if buf.size != self.bound(out.size):
            raise ProtocolError(f"{self.name} frame is {buf.size} B, expected {self.bound(out.size)}")
        scales = buf[:g * 4].view(np.float32)
        if out.size % 2:
            out[-1] = buf[-1]
        if self.kernel == "compiled":
            _compiled().decode(buf[g * 4:g * 4 + n], scales, self.width, self._lut(), out[:2 * n])
            return
        w = self._work(n)
        y = w.wide.view(np.float32)
        self._dequantize(buf[g * 4:g * 4 + n], y)
        for lo, hi, rows in self._rows(n):
            g0 = lo // self.width
            np.multiply(y[lo:hi].reshape(rows, -1), scales[g0:g0 + rows, None], out=y[lo:hi].reshape(rows, -1))
        # float32 -> BF16 bits, round to nearest even (ml_dtypes' cast, for finite values)
        u, t = w.wide, w.key
        np.right_shift(u, 16, out=t)
        np.bitwise_and(t, 1, out=t)
        np.add(t, 0x7FFF, out=t)
        np.add(t, u, out=t)
        np.right_shift(t, 16, out=t)
        np.copyto(out[:2 * n].view(np.uint16), t, casting="unsafe")

    def _table(self) -> Any:
        """The encode table (fp8), or None (int8 rounds arithmetically)."""
        return None

    def _lut(self) -> Any:
        """The decode table (fp8), or None (int8 codes are the values)."""
        return None

    def _quantize(self, x: np.ndarray, codes: np.ndarray, w: _Scratch) -> None:
        raise NotImplementedError

    def _dequantize(self, codes: np.ndarray, y: np.ndarray) -> None:
        raise NotImplementedError


class Fp8(_Scaled):
    """e4m3fn codes. The rounding is ml_dtypes' cast, tabulated once: a 65,536-entry table of
    ml_dtypes' e4m3 code for each BF16-truncated float32, indexed by the top 16 bits with
    the low 16 folded into a sticky bit (the same round-to-nearest-even as the cast itself:
    e4m3 rounds at a higher bit, so the table sees ties exactly; tests check it equals
    ml_dtypes' own cast)."""

    name = "fp8"
    qmax = FP8_MAX

    def __init__(self, width: int, kernel: str = "auto"):
        super().__init__(width, kernel)
        ml = _lib("ml_dtypes")
        keys = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            self._enc = keys.astype(ml.float8_e4m3fn).view(np.uint8)
        self._dec = np.arange(256, dtype=np.uint8).view(ml.float8_e4m3fn).astype(np.float32)

    def _table(self) -> Any:
        return self._enc

    def _lut(self) -> Any:
        return self._dec

    def _quantize(self, x: np.ndarray, codes: np.ndarray, w: _Scratch) -> None:
        n = x.size
        u, key, low, flag = x.view(np.uint32), w.key[:n], w.low[:n], w.flag[:n]
        np.right_shift(u, 16, out=key)
        np.bitwise_and(u, 0xFFFF, out=low)
        np.not_equal(low, 0, out=flag)
        np.bitwise_or(key, flag, out=key)
        np.take(self._enc, key, out=codes)

    def _dequantize(self, codes: np.ndarray, y: np.ndarray) -> None:
        np.take(self._dec, codes, out=y)


class Int8(_Scaled):
    name = "int8"
    qmax = 127.0

    def _quantize(self, x: np.ndarray, codes: np.ndarray, w: _Scratch) -> None:
        np.rint(x, out=x)
        np.copyto(codes.view(np.int8), x, casting="unsafe")

    def _dequantize(self, codes: np.ndarray, y: np.ndarray) -> None:
        np.copyto(y, codes.view(np.int8))


def _level(spec: str, text: str, lo: int, hi: int) -> int:
    if not (text.isascii() and text.isdigit()) or not lo <= int(text) <= hi:
        raise _fail(spec, f"level {text!r} must be an integer {lo}..{hi}")
    return int(text)


_HEAP_STEADY: list[bool] = []


def steady_heap() -> bool:
    """Keep glibc from handing large blocks back to the kernel between cycles: a codec
    library returns a fresh buffer per call (zstd's, lz4's output), and with glibc's defaults
    each one is a new mmap whose pages fault in again every cycle (measured: a decode of
    184 KB at 5x its cost). Raising the mmap and trim thresholds (32 MiB / 64 MiB) makes
    them reuse the heap, as a serving process's allocator would after warm-up. Once per
    process; False where there is no glibc mallopt."""
    if not _HEAP_STEADY:
        ok = False
        try:
            import ctypes

            libc = ctypes.CDLL(None)
            ok = bool(libc.mallopt(-3, 32 << 20)) and bool(libc.mallopt(-1, 64 << 20))  # M_MMAP_, M_TRIM_THRESHOLD
        except (OSError, AttributeError):
            pass
        _HEAP_STEADY.append(ok)
    return _HEAP_STEADY[0]


def parse(spec: str, width: int) -> Codec:
    """The codec a --codec value names, its library loaded: ConfigError for an unknown name
    or option (with the list), CodecUnavailable for a missing library (with the install line)."""
    name, colon, opts = spec.partition(":")  # exactly docs/CODECS.md's grammar: no space, no empty level
    if name not in NAMES:
        raise _fail(spec, f"unknown codec {name!r}")
    if name in ("none", "lz4", "fp8", "int8"):
        if colon:
            raise _fail(spec, f"{name} takes no options")
        return {"none": Codec, "lz4": Lz4, "fp8": Fp8, "int8": Int8}[name](width)
    if name == "zstd":
        return Zstd(width, _level(spec, opts, 1, 19) if colon else 1)
    pipe, _, level = opts.partition(":")
    flt, _, codec = (pipe or "shuffle+zstd").partition("+")
    if flt not in _FILTERS or codec not in _BLOSC_CODECS:
        raise _fail(spec, f"blosc2 takes FILTER+CODEC, not {pipe!r}")
    return Blosc2(width, flt, codec, _level(spec, level, 1, 9) if level else 1)


def canonical(spec: str | None, width: int = HIDDEN_DEFAULT) -> str:
    """The one spelling of a codec (zstd -> zstd:1), checked; 'none' for None."""
    return parse(spec or "none", width).name


ALL = ("zstd:1", "zstd:3", "lz4", "blosc2:shuffle+zstd:1", "blosc2:bitshuffle+lz4:1", "fp8", "int8")


def bf16_floats(body: np.ndarray) -> np.ndarray:
    """A body's BF16 values (its bytes, an odd trailing byte left out) as float32, exactly."""
    return (body[:body.size // 2 * 2].view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def reconstruction_error(codec: Codec, bodies: list[np.ndarray]) -> dict[str, float]:
    """A lossy codec's error on these bodies: relative RMS and max absolute (worst body), and
    the cosine similarity of each token-layer row (min and median)."""
    worst = {"rel_rms": 0.0, "max_abs": 0.0}
    cosines = []
    width = codec.width
    for body in bodies:
        back = np.empty_like(body)
        codec.decode(codec.encode(body), back)
        x, y = bf16_floats(body), bf16_floats(back)
        worst["rel_rms"] = max(worst["rel_rms"], float(np.sqrt(np.mean((x - y) ** 2) / max(np.mean(x ** 2), 1e-30))))
        worst["max_abs"] = max(worst["max_abs"], float(np.max(np.abs(x - y))) if x.size else 0.0)
        rows = x.size // width
        if rows:
            xr, yr = x[:rows * width].reshape(rows, width), y[:rows * width].reshape(rows, width)
            cosines.append(np.sum(xr * yr, axis=1) / np.maximum(
                np.linalg.norm(xr, axis=1) * np.linalg.norm(yr, axis=1), 1e-30))
    cos = np.concatenate(cosines) if cosines else np.array([1.0])
    return {**worst, "cosine_min": float(cos.min()), "cosine_median": float(np.median(cos))}
