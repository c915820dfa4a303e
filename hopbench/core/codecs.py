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
to, 0 without --verify) and the encoded body. The codec channels below are wrappers
(like the GPU path's staged channels): the timing loops stay the same, and each side reads
its one clock around its codec call.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from hopbench.core import protocol as P
from hopbench.errors import ConfigError, ProtocolError, TransportUnavailable

INSTALL = "pip install 'hopbench[codecs]'"
FRAME, FRAME_BYTES = P.CODEC_FRAME, P.CODEC_FRAME_BYTES  # seq, encoded length, CRC-32 of the decoded body
NAMES = ("none", "zstd", "lz4", "blosc2", "fp8", "int8")
LIBRARY = {"zstd": "zstandard", "lz4": "lz4", "blosc2": "blosc2", "fp8": "ml_dtypes", "int8": "numpy"}
_FILTERS = ("shuffle", "bitshuffle", "none")
_BLOSC_CODECS = ("zstd", "lz4", "blosclz")
FP8_MAX = 448.0  # e4m3fn's largest finite value


class CodecUnavailable(TransportUnavailable):
    """A codec's library is not installed."""


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
        out[:] = np.frombuffer(enc, dtype=np.uint8)

    def bound(self, body_bytes: int) -> int:
        """The largest encoded body a receiver accepts for body_bytes (a longer frame is malformed)."""
        return body_bytes + body_bytes // 8 + 4096

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
        got = self._d.decompress(enc, max_output_size=out.size)
        if len(got) != out.size:
            raise ProtocolError(f"zstd frame decodes to {len(got)} B, expected {out.size}")
        out[:] = np.frombuffer(got, dtype=np.uint8)


class Lz4(Codec):
    name = "lz4"

    def __init__(self, width: int):
        super().__init__(width)
        self._b = _lib("lz4")

    def encode(self, body: np.ndarray) -> Any:
        return self._b.compress(body, store_size=False)

    def decode(self, enc: Any, out: np.ndarray) -> None:
        got = self._b.decompress(enc, uncompressed_size=out.size)
        if len(got) != out.size:
            raise ProtocolError(f"lz4 block decodes to {len(got)} B, expected {out.size}")
        out[:] = np.frombuffer(got, dtype=np.uint8)


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


class _Scaled(Codec):
    """A lossy codec: one float32 scale per group of `width` values, then a byte per value;
    on the wire: scales (4 B per group), codes (a byte per value), an odd trailing byte raw."""

    lossless = False
    qmax = 1.0

    def _groups(self, n_vals: int) -> int:
        return -(-n_vals // self.width)

    def bound(self, body_bytes: int) -> int:
        n = body_bytes // 2
        return self._groups(n) * 4 + n + body_bytes % 2

    def encode(self, body: np.ndarray) -> Any:
        n = body.size // 2
        bits = body[:2 * n].view(np.uint16)
        g = self._groups(n)
        out = np.empty(g * 4 + n + body.size % 2, dtype=np.uint8)
        scales = out[:g * 4].view(np.float32)
        codes = out[g * 4:g * 4 + n]
        full = n // self.width
        for lo, hi, rows in ((0, full * self.width, full), (full * self.width, n, 1 if n % self.width else 0)):
            if rows:
                x = (bits[lo:hi].astype(np.uint32) << 16).view(np.float32).reshape(rows, -1)
                s = scales[lo // self.width:lo // self.width + rows]
                amax = np.abs(x).max(axis=1)
                s[:] = np.where(amax > 0, amax / self.qmax, 1.0)
                self._quantize(x, (1.0 / s)[:, None], codes[lo:hi].reshape(rows, -1))
        if body.size % 2:
            out[-1] = body[-1]
        return out

    def decode(self, enc: Any, out: np.ndarray) -> None:
        n = out.size // 2
        g = self._groups(n)
        buf = np.frombuffer(enc, dtype=np.uint8)
        if buf.size != self.bound(out.size):
            raise ProtocolError(f"{self.name} frame is {buf.size} B, expected {self.bound(out.size)}")
        scales = buf[:g * 4].view(np.float32)
        codes = buf[g * 4:g * 4 + n]
        vals = self._dequantize(codes)
        full = n // self.width
        y = np.empty(n, dtype=np.float32)
        if full:
            np.multiply(vals[:full * self.width].reshape(full, -1), scales[:full, None],
                        out=y[:full * self.width].reshape(full, -1))
        if n % self.width:
            np.multiply(vals[full * self.width:], scales[full], out=y[full * self.width:])
        out[:2 * n].view(np.uint16)[:] = _bf16_bits(y)
        if out.size % 2:
            out[-1] = buf[-1]

    def _quantize(self, x: np.ndarray, inv: np.ndarray, codes: np.ndarray) -> None:
        raise NotImplementedError

    def _dequantize(self, codes: np.ndarray) -> np.ndarray:
        raise NotImplementedError


def _bf16_bits(y: np.ndarray) -> np.ndarray:
    """float32 -> BF16 bits, round to nearest even (what ml_dtypes' cast does, for finite values)."""
    u = y.view(np.uint32)
    return ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype(np.uint16)


class Fp8(_Scaled):
    """e4m3fn codes. The rounding is ml_dtypes' cast, tabulated once: a 65,536-entry table of
    ml_dtypes' e4m3 code for each BF16-truncated float32, indexed by the top 16 bits with
    the low 16 folded into a sticky bit (the same round-to-nearest-even as the cast itself:
    e4m3 rounds at a higher bit, so the table sees ties exactly; tests check it equals
    ml_dtypes' own cast). The cast itself costs ~5x the table on this CPU (docs/CODECS.md)."""

    name = "fp8"
    qmax = FP8_MAX

    def __init__(self, width: int):
        super().__init__(width)
        ml = _lib("ml_dtypes")
        keys = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            self._enc = keys.astype(ml.float8_e4m3fn).view(np.uint8)
        self._dec = np.arange(256, dtype=np.uint8).view(ml.float8_e4m3fn).astype(np.float32)

    def _quantize(self, x: np.ndarray, inv: np.ndarray, codes: np.ndarray) -> None:
        u = (x * inv).view(np.uint32)
        key = (u >> 16) | ((u & 0xFFFF) != 0)
        np.take(self._enc, key, out=codes)

    def _dequantize(self, codes: np.ndarray) -> np.ndarray:
        return np.take(self._dec, codes)


class Int8(_Scaled):
    name = "int8"
    qmax = 127.0

    def _quantize(self, x: np.ndarray, inv: np.ndarray, codes: np.ndarray) -> None:
        codes[:] = np.rint(x * inv).astype(np.int8).view(np.uint8)

    def _dequantize(self, codes: np.ndarray) -> np.ndarray:
        return codes.view(np.int8).astype(np.float32)


def _level(spec: str, text: str, lo: int, hi: int) -> int:
    if not text.isdigit() or not lo <= int(text) <= hi:
        raise _fail(spec, f"level {text!r} must be an integer {lo}..{hi}")
    return int(text)


def parse(spec: str, width: int) -> Codec:
    """The codec a --codec value names, its library loaded: ConfigError for an unknown name
    or option (with the list), CodecUnavailable for a missing library (with the install line)."""
    name, _, opts = spec.strip().partition(":")
    if name not in NAMES:
        raise _fail(spec, f"unknown codec {name!r}")
    if name in ("none", "lz4", "fp8", "int8"):
        if opts:
            raise _fail(spec, f"{name} takes no options")
        return {"none": Codec, "lz4": Lz4, "fp8": Fp8, "int8": Int8}[name](width)
    if name == "zstd":
        return Zstd(width, _level(spec, opts, 1, 19) if opts else 1)
    pipe, _, level = opts.partition(":")
    flt, _, codec = (pipe or "shuffle+zstd").partition("+")
    if flt not in _FILTERS or codec not in _BLOSC_CODECS:
        raise _fail(spec, f"blosc2 takes FILTER+CODEC, not {pipe!r}")
    return Blosc2(width, flt, codec, _level(spec, level, 1, 9) if level else 1)


def canonical(spec: str | None, width: int = 6144) -> str:
    """The one spelling of a codec (zstd -> zstd:1), checked; 'none' for None."""
    return parse(spec or "none", width).name


# ---- the codec channels (client and server), timed with each side's clock -----------------

@dataclass
class CodecStages:
    """Per-cycle numbers of a codec plan: encode_ns (client), wire_bytes (frame + encoded)."""

    encode_ns: np.ndarray
    wire_bytes: np.ndarray


class CodecClientChannel:
    """The client's side: send() encodes this cycle's body (seq i takes body i mod n, so the
    cycles go through the source's tokens), timed with the client's clock, then sends the
    frame header and the encoded body; recv_into() is the transport's."""

    def __init__(self, inner: Any, codec: Codec, bodies: list[np.ndarray], crcs: list[int],
                 stages: CodecStages, clock: Callable[[], int]):
        self.inner, self.codec, self.bodies, self.crcs, self.stages, self.clock = inner, codec, bodies, crcs, stages, clock
        self.info = inner.info
        self.header = bytearray(FRAME_BYTES)
        self.recv_into = inner.recv_into

    def send(self, buf: Any) -> None:
        seq = P.SEQ.unpack_from(buf, 0)[0]
        j = seq % len(self.bodies)
        clock = self.clock
        t0 = clock()
        enc = self.codec.encode(self.bodies[j])
        t1 = clock()
        n = len(memoryview(enc).cast("B"))
        FRAME.pack_into(self.header, 0, seq, n, self.crcs[j])
        self.inner.send(self.header)
        self.inner.send(enc)
        self.stages.encode_ns[seq] = t1 - t0
        self.stages.wire_bytes[seq] = FRAME_BYTES + n

    def alloc(self, nbytes: int) -> Any:
        return self.inner.alloc(nbytes)

    def close(self) -> None:
        self.inner.close()


class ClientAborted(Exception):
    """The client aborted the plan on the codec stream (its reason read)."""

    def __init__(self, seq: int, reason: str):
        super().__init__(reason)
        self.seq = seq


class CodecServerChannel:
    """The server's side: recv_into(request) receives the frame header and the encoded body,
    decodes into the request body timed with the server's clock (decode_ns[i]), writes the
    seq; with --verify a decoded body failing the frame's CRC calls on_bad_crc(seq) (the
    echo loop's corrupted reply). A frame longer than the codec's bound, or one that does
    not decode, raises ProtocolError; the client's abort raises ClientAborted."""

    def __init__(self, inner: Any, codec: Codec, body_bytes: int, decode_ns: np.ndarray, clock: Callable[[], int],
                 verify: bool, on_bad_crc: Callable[[int], None]):
        self.inner, self.codec, self.decode_ns, self.clock = inner, codec, decode_ns, clock
        self.verify, self.on_bad_crc = verify, on_bad_crc
        self.info = inner.info
        self.header = bytearray(FRAME_BYTES)
        self.limit = codec.bound(body_bytes)
        self.enc = bytearray(self.limit)
        self.send = inner.send
        self._i = 0

    def recv_into(self, buf: Any) -> None:
        self.inner.recv_into(self.header)
        if P.is_abort(self.header):
            raise ClientAborted(self._i, P.read_abort(self.inner, self.header))
        seq, n, crc = FRAME.unpack_from(self.header, 0)
        if n > self.limit:
            raise ProtocolError(f"request {seq}: a {self.codec.name} frame of {n} B, more than the {self.limit} B "
                                "its body can encode to")
        view = memoryview(self.enc)[:n]
        self.inner.recv_into(view)
        body = np.frombuffer(buf, dtype=np.uint8)[P.SEQ_BYTES:]
        clock = self.clock
        t0 = clock()
        try:
            self.codec.decode(view, body)
        except ProtocolError as exc:
            raise ProtocolError(f"request {seq}: {exc}") from None
        except Exception as exc:  # a library's own error on a corrupt frame
            raise ProtocolError(f"request {seq}: the {self.codec.name} frame does not decode: {exc}") from None
        t1 = clock()
        if self._i < self.decode_ns.size:
            self.decode_ns[self._i] = t1 - t0
        self._i += 1
        P.SEQ.pack_into(buf, 0, seq)
        if self.verify and zlib.crc32(body.data) != crc:
            self.on_bad_crc(seq)

    def alloc(self, nbytes: int) -> Any:
        return self.inner.alloc(nbytes)

    def close(self) -> None:
        self.inner.close()


def expected_crcs(codec: Codec, bodies: list[np.ndarray]) -> list[int]:
    """What each body must decode to, as CRC-32 (a lossy codec's reconstruction; computed
    before the timed loop)."""
    out = []
    for body in bodies:
        if codec.lossless:
            out.append(zlib.crc32(body.data))
        else:
            back = np.empty_like(body)
            codec.decode(codec.encode(body), back)
            out.append(zlib.crc32(back.data))
    return out


# ---- `hopbench codecs [FILE]`: each codec on this CPU, off the wire ------------------------

ALL = ("zstd:1", "zstd:3", "lz4", "blosc2:shuffle+zstd:1", "blosc2:bitshuffle+lz4:1", "fp8", "int8")


def _floats(body: np.ndarray) -> np.ndarray:
    return (body[:body.size // 2 * 2].view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def profile(spec: str, bodies: list[np.ndarray], width: int, reps: int = 20) -> dict[str, Any]:
    """One codec on these bodies: ratio, encode and decode GB/s (of the raw bytes, p50 over
    reps), the error of a lossy codec (relative RMS, max absolute, cosine similarity per
    token-layer row: min and median), and the link rate below which it pays: it pays while
    encode + decode < bytes saved / rate, so break-even = 8 x bytes saved / (encode + decode)."""
    import time

    codec = parse(spec, width)
    raw = sum(b.size for b in bodies)
    enc_ns, dec_ns, wire = [], [], 0
    worst: dict[str, float] = {"rel_rms": 0.0, "max_abs": 0.0}
    cosines: list[np.ndarray] = []
    for rep in range(reps):
        e_t = d_t = 0
        for body in bodies:
            back = np.empty_like(body)
            t0 = time.perf_counter_ns()
            enc = codec.encode(body)
            t1 = time.perf_counter_ns()
            codec.decode(enc, back)
            t2 = time.perf_counter_ns()
            e_t, d_t = e_t + t1 - t0, d_t + t2 - t1
            if rep == 0:
                wire += len(memoryview(enc).cast("B"))
                if codec.lossless:
                    if not np.array_equal(back, body):
                        raise ProtocolError(f"{codec.name} did not round-trip byte-exact")
                else:
                    x, y = _floats(body), _floats(back)
                    worst["rel_rms"] = max(worst["rel_rms"], float(np.sqrt(np.mean((x - y) ** 2) / max(np.mean(x ** 2), 1e-30))))
                    worst["max_abs"] = max(worst["max_abs"], float(np.max(np.abs(x - y))))
                    rows = x.size // width
                    xr, yr = x[:rows * width].reshape(rows, width), y[:rows * width].reshape(rows, width)
                    cosines.append(np.sum(xr * yr, axis=1) / np.maximum(
                        np.linalg.norm(xr, axis=1) * np.linalg.norm(yr, axis=1), 1e-30))
        enc_ns.append(e_t)
        dec_ns.append(d_t)
    e, d = float(np.median(enc_ns)), float(np.median(dec_ns))
    saved = raw - wire
    out: dict[str, Any] = {"codec": codec.name, "library": codec.library, "lossless": codec.lossless,
                           "raw_bytes": raw, "wire_bytes": wire, "ratio": raw / wire, "encode_gb_s": raw / e,
                           "decode_gb_s": raw / d, "encode_ns": e, "decode_ns": d,
                           "pays_below_mbit": saved * 8 / (e + d) * 1e3 if saved > 0 else 0.0}
    if not codec.lossless:
        cos = np.concatenate(cosines) if cosines else np.array([1.0])
        out.update(rel_rms=worst["rel_rms"], max_abs=worst["max_abs"], cosine_min=float(cos.min()),
                   cosine_median=float(np.median(cos)))
    return out
