"""A nixl channel's registered memory: its own buffers registered with the agent (regions,
cached by address, the least recently used half released past MAX_REGIONS), the peer's
regions prepared as WRITE targets as its credits name them, and the prepared transfers
between the two."""

from __future__ import annotations

from typing import Any

import nixl_cu12._bindings as nb
import numpy as np

from .agent import _Agent, _translate
from .wire import _CREDIT

MAX_REGIONS = 64  # registered regions per channel before the oldest idle ones are released


class _Region:
    """A registered buffer: its registration, its local descriptor list, the object kept alive."""

    __slots__ = ("id", "obj", "addr", "nbytes", "dev", "vram", "reg", "local", "announced", "used")

    def __init__(self, rid: int, obj: Any, addr: int, nbytes: int, dev: int, vram: bool) -> None:
        self.id, self.obj, self.addr, self.nbytes, self.dev, self.vram = rid, obj, addr, nbytes, dev, vram
        self.reg: Any = None
        self.local: Any = None
        self.announced = False
        self.used = 0


def _copy(dst: Any, src: Any) -> None:
    """dst[:] = src, bytewise, host or GPU memory on either side."""
    if hasattr(dst, "__cuda_array_interface__") or hasattr(src, "__cuda_array_interface__"):
        import cupy

        d = cupy.asarray(dst).view(cupy.uint8).reshape(-1)
        d[:] = cupy.asarray(src if hasattr(src, "__cuda_array_interface__") else np.frombuffer(src, dtype=np.uint8)
                            ).view(cupy.uint8).reshape(-1)
        return
    memoryview(dst).cast("B")[:] = memoryview(src).cast("B")


def _address(buf: Any) -> tuple[int, int, int, bool, Any]:
    """(address, bytes, device, VRAM?, the object that keeps the memory alive) of a buffer."""
    cai = getattr(buf, "__cuda_array_interface__", None)
    if cai is not None:  # GPU memory (--memory cuda,direct): registered as VRAM
        import cupy

        arr = cupy.asarray(buf)
        return int(cai["data"][0]), int(arr.nbytes), int(arr.device.id), True, buf
    arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    return int(arr.ctypes.data), int(arr.nbytes), 0, False, arr



class Memory:
    """The regions of one channel (both sides) and the transfers prepared between them."""

    def __init__(self, agent: _Agent, peer: str) -> None:
        self._a = agent
        self._raw = agent.raw
        self._peer = peer
        self.regions: dict[tuple[int, int, bool], _Region] = {}
        self._by_obj: dict[int, tuple[Any, _Region]] = {}
        self.remote: dict[int, Any] = {}  # the peer's region id -> prepped remote descriptor list
        self.remote_len: dict[int, int] = {}
        self.xfers: dict[tuple[int, int], Any] = {}  # (our region id, the peer's) -> a prepared WRITE
        self._ids = 0
        self._clock = 0

    def region(self, buf: Any) -> _Region:
        """buf's region, registered the first time it is seen."""
        hit = self._by_obj.get(id(buf))
        if hit is not None and hit[0] is buf:
            r = hit[1]
        else:
            addr, nbytes, dev, vram, keep = _address(buf)
            r = self.regions.get((addr, nbytes, vram))  # type: ignore[assignment]
            if r is None:
                r = self._register(addr, nbytes, dev, vram, keep)
            if len(self._by_obj) > 32:
                self._by_obj.clear()
            self._by_obj[id(buf)] = (buf, r)
        self._clock += 1
        r.used = self._clock
        return r

    def by_id(self, rid: int) -> _Region | None:
        return next((r for r in self.regions.values() if r.id == rid), None)

    def _register(self, addr: int, nbytes: int, dev: int, vram: bool, keep: Any) -> _Region:
        if len(self.regions) >= MAX_REGIONS:
            self._release_oldest()
        self._ids += 1
        r = _Region(self._ids, keep, addr, nbytes, dev, vram)
        seg = nb.VRAM_SEG if vram else nb.DRAM_SEG
        try:
            r.reg = nb.nixlRegDList(seg, [(addr, max(nbytes, 1), dev, "")])
            self._raw.registerMem(r.reg, [])
            r.local = self._raw.prepXferDlist(nb.NIXL_INIT_AGENT, nb.nixlXferDList(seg, [(addr, max(nbytes, 1), dev)]),
                                              [])
        except Exception as exc:
            raise _translate(exc, "memory registration") from None
        self.regions[(addr, nbytes, vram)] = r
        return r

    def _release_oldest(self) -> None:
        """Release the least recently used half of the regions (none is in flight: every
        call completes before it returns); the peer never sees their ids again."""
        old = sorted(self.regions.items(), key=lambda kv: kv[1].used)[: len(self.regions) // 2]
        for key, r in old:
            for xk in [k for k in self.xfers if k[0] == r.id]:
                self.release_xfer(self.xfers.pop(xk))
            self._deregister(r)
            del self.regions[key]
        self._by_obj.clear()

    def _deregister(self, r: _Region) -> None:
        try:
            self._raw.releasedDlistH(r.local)
            self._raw.deregisterMem(r.reg, [])
        except Exception:
            pass

    def release_xfer(self, handle: Any) -> None:
        try:
            self._raw.releaseXferReq(handle)
        except Exception:
            pass

    def learn(self, credit: bytes) -> Any:
        """The peer's region a credit names, prepared as a WRITE target (its registration
        comes with the first credit that names it)."""
        _, _, _, rid, addr, length, dev, vram = _CREDIT.unpack_from(credit)
        if rid in self.remote:
            return self.remote[rid]
        blob = credit[_CREDIT.size:]
        try:
            if blob and self._peer != self._a.name:  # the region's registration, the first time the peer offers it
                self._raw.loadRemoteMD(blob)
            seg = nb.VRAM_SEG if bool(vram) else nb.DRAM_SEG
            remote = self._raw.prepXferDlist(self._peer, nb.nixlXferDList(seg, [(addr, max(length, 1), dev)]), [])
        except Exception as exc:
            raise _translate(exc, "send (the peer's buffer)") from None
        if len(self.remote) >= 2 * MAX_REGIONS:  # the peer released its old regions (it never offers them again)
            for old in list(self.remote)[:MAX_REGIONS]:
                for xk in [x for x in self.xfers if x[1] == old]:
                    self.release_xfer(self.xfers.pop(xk))
                try:
                    self.remote_len.pop(old, None)
                    self._raw.releasedDlistH(self.remote.pop(old))
                except Exception:
                    pass
        self.remote[rid] = remote
        self.remote_len[rid] = length
        return remote

    def close(self) -> None:
        """Release every transfer, the peer's regions and our own."""
        for handle in self.xfers.values():
            self.release_xfer(handle)
        self.xfers.clear()
        for remote in self.remote.values():
            try:
                self._raw.releasedDlistH(remote)
            except Exception:
                pass
        self.remote.clear()
        for r in self.regions.values():
            self._deregister(r)
        self.regions.clear()
        self._by_obj.clear()
