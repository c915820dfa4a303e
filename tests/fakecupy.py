"""A host-memory stand-in for the slice of CuPy that hopbench.core.gpu uses, so the GPU code
paths (staging copies, stage timings, the server's stage array, direct hand-off) run in CI
where no GPU exists. "Device" arrays are numpy arrays with CuPy's `.data.ptr`; copies
are memmove; streams are no-ops. It proves the plumbing, not GPU behaviour: the `gpu`
tests in test_gpu.py do that on a real device."""

import ctypes

import numpy as np

__version__ = "fake"
uint8 = np.uint8
copies: list[tuple[int, int]] = []  # (kind, nbytes) of every copy, for the tests


class _Ptr:
    def __init__(self, arr):
        self.ptr = arr.ctypes.data


class DeviceArray(np.ndarray):
    @property
    def data(self):  # CuPy: MemoryPointer with .ptr
        return _Ptr(self)


def zeros(n, dtype=np.uint8):
    return np.zeros(n, dtype=dtype).view(DeviceArray)


class _Runtime:
    @staticmethod
    def getDeviceCount():
        return 1

    @staticmethod
    def memcpyAsync(dst, src, n, kind, stream):
        copies.append((kind, n))
        ctypes.memmove(dst, src, n)

    @staticmethod
    def streamSynchronize(stream):
        pass

    @staticmethod
    def getDeviceProperties(i):
        return {"name": b"fake (host memory)"}

    @staticmethod
    def driverGetVersion():
        return 0

    @staticmethod
    def runtimeGetVersion():
        return 0


class _Device:
    id = 0
    pci_bus_id = "fake"


class _Stream:
    def __init__(self, non_blocking=False):
        self.ptr = 0


class cuda:  # noqa: N801 - mirrors cupy.cuda
    runtime = _Runtime
    Device = _Device
    Stream = _Stream

    @staticmethod
    def alloc_pinned_memory(n):
        return bytearray(n)
