"""Stdlib TCP with TCP_NODELAY.

Why each knob:
- TCP_NODELAY on both ends: the reply (8 B) and the tail of every request would
  otherwise wait for Nagle + delayed ACK (up to 40 ms on Linux). Read back with
  getsockopt and recorded in `info`, so a result shows what was in effect.
- Blocking socket, bounded by a watchdog instead of a per-call timeout. Python's
  settimeout() puts a poll() syscall before every recv; SO_RCVTIMEO/SO_SNDTIMEO make the
  kernel arm a timer every time the call sleeps, which on this VM cost 1-3 us per round
  trip (a minimal symmetric 61,440 B ping-pong on one CPU: 18.0 us without, 18.9-21.5
  with). One process-wide watchdog thread instead looks at every blocking channel a few
  times per timeout; a call that has made no progress for `timeout_s` gets its socket
  shut down and raises Timeout. The hot path pays two attribute writes per call.
- recv_into with MSG_WAITALL, looped: the kernel returns the whole message in one call
  unless a timeout or signal cuts it short; the loop covers that case (a single
  recv_into per message on a stream socket is the classic bug).
- poll="busy": non-blocking socket spun on recv_into, for receivers that must not pay
  the cross-CPU wake-up (about 100 us on the development VM; docs/NATIVE.md); the deadline is checked every 256
  empty polls so the spin stays cheap.
- The same send and recv in C (transports/_tcp.c) for the core's compiled loops: the
  channel hands them over as a NativeEndpoint; the core's C never touches the socket.
"""

from __future__ import annotations

import array
import errno
import os
import socket
import struct
import threading
import time
import weakref
from typing import Any

from hopbench.core.transport import NativeEndpoint, Spinner, TransportBase, TransportOptions
from hopbench.errors import ConnectFailed, PeerClosed, Timeout, TransportError

try:
    from . import _tcp as _native

    NATIVE_UNAVAILABLE: str | None = None
except ImportError as _exc:  # not built here (no compiler at install): the Python loop runs
    _native = None  # type: ignore[assignment]
    NATIVE_UNAVAILABLE = f"the TCP transport's C part is not built here ({_exc})"

