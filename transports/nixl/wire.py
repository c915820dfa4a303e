"""What the two ends of a nixl channel say to each other: the setup blocks over the plan's
data port (hello, channel id, agent metadata: docs/PROTOCOL.md "Data channels"), and the
notifications of a channel (credits, data, eager messages, mismatches, goodbye), filed by
k in the channel's inbox."""

from __future__ import annotations

import socket
import struct
from typing import Any

from hopbench.errors import ProtocolError

from .._onesided import recv_exact

HELLO = b"HOPBNIX1"
MAX_METADATA = 1 << 20  # a peer's agent metadata: 0.5 KiB measured; more is refused

# notifications: kind, the receiving end's id (the client's is even, the server's the client's
# + 1: both ends of a channel may share one agent), then the kind's fields
_HEAD = struct.Struct("!cI")
# k numbers the receives (and so the sends) of each direction: message k fills receive k
_CREDIT = struct.Struct("!cIIIQQIB")  # C, end, k, region id, address, length, device, VRAM? [+ registration]
_DATA = struct.Struct("!cIII")  # D, end, k, region id: WRITE k is in that region [+ _NEXT]
_NEXT = struct.Struct("!II")  # a predicted credit riding on a data notification: k, region id
_EAGER = struct.Struct("!cII")  # E, end, k [+ the message]: a small send no receive was posted for
_MISMATCH = struct.Struct("!cIIQ")  # M, end, k, the message's length
_GOODBYE = struct.Struct("!cI")  # G, end
EAGER_MAX = 64 << 10  # a send this small with no credit after EAGER_WAIT_S travels in its notification
EAGER_WAIT_S = 0.01

Credit = tuple[bool, int, int, "bytes | None"]  # hard?, the peer's region id, its length (-1: predicted), raw


class _Inbox:
    """One channel's notifications, parsed once and keyed by k: the peer's credits (its
    receives: (hard?, region id, length, the raw credit or None)) and our messages
    (kind, region id or length, the eager body or None)."""

    def __init__(self) -> None:
        self.credits: dict[int, Credit] = {}
        self.events: dict[int, tuple[bytes, int, Any]] = {}
        self.goodbye = False

    def put(self, msg: bytes) -> None:
        kind = msg[:1]
        if kind == b"D":
            _, _, k, rid = _DATA.unpack_from(msg)
            self.events[k] = (b"D", rid, None)
            if len(msg) == _DATA.size + _NEXT.size:  # the sender's predicted next receive
                nk, nrid = _NEXT.unpack_from(msg, _DATA.size)
                self.credits.setdefault(nk, (False, nrid, -1, None))  # a hard credit for it wins (atomic)
        elif kind == b"C":
            _, _, k, rid, _, length, _, _ = _CREDIT.unpack_from(msg)
            self.credits[k] = (True, rid, length, msg)
        elif kind == b"E":
            self.events[_EAGER.unpack_from(msg)[2]] = (b"E", 0, memoryview(msg)[_EAGER.size:])
        elif kind == b"M":
            _, _, k, n = _MISMATCH.unpack_from(msg)
            self.events[k] = (b"M", n, None)
        elif kind == b"G":
            self.goodbye = True



def _md_name(metadata: bytes) -> str | None:
    """The agent name at the head of NIXL's serialized metadata ("nixlSerDes|Agent" + u64 length + name)."""
    head = b"nixlSerDes|Agent"
    if not metadata.startswith(head) or len(metadata) < len(head) + 8:
        return None
    n = int.from_bytes(metadata[len(head):len(head) + 8], "little")
    return metadata[len(head) + 8:len(head) + 8 + n].decode(errors="replace")



def _send_block(sock: socket.socket, *parts: bytes) -> None:
    body = b"".join(parts)
    sock.sendall(struct.pack("!I", len(body)) + body)


def _recv_block(sock: socket.socket) -> bytes:
    n = struct.unpack("!I", recv_exact(sock, 4, "NIXL"))[0]
    if n > MAX_METADATA:
        raise ProtocolError(f"NIXL setup block of {n} B (at most {MAX_METADATA})")
    return recv_exact(sock, n, "NIXL")

