"""GPU-resident payloads (`--memory cuda`): device buffers, pinned staging, timed copies.

The aux hidden states live in GPU memory on the target and are consumed in GPU memory on
the drafter, so the real hop is D2H + wire + H2D (staged), or a CUDA-aware transfer that
skips the explicit staging (direct: UCX with cuda_copy / cuda_ipc / GPUDirect RDMA,
whichever UCX selects; the lanes are recorded).

CuPy is imported here only, and only when a plan asks for CUDA memory (the `gpu` extra);
without it the error carries the install line.

How stages are timed: synchronised host timers. The staged path is a channel wrapper
(StagedClientChannel, StagedServerChannel) around the transport, so the timing loops stay
the same; it reads the side's one injected clock around its copies. Each copy is issued
with cudaMemcpyAsync on a private non-blocking stream and the stream is synchronised
before the clock is read again, so a stage's time is what a
staging path really pays: launch + DMA + synchronisation. CUDA events would time the DMA
alone and hide the launch and wake-up cost that sits on the critical path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from hopbench.core.transport import WrappedChannel
from hopbench.errors import ConfigError, TransportUnavailable
from hopbench.records import MEMORIES

if TYPE_CHECKING:
    import cupy

PATHS = ("staged", "direct")
INSTALL = "pip install 'hopbench[gpu]'"
# cudaMemcpyKind
_H2D, _D2H = 1, 2


class GpuUnavailable(TransportUnavailable):
    """CUDA memory was asked for but CuPy or a CUDA device is missing."""


_cp = None


def load() -> Any:
    """Import CuPy and check that a CUDA device exists; GpuUnavailable otherwise."""
    global _cp
    if _cp is not None:
        return _cp
    try:
        import cupy
    except ImportError as exc:
        raise GpuUnavailable(f"--memory cuda needs CuPy ({exc}); install it with: {INSTALL}") from None
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError: no driver, no device
        raise GpuUnavailable(f"--memory cuda needs a CUDA device: {exc}") from None
    if n < 1:
        raise GpuUnavailable("--memory cuda needs a CUDA device: none found")
    # create the CUDA context now: UCX must find it when its own context is made
    # (ucxx: "create the CUDA context before UCX"), and no first-cycle pays for it
    cupy.zeros(1, dtype=cupy.uint8)
    _cp = cupy
    return cupy


def check_choice(memories: tuple[str, ...], path: str, transport: Any = None, settings: dict[str, Any] | None = None) -> None:
    """Each end's memory, the path, and whether the transport (a registry Transport, when
    known) can take that path with these settings (it says so: check_device_path)."""
    for memory in memories:
        if memory not in MEMORIES:
            raise ConfigError(f"memory must be one of {', '.join(MEMORIES)}, not {memory!r}")
    if path not in PATHS:
        raise ConfigError(f"gpu path must be one of {', '.join(PATHS)}, not {path!r}")
    if path == "direct" and transport is not None:
        transport.check_device_path(settings or {})


def device_info() -> dict[str, Any]:
    cp = load()
    rt = cp.cuda.runtime
    dev = cp.cuda.Device()
    props = rt.getDeviceProperties(dev.id)
    name = props.get("name", b"")
    return {"library": f"cupy {cp.__version__}", "device": dev.id,
            "name": name.decode() if isinstance(name, bytes) else str(name),
            "pci_bus_id": dev.pci_bus_id, "driver_version": rt.driverGetVersion(),
            "runtime_version": rt.runtimeGetVersion(), "timing": "synchronised host timers (perf_counter_ns)"}


class Staging:
    """One message's buffers on one end: a device array, its pinned host twin, and the
    two copies between them, each synchronised before it returns.

    `host` is what a staged path hands the transport; `device` is what a direct path
    hands it (UCX reads __cuda_array_interface__). Nothing is allocated per cycle."""

    def __init__(self, nbytes: int, stream: cupy.cuda.Stream | None = None):
        cp = load()
        self.nbytes = nbytes
        self.device = cp.zeros(max(nbytes, 1), dtype=cp.uint8)[:nbytes]
        self._pinned = cp.cuda.alloc_pinned_memory(max(nbytes, 1))
        self.host = np.frombuffer(self._pinned, dtype=np.uint8, count=nbytes)
        self.stream = stream if stream is not None else cp.cuda.Stream(non_blocking=True)
        rt = cp.cuda.runtime
        self._memcpy, self._sync = rt.memcpyAsync, rt.streamSynchronize
        self._dptr, self._hptr, self._sptr = self.device.data.ptr, self.host.ctypes.data, self.stream.ptr

    def d2h(self, lo: int = 0, hi: int | None = None) -> None:
        """device[lo:hi] -> host[lo:hi], then wait for it."""
        n = (self.nbytes if hi is None else hi) - lo
        if n > 0:
            self._memcpy(self._hptr + lo, self._dptr + lo, n, _D2H, self._sptr)
            self._sync(self._sptr)

    def h2d(self, lo: int = 0, hi: int | None = None) -> None:
        """host[lo:hi] -> device[lo:hi], then wait for it."""
        n = (self.nbytes if hi is None else hi) - lo
        if n > 0:
            self._memcpy(self._dptr + lo, self._hptr + lo, n, _H2D, self._sptr)
            self._sync(self._sptr)

    def fill_random(self, seed: int = 0) -> None:
        """Fill the device buffer (the 'hidden states') with random bytes, then mirror it."""
        rng = np.random.default_rng(seed)
        self.host[:] = rng.integers(0, 256, self.nbytes, dtype=np.uint8)
        self.h2d()


#: per-cycle stage columns of the client's staged path (ns)
CLIENT_STAGES = ("d2h_ns", "transfer_ns", "h2d_ns")
SEQ_BYTES = 8  # hopbench framing, never copied off the GPU (docs/PROTOCOL.md)


class StagedClientChannel(WrappedChannel):
    """The client's staged path as a channel around the transport: send() copies the
    request payload device->host (the seq is framing, already in the pinned buffer) and
    sends the pinned buffer; recv_into() receives into the pinned reply and copies it
    host->device. Timed with the client's clock: stages[i] = (d2h, transfer, h2d)."""

    def __init__(self, inner: Any, request: Staging, reply: Staging, stages: np.ndarray,
                 clock: Callable[[], int]):
        self.inner, self.req, self.rep, self.stages, self.clock = inner, request, reply, stages, clock
        self.info = inner.info
        self._i = 0
        self._sent = 0

    def send(self, buf: Any) -> None:
        clock = self.clock
        t0 = clock()
        self.req.d2h(SEQ_BYTES)
        t1 = clock()
        self.inner.send(self.req.host)
        self.stages[self._i, 0] = t1 - t0
        self._sent = t1

    def recv_into(self, buf: Any) -> None:
        clock = self.clock
        self.inner.recv_into(self.rep.host)
        t2 = clock()
        self.rep.h2d()
        t3 = clock()
        self.stages[self._i, 1] = t2 - self._sent
        self.stages[self._i, 2] = t3 - t2
        self._i += 1


