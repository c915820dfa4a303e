"""The lossy codecs on the GPU (`--codec fp8|int8` with `--memory cuda`, docs/CODECS.md).

The hidden states are born in GPU memory, so a target casts them there: one CUDA kernel
scales each group (a block per token-layer row: the absmax by a block reduction over the
BF16 bits, then a thread per value) and writes the wire layout (float32 scales, then a byte
per value) into a device buffer; only the encoded bytes cross to pinned host memory (half
the raw payload). The drafter copies the encoded bytes to its device and one kernel
dequantises, scales and rounds to BF16 in place.

The arithmetic is the CPU path's, operation for operation, with IEEE round-to-nearest
intrinsics (no fused multiply-add, no fast division), and fp8's rounding is the same
ml_dtypes table (copied to the device once), so a frame encoded on a GPU decodes on a CPU
to the same bytes and back (tests/test_gpu.py checks both directions on the device).

Timed as the staged GPU path times its copies (hopbench.core.gpu): the kernel and the copy
are issued on the codec's own non-blocking stream and the stream is synchronised before
the clock is read, so a stage is what the hop really pays (launch + work + copy + wake-up).
Lossless codecs on GPU memory (`zstd`, `lz4`) run through nvCOMP (`GpuNvcomp`, the
`nvidia-nvcomp-cu12`/`-cu13` package where installed): its native bitstream, so both ends
must hold the payload in CUDA memory with nvCOMP (a frame nvCOMP wrote is not a CPU zstd
frame); refused otherwise with the reason and the install line.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hopbench.core import codecs as C
from hopbench.errors import ConfigError, ProtocolError

_SOURCE = r"""
extern "C" __global__ void scaled_encode(const unsigned char* body, int n, int width, float qmax, int odd,
                                         const unsigned char* table, float* scales, unsigned char* codes) {
    const unsigned short* bits = (const unsigned short*)body;
    __shared__ unsigned int part[32];
    int g = blockIdx.x, lo = g * width, hi = min(n, lo + width);
    unsigned int m = 0;
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) m = max(m, (unsigned int)(bits[i] & 0x7FFF));
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_down_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x < 32) {
        m = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0;
        for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_down_sync(0xffffffffu, m, o));
        if (threadIdx.x == 0) part[0] = m;
    }
    __syncthreads();
    float amax = __uint_as_float(part[0] << 16);
    float s = amax > 0.0f ? __fdiv_rn(amax, qmax) : 1.0f;
    float inv = __fdiv_rn(1.0f, s);
    if (threadIdx.x == 0) {
        scales[g] = s;
        if (odd && g == 0) codes[n] = body[2 * n];  /* an odd trailing byte crosses raw */
    }
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float y = __fmul_rn(__uint_as_float(((unsigned int)bits[i]) << 16), inv);
        if (table) {
            unsigned int u = __float_as_uint(y);
            codes[i] = table[(u >> 16) | ((u & 0xFFFFu) != 0u)];
        } else {
            codes[i] = (unsigned char)(signed char)__float2int_rn(y);
        }
    }
}

