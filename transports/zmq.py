"""ZeroMQ (pyzmq) transport.

Choices, each measured (benchmarks/zmq_choices.py; figures in the commit log and in
docs/TRANSPORTS.md):
- Socket pattern: PAIR on both ends. One peer per data listener (the server opens one
  per plan), no envelope frames (ROUTER/DEALER add an identity frame per message) and no
  REQ/REP state machine, which a lost message would wedge.
- Receive: `recv_into` a preallocated buffer (pyzmq >= 26); a message of another length
  is a ProtocolError, never a short sample.
- Send: `copy` decided by measurement at the mission's sizes (COPY_THRESHOLD below).
- LINGER 0 (close never blocks). IMMEDIATE stays off: with it, a peer's close made
  ZeroMQ drop replies that had arrived but were not yet read (8 of 200 sessions lost
  their last reply in a pyzmq-only test); a dead port is caught by the hello timeout.
  SNDTIMEO/RCVTIMEO for every blocking call. Peer close: ZeroMQ never reports it on the
  data socket (and socket monitors lost messages at close in our tests), so a graceful
  close sends an empty message first, which the peer reads as PeerClosed; a peer that
  dies abruptly is noticed by the receive timeout (and, in a session, by the TCP
  control connection).
- Connect: ZeroMQ connects asynchronously, so the client sends an 8-byte hello and waits
  for the server's 8-byte answer within connect_timeout; no answer -> ConnectFailed.
"""

from __future__ import annotations

import time
from typing import Any

import zmq

from hopbench.core.transport import Spinner, TransportBase, TransportOptions
from hopbench.errors import (
    ConnectFailed,
    PeerClosed,
    ProtocolError,
    Timeout,
    TransportError,
)

HELLO = b"HOPBZMQ1"
SLICE_MS = 200  # receive slice: how often a blocked receive checks its deadline
# Messages at least this large are sent zero-copy (copy=False); below it pyzmq copies.
# Measured on loopback with PAIR, all on one CPU (benchmarks/zmq_choices.py): copying was
# as fast or faster up to 512 KiB (184,320 B: 77 vs 90 us) and level at 1 MiB (214 vs 210).
COPY_THRESHOLD = 1 << 20
CLOSE_LINGER_MS = 1000
KNOWN_SETTINGS = {"copy_threshold", "sndhwm", "rcvhwm", "io_threads"}


def _ctx() -> "zmq.Context[Any]":
    ctx: zmq.Context[Any] = zmq.Context.instance()
    return ctx


def _check_settings(settings: dict[str, Any]) -> None:
    unknown = set(settings) - KNOWN_SETTINGS
    if unknown:
        from hopbench.errors import ConfigError

        raise ConfigError(f"unknown zmq setting(s) {sorted(unknown)} (known: {sorted(KNOWN_SETTINGS)})")


def _new_socket(options: TransportOptions) -> "zmq.Socket[Any]":
    s: zmq.Socket[Any] = _ctx().socket(zmq.PAIR)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.SNDTIMEO, int(options.timeout_s * 1000))
    s.setsockopt(zmq.RCVTIMEO, min(SLICE_MS, int(options.timeout_s * 1000)))
    for key, opt in (("sndhwm", zmq.SNDHWM), ("rcvhwm", zmq.RCVHWM)):
        if key in options.settings:
            s.setsockopt(opt, int(options.settings[key]))
    return s


class ZmqChannel:
    def __init__(self, sock: "zmq.Socket[Any]", options: TransportOptions, endpoint: str):
        self._sock = sock
        self._timeout = options.timeout_s
        self._share = options.share_cpu
        self._busy = options.poll == "busy"  # auto = block for ZeroMQ
        self._copy_threshold = int(options.settings.get("copy_threshold", COPY_THRESHOLD))
        self._recv = sock.recv_into
        self._send = sock.send
        self.recv_into = self._recv_busy if self._busy else self._recv_block
        self.info = {
            "transport": "zmq",
            "pattern": "PAIR",
            "endpoint": endpoint,
            "pyzmq": zmq.__version__,
            "libzmq": zmq.zmq_version(),
            "copy_threshold": self._copy_threshold,
            "linger": sock.getsockopt(zmq.LINGER),
            "sndhwm": sock.getsockopt(zmq.SNDHWM),
            "rcvhwm": sock.getsockopt(zmq.RCVHWM),
            "poll": "busy" if self._busy else "block",
            "timeout_s": options.timeout_s,
        }

    def alloc(self, nbytes: int) -> bytearray:
        return bytearray(nbytes)

    def send(self, buf: Any) -> None:
        try:
            self._send(buf, copy=len(buf) < self._copy_threshold)
        except zmq.Again:
            raise Timeout(f"send timed out after {self._timeout} s") from None
        except zmq.ZMQError as exc:
            raise TransportError(f"zmq send failed: {exc}") from None

    def _got(self, n: int, buf: Any) -> None:
        if n != len(buf):
            if n == 0:
                raise PeerClosed("peer closed the zmq channel")
            raise ProtocolError(f"zmq message of {n} bytes where {len(buf)} were expected")

    def _recv_block(self, buf: Any) -> None:
        recv = self._recv
        deadline = None
        while True:
            try:
                self._got(recv(buf), buf)
                return
            except zmq.Again:
                self._idle_check(deadline)
                if deadline is None:
                    deadline = time.monotonic() + self._timeout - SLICE_MS / 1000
            except zmq.ZMQError as exc:
                raise TransportError(f"zmq receive failed: {exc}") from None

    def _recv_busy(self, buf: Any) -> None:
        recv = self._recv
        flags = zmq.NOBLOCK
        spin = Spinner(self._share, check_every=4096)  # yields when a peer may share this CPU
        deadline = None
        while True:
            try:
                self._got(recv(buf, flags=flags), buf)
                return
            except zmq.Again:
                if spin.spun():
                    self._idle_check(deadline)
                    if deadline is None:
                        deadline = time.monotonic() + self._timeout
            except zmq.ZMQError as exc:
                raise TransportError(f"zmq receive failed: {exc}") from None

    def _idle_check(self, deadline: float | None) -> None:
        """Called when no message came within a receive slice: past the timeout?"""
        if deadline is not None and time.monotonic() > deadline:
            raise Timeout(f"receive timed out after {self._timeout} s")

    def close(self) -> None:
        """Graceful close: an empty message tells the peer we are gone (ZeroMQ itself
        never reports a disconnect on the data socket), then a bounded linger so that
        it and the last reply are not dropped. close() does not block on the linger."""
        if self._sock.closed:
            return
        try:
            self._send(b"", zmq.NOBLOCK)
        except zmq.ZMQError:
            pass
        self._sock.setsockopt(zmq.LINGER, CLOSE_LINGER_MS)
        self._sock.close()


