"""What the one-sided transports (nixl, mooncake: WRITEs into the peer's registered memory, a
notification each) share about the TCP connection that sets a channel up and then stands as
its liveness signal: reading a setup block whole, whether the peer has gone, a wait's
deadline-and-liveness check, and the listener whose connections carry the setup. Each
transport keeps only its engine (register, write, notify) and its handshake (NIXL's own
`nixlBackendEngine` draws the same line)."""

from __future__ import annotations

import select
import socket
import time
from typing import Any, Callable, Protocol

from hopbench.core.transport import TransportOptions
from hopbench.errors import ConnectFailed, PeerClosed, Timeout


def dial(host: str, port: int, options: TransportOptions, who: str) -> socket.socket:
    """The client's setup (and then liveness) connection to the server's listener, no Nagle
    delay on its small blocks, or a one-line ConnectFailed naming the transport."""
    try:
        sock = socket.create_connection((host, port), timeout=options.connect_timeout_s)
    except OSError as exc:
        raise ConnectFailed(f"cannot reach {host}:{port} over {who}: {exc}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exact(sock: socket.socket, n: int, who: str) -> bytes:
    """n bytes of the setup connection; PeerClosed naming `who` (e.g. "NIXL") at its end."""
    out = bytearray()
    while len(out) < n:
        got = sock.recv(n - len(out))
        if not got:
            raise PeerClosed(f"the {who} peer closed its setup connection")
        out += got
    return bytes(out)


def peer_gone(sock: socket.socket, sleep_s: float = 0.0) -> bool:
    """True once the liveness connection has ended (waiting up to sleep_s in select() for it:
    a blocking wait's sleep between checks); a signal or a spurious wake-up is not an end."""
    try:
        ready = select.select([sock], [], [], sleep_s)[0]
        return bool(ready) and not sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


class Inbox(Protocol):
    goodbye: bool  # the peer said it is closing (its notification), or its connection ended


class Liveness:
    """A channel's deadline and its peer's liveness, checked between polls: Timeout after
    the channel's timeout, PeerClosed once the peer said goodbye or its setup connection
    ended. `who` names the transport in both."""

    def __init__(self, who: str, sock: socket.socket, box: Inbox, timeout_s: float) -> None:
        self.who, self.sock, self.box, self.timeout_s = who, sock, box, timeout_s

    def deadline(self) -> float:
        return time.monotonic() + self.timeout_s

    def check(self, deadline: float, what: str, sleep_s: float = 0.0) -> None:
        """The timeout, and the liveness connection (waiting up to sleep_s on it)."""
        if time.monotonic() > deadline:
            raise Timeout(f"{self.who} {what} timed out after {self.timeout_s} s")
        if peer_gone(self.sock, sleep_s):
            self.box.goodbye = True
        self.closed(what)

    def closed(self, what: str) -> None:
        """PeerClosed when the peer has said goodbye."""
        if self.box.goodbye:
            raise PeerClosed(f"{self.who} peer closed the channel during {what}")

    def alive(self) -> bool:
        """False once the liveness connection says the peer is gone."""
        return not peer_gone(self.sock)


class SetupListener:
    """The plan's data port: a TCP listener (transports/tcp.py's) whose connections carry
    the setup (`handshake`: the accepted socket to a channel) and then stand as the liveness
    signal. `info` is the transport's listener record."""

    def __init__(self, host: str, port: int, options: TransportOptions, who: str, info: dict[str, Any],
                 handshake: Callable[[socket.socket], Any]) -> None:
        from .tcp import TcpListener

        self._who, self._handshake = who, handshake
        self._tcp = TcpListener(host, port, options)
        self.address = self._tcp.address
        self.info = {**info, "endpoint": "%s:%d" % self.address}

    def accept(self, timeout: float | None) -> Any:
        conn = self._tcp.accept_socket(timeout)
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return self._handshake(conn)
        except OSError as exc:
            conn.close()
            raise PeerClosed(f"the {self._who} peer went away during setup ({exc})") from None
        except BaseException:
            conn.close()
            raise

    def close(self) -> None:
        self._tcp.close()