extern "C" __global__ void scaled_decode(const unsigned char* codes, const float* scales, int n, int width, int odd,
                                         const float* lut, unsigned char* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0 && odd) out[2 * n] = codes[n];
    if (i >= n) return;
    float v = lut ? lut[codes[i]] : (float)(signed char)codes[i];
    unsigned int u = __float_as_uint(__fmul_rn(v, scales[i / width]));
    ((unsigned short*)out)[i] = (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
"""

_THREADS = 256


class GpuScaled:
    """fp8 or int8 on the GPU: encode(device body) -> the encoded bytes in pinned host
    memory; decode(host bytes, device out). Same wire layout, same bytes as the CPU codec."""

    lossless = False
    kernel = "cuda"

    def __init__(self, host: C.Codec):
        from hopbench.core import gpu

        if not isinstance(host, C._Scaled):
            raise ConfigError(f"--codec {host.name}: not a lossy codec (the GPU kernels are fp8 and int8)")
        cp = self._cp = gpu.load()
        self.host, self.name, self.width = host, host.name, host.width
        module = cp.RawModule(code=_SOURCE, options=("-fmad=false",))
        self._enc, self._dec = module.get_function("scaled_encode"), module.get_function("scaled_decode")
        self._table = cp.asarray(host._table()) if host._table() is not None else None
        self._lut = cp.asarray(host._lut()) if host._lut() is not None else None
        self.stream = cp.cuda.Stream(non_blocking=True)
        self._bufs: dict[int, tuple[Any, Any]] = {}

    @property
    def library(self) -> str:
        return f"cupy {self._cp.__version__} (CUDA kernel; fp8 table from {self.host.library})"

    def bound(self, body_bytes: int) -> int:
        return self.host.bound(body_bytes)

    def recv_buffer(self, body_bytes: int) -> Any:
        """Where a receiver should land encoded frames: the pinned buffer the H2D copy reads."""
        return memoryview(self._buffers(body_bytes)[1])

    def _buffers(self, body_bytes: int) -> tuple[Any, Any]:
        """The device buffer and the pinned host buffer of one encoded size (made once per size)."""
        size = self.bound(body_bytes)
        got = self._bufs.get(size)
        if got is None:
            mem = self._cp.cuda.alloc_pinned_memory(max(size, 1))
            got = self._bufs[size] = (self._cp.empty(size, dtype=self._cp.uint8),
                                      np.frombuffer(mem, dtype=np.uint8, count=size))
        return got

    def encode(self, body: Any) -> Any:
        cp = self._cp
        nbytes = int(body.size)
        n, g = nbytes // 2, -(-(nbytes // 2) // self.width)
        dev, host = self._buffers(nbytes)
        scales, codes = dev[:g * 4].view(cp.float32), dev[g * 4:]
        with self.stream:
            self._enc((max(g, 1),), (_THREADS,), (body, np.int32(n), np.int32(self.width), np.float32(self.host.qmax),
                                                  np.int32(nbytes % 2), self._table if self._table is not None else np.uintp(0),
                                                  scales, codes))
            cp.cuda.runtime.memcpyAsync(host.ctypes.data, dev.data.ptr, host.size, 2, self.stream.ptr)  # D2H
        self.stream.synchronize()
        return host

    def decode(self, enc: Any, out: Any) -> None:
        cp = self._cp
        nbytes = int(out.size)
        n, g = nbytes // 2, -(-(nbytes // 2) // self.width)
        dev, host = self._buffers(nbytes)
        src = np.frombuffer(enc, dtype=np.uint8)
        if src.size != dev.size:
            raise ProtocolError(f"{self.name} frame is {src.size} B, expected {dev.size}")
        if src.ctypes.data != host.ctypes.data:  # received elsewhere: into pinned memory first (a real DMA then)
            host[:] = src
        with self.stream:
            cp.cuda.runtime.memcpyAsync(dev.data.ptr, host.ctypes.data, host.size, 1, self.stream.ptr)  # H2D
            self._dec((max(1, -(-n // _THREADS)),), (_THREADS,),
                      (dev[g * 4:], dev[:g * 4].view(cp.float32), np.int32(n), np.int32(self.width),
                       np.int32(nbytes % 2), self._lut if self._lut is not None else np.uintp(0), out))
        self.stream.synchronize()


NVCOMP_INSTALL = "pip install nvidia-nvcomp-cu12 (or nvidia-nvcomp-cu13 on a CUDA 13 box)"
_NVCOMP_ALGORITHMS = {"zstd": "Zstd", "lz4": "LZ4"}


_STREAMS: list[Any] = []


def _nvcomp_stream(cp: Any) -> Any:
    """One stream for every nvCOMP codec of the process, alive until the process ends: an
    nvCOMP Codec uses its stream as it is destroyed (at a plan's end), so the stream must
    outlive every codec (a per-codec CuPy stream freed first crashed the process)."""
    if not _STREAMS:
        _STREAMS.append(cp.cuda.Stream(non_blocking=True))
    return _STREAMS[0]


class GpuNvcomp:
    """zstd or lz4 through nvCOMP on the GPU: encode(device body) -> the compressed bytes in
    pinned host memory (nvCOMP's native bitstream); decode(host bytes, device out). The
    level of zstd:LEVEL is the CPU library's option; nvCOMP has its own (recorded as such)."""

    lossless = True
    kernel = "nvcomp"

    def __init__(self, host: C.Codec):
        from hopbench.core import gpu

        family = host.name.split(":")[0]
        if family not in _NVCOMP_ALGORITHMS:
            raise ConfigError(f"--codec {host.name} with --memory cuda: nvCOMP has no {family}; on GPU memory use "
                              "zstd, lz4, fp8 or int8")
        try:
            from nvidia import nvcomp
        except ImportError:
            raise C.CodecUnavailable(f"--codec {host.name} with --memory cuda needs nvCOMP (not installed); install it "
                                     f"with: {NVCOMP_INSTALL}") from None
        cp = self._cp = gpu.load()
        self._nv = nvcomp
        self.host, self.name, self.width = host, host.name, host.width
        self.stream = _nvcomp_stream(cp)
        self._codec = nvcomp.Codec(algorithm=_NVCOMP_ALGORITHMS[family], cuda_stream=self.stream.ptr)
        self._bufs: dict[int, tuple[Any, Any]] = {}

    @property
    def library(self) -> str:
        return f"nvcomp {getattr(self._nv, '__version__', '?')} ({_NVCOMP_ALGORITHMS[self.name.split(':')[0]]})"

    def bound(self, body_bytes: int) -> int:
        return body_bytes + body_bytes // 4 + 65536  # nvCOMP's native header and per-chunk worst case

    def _buffers(self, body_bytes: int) -> tuple[Any, Any]:
        size = self.bound(body_bytes)
        got = self._bufs.get(size)
        if got is None:
            mem = self._cp.cuda.alloc_pinned_memory(size)
            got = self._bufs[size] = (self._cp.empty(size, dtype=self._cp.uint8),
                                      np.frombuffer(mem, dtype=np.uint8, count=size))
        return got

    def recv_buffer(self, body_bytes: int) -> Any:
        return memoryview(self._buffers(body_bytes)[1])

    def encode(self, body: Any) -> Any:
        cp = self._cp
        _, host = self._buffers(int(body.size))
        enc = cp.asarray(self._codec.encode(self._nv.as_array(body))).view(cp.uint8).ravel()
        n = int(enc.size)
        if n > host.size:
            raise ProtocolError(f"nvCOMP's {self.name} frame is {n} B, above this codec's bound {host.size}")
        cp.cuda.runtime.memcpyAsync(host.ctypes.data, enc.data.ptr, n, 2, self.stream.ptr)  # D2H
        self.stream.synchronize()
        return host[:n]

    def decode(self, enc: Any, out: Any) -> None:
        cp = self._cp
        dev, host = self._buffers(int(out.size))
        src = np.frombuffer(enc, dtype=np.uint8)
        n = src.size
        if src.ctypes.data != host.ctypes.data:
            host[:n] = src
        cp.cuda.runtime.memcpyAsync(dev.data.ptr, host.ctypes.data, n, 1, self.stream.ptr)  # H2D
        try:
            dec = cp.asarray(self._codec.decode(self._nv.as_array(dev[:n]))).view(cp.uint8).ravel()
        except Exception as exc:  # nvCOMP's own error on a corrupt frame
            raise ProtocolError(f"the nvCOMP {self.name} frame does not decode: {exc}") from None
        if dec.size != out.size:
            raise ProtocolError(f"the nvCOMP {self.name} frame decodes to {dec.size} B, expected {out.size}")
        cp.cuda.runtime.memcpyAsync(out.data.ptr, dec.data.ptr, out.size, 3, self.stream.ptr)  # D2D
        self.stream.synchronize()


def for_memory(codec: C.Codec, memory: str) -> Any:
    """The codec that runs where the payload lives: on CUDA memory the GPU kernels (fp8,
    int8) or nvCOMP (zstd, lz4)."""
    if memory != "cuda":
        return codec
    return GpuNvcomp(codec) if codec.lossless else GpuScaled(codec)
