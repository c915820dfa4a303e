"""An in-memory transport for unit tests: two queues joined back to back.

`FakeTransport.pair()` gives two connected channels; `listen`/`connect` work inside one
process through a module-level table keyed by port. Messages keep their boundaries, like
ZeroMQ's, so a length mismatch is a ProtocolError."""

from __future__ import annotations

import itertools
import queue
import threading
from typing import Any

from hopbench.core.transport import TransportBase, TransportOptions
from hopbench.errors import ConnectFailed, PeerClosed, ProtocolError, Timeout

#: a test pair's blocking calls: shorter than records.TIMEOUT_S, so a hung check fails fast
PAIR_TIMEOUT_S = 5.0

_CLOSED = object()
_listeners: dict[int, "FakeListener"] = {}
_ports = itertools.count(40000)
_lock = threading.Lock()


class FakeChannel:
    def __init__(self, inbox: queue.Queue[Any], outbox: queue.Queue[Any], timeout_s: float = PAIR_TIMEOUT_S):
        self._inbox = inbox
        self._outbox = outbox
        self._timeout = timeout_s
        self._closed = False
        self.info = {"transport": "fake", "poll": "block"}

    def alloc(self, nbytes: int) -> bytearray:
        return bytearray(nbytes)

    def send(self, buf: Any) -> None:
        if self._closed:
            raise PeerClosed("channel closed")
        self._outbox.put(bytes(buf))

    def recv_into(self, buf: Any) -> None:
        try:
            msg = self._inbox.get(timeout=self._timeout)
        except queue.Empty:
            raise Timeout(f"receive timed out after {self._timeout} s") from None
        if msg is _CLOSED:
            self._inbox.put(_CLOSED)
            raise PeerClosed("peer closed the channel")
        view = memoryview(buf).cast("B")
        if len(msg) != len(view):
            raise ProtocolError(f"message of {len(msg)} bytes where {len(view)} were expected")
        view[:] = msg

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._outbox.put(_CLOSED)


def pair(timeout_s: float = PAIR_TIMEOUT_S) -> tuple[FakeChannel, FakeChannel]:
    a: queue.Queue[Any] = queue.Queue()
    b: queue.Queue[Any] = queue.Queue()
    return FakeChannel(a, b, timeout_s), FakeChannel(b, a, timeout_s)


class FakeListener:
    def __init__(self, port: int, options: TransportOptions):
        self.address = ("fake", port)
        self.info = {"transport": "fake"}
        self._pending: queue.Queue[FakeChannel] = queue.Queue()

    def accept(self, timeout: float | None) -> FakeChannel:
        try:
            return self._pending.get(timeout=timeout)
        except queue.Empty:
            raise Timeout(f"no connection within {timeout} s") from None

    def close(self) -> None:
        with _lock:
            _listeners.pop(self.address[1], None)


class FakeTransport(TransportBase):
    name = "fake"
    bounded_send = False  # an in-memory queue

    def version(self) -> str:
        return "in-memory"

    def listen(self, host: str, port: int, options: TransportOptions) -> FakeListener:
        with _lock:
            port = port or next(_ports)
            if port in _listeners:
                raise ConnectFailed(f"cannot listen on fake:{port}: port in use")
            lst = _listeners[port] = FakeListener(port, options)
        return lst

    def connect(self, host: str, port: int, options: TransportOptions) -> FakeChannel:
        with _lock:
            lst = _listeners.get(port)
        if lst is None:
            raise ConnectFailed(f"cannot reach fake:{port}: connection refused")
        mine, theirs = pair(options.timeout_s)
        mine.info["poll"] = theirs.info["poll"] = options.poll  # a queue has no poll mode; recorded as asked
        lst._pending.put(theirs)
        return mine