def _endpoint(sock: Any, host: str, port: int | None = None) -> str:
    """A tcp endpoint for `host` (an IPv6 literal in brackets, the socket's IPV6 option set:
    libzmq refuses IPv6 addresses otherwise)."""
    if ":" in host:
        sock.setsockopt(zmq.IPV6, 1)
        host = f"[{host.strip('[]')}]"
    return f"tcp://{host}" if port is None else f"tcp://{host}:{port}"


class ZmqListener:
    def __init__(self, host: str, port: int, options: TransportOptions):
        self._options = options
        self._sock = _new_socket(options)
        try:
            if port:
                self._sock.bind(_endpoint(self._sock, host, port))
            else:
                port = self._sock.bind_to_random_port(_endpoint(self._sock, host))
        except zmq.ZMQError as exc:
            self._sock.close(0)
            if exc.errno == zmq.EADDRINUSE:
                raise ConnectFailed(f"cannot listen on {host}:{port}: port in use") from None
            raise ConnectFailed(f"cannot listen on {host}:{port}: {exc}") from None
        self.address = (host, port)
        self.info = {"transport": "zmq", "endpoint": f"tcp://{host}:{port}"}
        self._handed = False

    def accept(self, timeout: float | None) -> ZmqChannel:
        """Wait for the client's hello, answer it, hand the socket over as a channel."""
        hello = bytearray(len(HELLO))
        poller_ms = None if timeout is None else int(timeout * 1000)
        if not self._sock.poll(poller_ms, zmq.POLLIN):
            raise Timeout(f"no zmq peer within {timeout} s")
        n = self._sock.recv_into(hello)
        if n != len(HELLO) or bytes(hello) != HELLO:
            raise ProtocolError("zmq peer did not send the hopbench hello")
        try:
            self._sock.send(HELLO)
        except zmq.Again:
            raise PeerClosed("zmq peer went away during the hello") from None
        self._handed = True
        return ZmqChannel(self._sock, self._options, f"tcp://{self.address[0]}:{self.address[1]}")

    def close(self) -> None:
        if not self._handed:
            self._sock.close(0)


class ZmqTransport(TransportBase):
    name = "zmq"
    known_settings = frozenset(KNOWN_SETTINGS)

    def check_settings(self, settings: dict[str, Any]) -> None:
        _check_settings(settings)

    def version(self) -> str:
        return f"pyzmq {zmq.__version__} (libzmq {zmq.zmq_version()})"

    def listen(self, host: str, port: int, options: TransportOptions) -> ZmqListener:
        _check_settings(options.settings)
        return ZmqListener(host, port, options)

    def connect(self, host: str, port: int, options: TransportOptions) -> ZmqChannel:
        _check_settings(options.settings)
        s = _new_socket(options)
        endpoint = _endpoint(s, host, port)
        try:
            s.setsockopt(zmq.SNDTIMEO, int(options.connect_timeout_s * 1000))
            s.connect(endpoint)
            s.send(HELLO)
            if not s.poll(int(options.connect_timeout_s * 1000), zmq.POLLIN):
                raise zmq.Again()
            answer = bytearray(len(HELLO))
            if s.recv_into(answer) != len(HELLO) or bytes(answer) != HELLO:
                raise ProtocolError(f"{endpoint} is not a hopbench zmq data listener")
            s.setsockopt(zmq.SNDTIMEO, int(options.timeout_s * 1000))
        except zmq.Again:
            s.close(0)
            raise ConnectFailed(f"cannot reach {host}:{port} over zmq: no answer within {options.connect_timeout_s} s") from None
        except zmq.ZMQError as exc:
            s.close(0)
            raise ConnectFailed(f"cannot reach {host}:{port} over zmq: {exc}") from None
        except BaseException:
            s.close(0)
            raise
        return ZmqChannel(s, options, endpoint)
