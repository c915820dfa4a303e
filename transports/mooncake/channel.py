"""The mooncake channel: the contract's send and recv_into as one-sided WRITEs into the
peer's registered ring, with notifications (the choices: the package's docstring)."""

from __future__ import annotations

import socket
import time
from typing import Any

import numpy as np

from hopbench.core.transport import Spinner, TransportOptions
from hopbench.errors import PeerClosed, ProtocolError, TransportError

from .._onesided import Liveness
from .engine import Engine, Settings, version

CHECK_S = 0.001  # busy-poll: the deadline and the liveness connection at most this often


def _bytes(buf: Any) -> np.ndarray:
    """buf as a flat uint8 array over the same memory (bytes are read-only: copied once)."""
    if isinstance(buf, np.ndarray):
        return buf.reshape(-1).view(np.uint8)
    return np.frombuffer(buf, dtype=np.uint8)


class Peer:
    """Where the far end is: its engine's segment name, its channel id, its ring."""

    __slots__ = ("segment", "chan", "ring_addr", "ring_bytes")

    def __init__(self, segment: str, chan: int, ring_addr: int, ring_bytes: int) -> None:
        self.segment, self.chan, self.ring_addr, self.ring_bytes = segment, chan, ring_addr, ring_bytes


class MooncakeChannel:
    def __init__(self, engine: Engine, me: int, ring: np.ndarray, peer: Peer, sock: socket.socket,
                 options: TransportOptions, settings: Settings) -> None:
        self._e = engine
        self._me = me
        self._ring = ring  # registered by the transport before the setup named it
        self._peer = peer
        self._sock = sock
        self._box = engine.inboxes[me]
        self._live = Liveness("Mooncake", sock, self._box, options.timeout_s)
        self._busy = options.poll == "busy"
        self._delay = settings.delay_s
        self._spin = Spinner(options.share_cpu, check_every=64, yield_every=8)
        self._regions: dict[int, np.ndarray] = {}  # what alloc registered, by address
        self._stage = np.zeros(0, dtype=np.uint8)  # a registered copy of a send from other memory
        self._sent = 0  # messages sent (k of the next)
        self._tx = 0  # the next position in the peer's ring (a stream position: its offset is % ring)
        self._reach = 0  # the farthest end of a WRITE into the peer's ring (its offset + length)
        self._free_below = 0  # positions the peer has read or we skipped: free whatever it has said
        self._received = 0
        self._consumed = 0  # how far we have read our ring
        self._unsaid = 0  # bytes read since we last told the peer how far (in a notification)
        self._closed = False
        self.acks_sent = 0
        self._info = {"transport": "mooncake", "mooncake": version(), "endpoint": peer.segment,
                      "write": "one-sided WRITE + notification", "metadata": "P2PHANDSHAKE",
                      "poll": "busy" if self._busy else "block", "timeout_s": options.timeout_s,
                      "share_cpu": options.share_cpu, "engine": f"{engine.host}:{engine.rpc_port}", **settings.record()}

    @property
    def info(self) -> dict[str, Any]:
        return {**self._info, "peer_ring_bytes": self._peer.ring_bytes, "acks_sent": self.acks_sent,
                "peer_ring_reach": self._reach,
                "receives": self._received}

    def alloc(self, nbytes: int) -> np.ndarray:
        """A buffer registered with the engine (an RDMA WRITE reads only registered memory)."""
        buf = np.zeros(max(nbytes, 1), dtype=np.uint8)[:nbytes]
        self._e.register(buf.ctypes.data, max(nbytes, 1))
        self._regions[buf.ctypes.data] = buf
        return buf

    def _source(self, arr: np.ndarray) -> int:
        """The registered address a send of arr WRITEs from: its own, or the stage's after a copy."""
        addr = arr.ctypes.data
        own = self._regions.get(addr)
        if own is not None and own.nbytes >= arr.nbytes:
            return int(addr)
        if self._stage.nbytes < arr.nbytes:
            if self._stage.nbytes:
                self._e.unregister(self._stage.ctypes.data)
            self._stage = np.zeros(max(arr.nbytes, 4096), dtype=np.uint8)
            self._e.register(self._stage.ctypes.data, self._stage.nbytes)
        self._stage[:arr.nbytes] = arr
        return int(self._stage.ctypes.data)

    def send(self, buf: Any) -> None:
        """WRITE buf into the next free place of the peer's ring with its notification (which
        acknowledges what we have read of ours); returns when the WRITE is complete."""
        if self._closed:
            raise PeerClosed("send on a closed Mooncake channel")
        arr = _bytes(buf)
        n = arr.nbytes
        ring = self._peer.ring_bytes
        if n > ring // 4:
            raise ProtocolError(f"a Mooncake message of {n} B is over a quarter of the peer's {ring} B ring "
                                "(raise the receiver's MOONCAKE_ring_mib)")
        pos = self._tx
        box = self._box
        off = pos % ring
        if off and box.acked >= pos:  # the peer has read all we sent: start again at the ring's head,
            pos += ring - off  # the memory its last messages warmed (not the next cold stretch of it)
            off = 0
            self._free_below = pos
        elif off + n > ring:  # not before the ring's end: it starts at 0
            pos += ring - off
            off = 0
        if pos + n - max(box.acked, self._free_below) > ring:
            self._wait(lambda: pos + n - max(box.acked, self._free_below) <= ring,
                       "send (waiting for room in the peer's ring)")
        src = self._source(arr)
        k = self._sent
        self._unsaid = 0
        self._write(src, off, n, f"D {k} {pos} {n} {self._consumed}", "send")
        self._sent = k + 1
        self._tx = pos + n
        self._reach = max(self._reach, off + n)

    def _write(self, src: int, off: int, n: int, msg: str, what: str) -> None:
        p = self._peer
        try:
            rc = self._e.write(p.segment, src, p.ring_addr + off, n, p.chan, msg)
        except Exception as exc:
            raise TransportError(f"Mooncake {what} failed: {exc}") from None
        if rc != 0:
            self._live.check(time.monotonic() + 1.0, what)  # PeerClosed when the peer is gone
            raise TransportError(f"Mooncake {what}: the engine's WRITE of {n} B to {p.segment} failed (status {rc})")

    def recv_into(self, buf: Any) -> None:
        """Wait for message k's notification and copy it out of our ring into buf."""
        if self._closed:
            raise PeerClosed("receive on a closed Mooncake channel")
        k = self._received
        events = self._box.events
        if k not in events:
            self._wait(lambda: k in events, "receive")
        pos, n = events.pop(k)
        self._received = k + 1
        self._consumed = pos + n
        self._unsaid += n
        dst = _bytes(buf)
        try:
            if n != dst.nbytes:
                raise ProtocolError(f"Mooncake message of {n} B where {dst.nbytes} B were expected")
            off = pos % self._ring.nbytes
            dst[:] = self._ring[off:off + n]
        finally:
            if self._unsaid > self._ring.nbytes // 4:  # a quarter read and not said: say it
                self._unsaid = 0
                self.acks_sent += 1
                self._write(int(self._ring.ctypes.data), 0, 0, f"A {self._consumed}", "receive (acknowledging)")

    def _wait(self, ready: Any, what: str) -> None:
        """Poll the engine until ready(): busy (the Spinner) or sleeping between checks in
        select() on the liveness connection (block); Timeout, or PeerClosed when the peer is gone."""
        poll, live, box = self._e.poll, self._live, self._box
        deadline = live.deadline()
        next_check = 0.0
        while True:
            poll()
            if ready():
                return
            if box.goodbye:  # an attribute read a poll; the call only when it says so
                live.closed(what)
            if not self._busy:
                live.check(deadline, what, self._delay)
            elif self._spin.spun():
                now = time.monotonic()
                if now > next_check:
                    live.check(deadline, what)
                    next_check = now + CHECK_S

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._box.goodbye:
            try:
                self._e.write(self._peer.segment, int(self._ring.ctypes.data), self._peer.ring_addr, 0,
                              self._peer.chan, "G")
            except Exception:
                pass
        for addr in [*self._regions, self._ring.ctypes.data] + ([self._stage.ctypes.data] if self._stage.nbytes else []):
            self._e.unregister(addr)
        self._regions.clear()
        self._e.inboxes.pop(self._me, None)
        try:
            self._sock.close()
        except OSError:
            pass