class StagedServerChannel(WrappedChannel):
    """The server's staged path as a channel: recv_into() receives the pinned request (the
    echo loop checks its seq and CRC there); send() copies the request host->device and
    the reply device->host, timed with the server's clock into timings[i] = (h2d, d2h),
    then sends the pinned reply."""

    def __init__(self, inner: Any, request: Staging, reply: Staging, timings: np.ndarray,
                 clock: Callable[[], int]):
        self.inner, self.req, self.rep, self.timings, self.clock = inner, request, reply, timings, clock
        self.info = inner.info
        self._i = 0

    def recv_into(self, buf: Any) -> None:
        self.inner.recv_into(self.req.host)

    def send(self, buf: Any) -> None:
        clock = self.clock
        t0 = clock()
        self.req.h2d()
        t1 = clock()
        self.rep.d2h()
        t2 = clock()
        self.inner.send(self.rep.host)
        self.timings[self._i, 0] = t1 - t0
        self.timings[self._i, 1] = t2 - t1
        self._i += 1


class ChunkStaging:
    """A streamed plan's aux layer rows in GPU memory at one end (docs/STREAM.md "In GPU
    memory"): the cycle's `chunks` chunks of `size` bytes in one device array with its pinned
    host twin, and the reply's buffers. Chunk j's first 8 bytes are its running counter
    (framing, written on the host); the rest are layer j's K + 1 rows. The target copies a
    chunk's rows down as its layer ends (staged) or stamps the counter onto the device and
    hands the transport the device slice (direct); the drafter copies each chunk up as it
    lands (staged) or receives it into the device (direct)."""

    def __init__(self, chunks: int, size: int, reply_bytes: int, seed: int = 0):
        self.size = size
        self.rows = Staging(chunks * size)
        self.reply = Staging(reply_bytes, self.rows.stream)
        self.rows.fill_random(seed)
        # each chunk's views, made once: the hop only looks them up
        self._host = [self.rows.host[j * size:(j + 1) * size] for j in range(chunks)]
        self._device = [self.rows.device[j * size:(j + 1) * size] for j in range(chunks)]

    def host(self, j: int) -> Any:
        return self._host[j]

    def device(self, j: int) -> Any:
        return self._device[j]

    def down(self, j: int) -> None:
        """Chunk j's rows device -> host (its counter is framing, already on the host)."""
        self.rows.d2h(j * self.size + SEQ_BYTES, (j + 1) * self.size)

    def up(self, j: int) -> None:
        """Chunk j, as it landed in the pinned host buffer, host -> device."""
        self.rows.h2d(j * self.size, (j + 1) * self.size)

    def stamp(self, j: int) -> None:
        """Chunk j's counter, written on the host, onto the device (direct: untimed)."""
        self.rows.h2d(j * self.size, j * self.size + SEQ_BYTES)

    def fetch_counter(self, j: int) -> None:
        """Chunk j's counter, as it landed on the device, back to the host to be checked."""
        self.rows.d2h(j * self.size, j * self.size + SEQ_BYTES)

