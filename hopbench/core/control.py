"""The control connection (docs/PROTOCOL.md, "Connections"): TCP on the served port, with
TCP_NODELAY, opened through the transport registry like every channel. It is a TCP
channel by the protocol's definition, so its TCP-specific parts are used here and only
here: shutdown() (the server's handshake watchdog and signal handling wake a blocked
call with it) and the socket (the path MTU doctor reads; the close a client awaits after
BYE)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

from hopbench.core.transport import ControlChannel, TransportOptions, control_transport
from hopbench.errors import ConnectFailed


def connect(host: str, port: int, *, timeout_s: float, connect_timeout_s: float, poll: str = "auto") -> Any:
    """The client's control connection to a `hopbench serve`. A refused connection to another
    host names the usual cause: `serve` binds 127.0.0.1 unless given --bind."""
    opts = TransportOptions(timeout_s=timeout_s, connect_timeout_s=connect_timeout_s, poll=poll)
    try:
        return control_transport().connect(host, port, opts)
    except ConnectFailed as exc:
        if "refused" not in str(exc).lower() or _loopback(host):
            raise
        raise ConnectFailed(f"{exc} (is `hopbench serve` running there and listening on that address? It binds "
                            f"127.0.0.1 unless told otherwise: on that host, hopbench serve --bind {host}:{port} "
                            f"or --bind 0.0.0.0:{port})") from None


def _loopback(host: str) -> bool:
    import ipaddress
    import socket

    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def listen(host: str, port: int, *, idle_timeout_s: float, poll: str = "auto") -> Any:
    """The server's listener. Its channels carry the tcp cycles too, so they take the
    server's poll mode; a client silent for idle_timeout_s is dropped."""
    return control_transport().listen(host, port, TransportOptions(timeout_s=idle_timeout_s, poll=poll))


def shutdown(channel_or_listener: Any) -> None:
    """Wake whatever blocks on it (idempotent)."""
    channel_or_listener.shutdown()


def path_mtu(channel: Any) -> int | None:
    import socket

    try:
        return int(channel.socket.getsockopt(socket.IPPROTO_IP, 14))  # IP_MTU (Linux)
    except OSError:
        return None


def await_close(channel: Any, wait_s: float) -> bytes | None:
    """After BYE: what the peer sent before closing (b"" = it closed cleanly), or None when
    it did not close within wait_s. The channel is closed either way."""
    sock = channel.socket
    sock.settimeout(wait_s)
    try:
        return bytes(sock.recv(1))
    except TimeoutError:
        return None
    except OSError:
        return b""
    finally:
        channel.close()


@contextlib.contextmanager
def patience(channel: ControlChannel, timeout_s: float) -> Iterator[None]:
    """The channel's timeout raised for one wait: a plan of a start group waits for its ACCEPT
    until the group's other targets have sent theirs (docs/PROTOCOL.md, "Plans started together")."""
    old = channel.set_timeout(timeout_s)
    if old > timeout_s:
        channel.set_timeout(old)
    try:
        yield
    finally:
        channel.set_timeout(old)