_WAITALL = socket.MSG_WAITALL
# struct tcp_info (linux/tcp.h): tcpi_bytes_acked and tcpi_bytes_received, u64 each, at byte 120
_TCPI_BYTES = struct.Struct("<QQ")
_TCPI_BYTES_ACKED = 120
_TCPI_BYTES_END = _TCPI_BYTES_ACKED + _TCPI_BYTES.size


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class TcpChannel:
    """A connected TCP socket as a Channel (hopbench.core.transport.Channel)."""

    def __init__(self, sock: socket.socket, options: TransportOptions):
        self._sock = sock
        self._timeout = options.timeout_s
        self._busy = options.poll == "busy"  # auto = block for sockets
        self._share = options.share_cpu
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None)  # blocking at the Python level; the watchdog bounds it
        self._ops = 0  # completed blocking calls: the watchdog's sign of progress
        self._native_ops = array.array("q", [0])  # the same, counted by the compiled loop
        self._in_op = False
        self._expired = False
        self._seen_ops, self._since = -1, 0.0
        if self._busy:
            sock.setblocking(False)
        else:
            _WATCHDOG.add(self)
        self._recv_into = sock.recv_into
        self._sendall = sock.sendall
        self.send = self._send_busy_msg if self._busy else self._send_block
        self.recv_into = self._recv_busy_msg if self._busy else self._recv_block
        self.info = {
            "transport": "tcp",
            "tcp_nodelay": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0,
            "so_sndbuf": sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
            "so_rcvbuf": sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
            "local": "%s:%d" % sock.getsockname()[:2],
            "peer": "%s:%d" % sock.getpeername()[:2],
            "poll": "busy" if self._busy else "block",
            "timeout_s": options.timeout_s,
        }

    @property
    def socket(self) -> socket.socket:
        """The socket (the control connection's path MTU is read from it)."""
        return self._sock

    def alloc(self, nbytes: int) -> bytearray:
        return bytearray(nbytes)

    def set_timeout(self, timeout_s: float) -> float:
        """The timeout of blocking calls from now on (core.transport.ControlChannel); returns
        the one before."""
        old, self._timeout = self._timeout, timeout_s
        return old

    def shutdown(self) -> None:
        """Shut both directions down (wakes a blocked call in another thread); idempotent."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # send/recv_into are bound per instance to the block or busy variant, so the hot
    # path carries no mode test.
    def _send_block(self, buf: Any) -> None:
        self._in_op = True
        try:
            self._sendall(buf)
        except OSError as exc:
            raise self._send_error(exc) from None
        self._in_op = False
        self._ops += 1

    def _send_busy_msg(self, buf: Any) -> None:
        try:
            self._send_busy(buf)
        except OSError as exc:
            raise self._send_error(exc) from None

    def _send_error(self, exc: OSError) -> Exception:
        if isinstance(exc, BlockingIOError) or self._expired:
            return Timeout(f"send timed out after {self._timeout} s")
        if isinstance(exc, (BrokenPipeError, ConnectionResetError)):
            return PeerClosed(f"peer closed the connection ({exc.strerror})")
        return TransportError(f"send failed: {exc}")

    def _send_busy(self, buf: Any) -> None:
        view = memoryview(buf).cast("B")
        sent, n = 0, len(view)
        deadline = None
        while sent < n:
            try:
                sent += self._sock.send(view[sent:])
                deadline = None  # progress: the timeout counts from the last byte that moved
            except BlockingIOError:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self._timeout
                elif now > deadline:
                    raise
        view.release()

    def _recv_block(self, buf: Any) -> None:
        n = len(buf)
        self._in_op = True
        try:
            got = self._recv_into(buf, n, _WAITALL)
        except OSError as exc:
            raise self._recv_error(exc) from None
        if got != n:  # still in the call: the watchdog keeps bounding the rest
            self._recv_rest(buf, got, n)
        self._in_op = False
        self._ops += 1

    def _recv_busy_msg(self, buf: Any) -> None:
        n = len(buf)
        try:
            got = self._recv_busy(buf, 0, n)
        except OSError as exc:
            raise self._recv_error(exc) from None
        if got != n:
            self._recv_rest(buf, got, n)

    def _recv_rest(self, buf: Any, got: int, n: int) -> None:
        if self._expired:
            raise Timeout(f"receive timed out after {self._timeout} s")
        if got == 0 and n > 0:
            raise PeerClosed("peer closed the connection")
        view = memoryview(buf).cast("B")
        try:
            while got < n:
                if self._busy:
                    r = self._recv_busy(view, got, n)
                else:
                    r = self._recv_into(view[got:], n - got, _WAITALL)
                self._ops += 1  # progress: a slow but moving message is not stuck
                if r == 0:
                    if self._expired:
                        raise Timeout(f"receive timed out after {self._timeout} s")
                    raise PeerClosed(f"peer closed the connection mid-message ({got} of {n} bytes)")
                got += r
        except OSError as exc:
            raise self._recv_error(exc) from None
        finally:
            view.release()

    def _recv_error(self, exc: OSError) -> Exception:
        if self._expired or isinstance(exc, BlockingIOError) or exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
            return Timeout(f"receive timed out after {self._timeout} s")
        if isinstance(exc, ConnectionResetError):
            return PeerClosed("peer reset the connection")
        return TransportError(f"receive failed: {exc}")

    def _recv_busy(self, buf: Any, start: int, n: int) -> int:
        """Spin on a non-blocking recv until some bytes (or EOF) arrive."""
        target = buf if start == 0 else memoryview(buf).cast("B")[start:]
        recv_into = self._recv_into
        spin = Spinner(self._share)  # yields when a peer may share this CPU; a check every 256 spins
        deadline = 0.0
        while True:
            try:
                return recv_into(target, n - start)
            except BlockingIOError:
                if spin.spun():
                    now = time.monotonic()
                    if deadline == 0.0:
                        deadline = now + self._timeout
                    elif now > deadline:
                        raise

    def native_endpoint(self) -> NativeEndpoint | None:
        """The compiled loop's view of this channel: this transport's send and recv in C over
        the socket (transports/_tcp.c), its timeout, and the watchdog's progress counter."""
        if _native is None:
            return None
        return NativeEndpoint(_native.endpoint(self._sock.fileno(), int(self._busy)), self._timeout,
                              self._native_error, self._native_ops, self._hold)

    def native_unavailable(self) -> str | None:
        return NATIVE_UNAVAILABLE

    def _hold(self, on: bool) -> None:
        self._in_op = on
        if not on:
            self._ops += 1

    def _native_error(self, failure: str, detail: int, what: str, nbytes: int) -> BaseException:
        """The exceptions the Python path raises for the same failure (same texts)."""
        if failure == "timeout" or self._expired:
            return Timeout(f"{what} timed out after {self._timeout} s")
        if failure == "closed":
            if detail == 0:
                return PeerClosed("peer closed the connection")
            return PeerClosed(f"peer closed the connection mid-message ({detail} of {nbytes} bytes)")
        exc = OSError(detail, os.strerror(detail))  # OSError(errno, ...) is the errno's subclass (BrokenPipeError, ...)
        return self._send_error(exc) if what == "send" else self._recv_error(exc)

    def _bytes_moved(self) -> int:
        """The kernel's count of bytes this socket received plus bytes the peer acknowledged
        (TCP_INFO tcpi_bytes_received + tcpi_bytes_acked, Linux >= 4.1): a blocked call whose
        message is still moving, however slowly, is not stuck."""
        try:
            info = self._sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
        except OSError:
            return 0
        if len(info) < _TCPI_BYTES_END:
            return 0
        acked, received = _TCPI_BYTES.unpack_from(info, _TCPI_BYTES_ACKED)
        return int(acked) + int(received)

    def _watch(self, now: float) -> None:
        """Called by the watchdog: expire a blocking call that made no progress (no call
        completed and no byte moved on the socket) for the timeout: a silent peer, not a
        slow one (docs/PROTOCOL.md, "Timeouts and limits")."""
        ops = self._ops + self._native_ops[0] + self._bytes_moved()
        if not self._in_op or ops != self._seen_ops:
            self._seen_ops, self._since = ops, now
        elif now - self._since >= self._timeout:
            self._expired = True
            try:  # the blocked recv returns 0 / the send fails, and raises Timeout
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        _WATCHDOG.discard(self)
        try:
            self._sock.close()
        except OSError:
            pass


