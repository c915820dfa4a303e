"""What the transports whose data moves outside a socket (nixl, mooncake) share about the
TCP connection that sets a channel up and then stands as its liveness signal: reading a
setup block whole, and whether the peer has gone (its end of that connection)."""

from __future__ import annotations

import select
import socket

from hopbench.errors import PeerClosed


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