class TcpListener:
    def __init__(self, host: str, port: int, options: TransportOptions):
        self._options = options
        sock = socket.socket(_family(host), socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            # the kernel's largest accept queue (net.core.somaxconn): with a short one, a burst
            # of connections overflows it and the kernel drops their handshakes' last ACK, so
            # a client believes itself connected seconds before the server can accept it (seen:
            # 81 of 7,241 hostile connections closed "late" with a backlog of 16, bench-hostile)
            sock.listen(socket.SOMAXCONN)
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise ConnectFailed(f"cannot listen on {host}:{port}: port in use") from None
            raise ConnectFailed(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self._sock = sock
        self.address = sock.getsockname()[:2]
        self.info = {"transport": "tcp", "address": "%s:%d" % self.address}

    def shutdown(self) -> None:
        """Stop accepting: a blocked accept() in another thread fails at once."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def accept_socket(self, timeout: float | None) -> socket.socket:
        """The next connection's socket (the nixl transport's setup connection is one)."""
        self._sock.settimeout(timeout)
        try:
            conn, _ = self._sock.accept()
        except socket.timeout:
            raise Timeout(f"no connection within {timeout} s") from None
        except OSError as exc:
            raise TransportError(f"accept failed: {exc}") from None
        return conn

    def accept(self, timeout: float | None) -> TcpChannel:
        conn = self.accept_socket(timeout)
        try:
            return TcpChannel(conn, self._options)
        except OSError as exc:  # peer vanished between accept and setup
            conn.close()
            raise PeerClosed(f"peer went away during setup ({exc})") from None

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


class _Watchdog:
    """One daemon thread per process that bounds every blocking TcpChannel call.

    It wakes every quarter of the shortest timeout among live channels (at most once a
    second, at least every 5 ms), so a stuck call raises Timeout between timeout_s and
    timeout_s plus one tick. The period is a polling interval, not synchronisation."""

    def __init__(self) -> None:
        self._chans: "weakref.WeakSet[TcpChannel]" = weakref.WeakSet()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    def add(self, chan: "TcpChannel") -> None:
        with self._lock:
            self._chans.add(chan)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="hopbench-tcp-watchdog", daemon=True)
                self._thread.start()
            self._wake.notify()

    def discard(self, chan: "TcpChannel") -> None:
        with self._lock:
            self._chans.discard(chan)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._chans:
                    self._wake.wait()  # idle: no channel to watch, no wake-ups
                chans = list(self._chans)
                tick = min(1.0, max(0.005, min(c._timeout for c in chans) / 4))
                self._wake.wait(tick)
            now = time.monotonic()
            for c in chans:
                try:
                    c._watch(now)
                except Exception:  # the watchdog must outlive any one channel
                    pass
            del chans


_WATCHDOG = _Watchdog()


def connect_socket(host: str, port: int, timeout: float) -> socket.socket:
    try:
        return socket.create_connection((host, port), timeout=timeout)
    except socket.timeout:
        raise ConnectFailed(f"cannot reach {host}:{port}: connect timed out after {timeout} s") from None
    except OSError as exc:
        raise ConnectFailed(f"cannot reach {host}:{port}: {exc.strerror or exc}") from None


class TcpTransport(TransportBase):
    name = "tcp"
    reuses_control = True  # a plan's cycles run on the control connection itself
    message_framed = False  # a byte stream

    def version(self) -> str:
        import platform

        return f"python {platform.python_version()} socket"

    def native_note(self, poll: str) -> str | None:
        return NATIVE_UNAVAILABLE  # blocking and busy-polled sockets alike

    def listen(self, host: str, port: int, options: TransportOptions) -> TcpListener:
        return TcpListener(host, port, options)

    def connect(self, host: str, port: int, options: TransportOptions) -> TcpChannel:
        sock = connect_socket(host, port, options.connect_timeout_s)
        return TcpChannel(sock, options)
