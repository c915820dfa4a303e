"""The nixl transport's setup: the listener on the plan's data port (a TCP listener whose
connections carry the setup and then stand as the liveness signal), the client's connect,
and the handshake both run (docs/PROTOCOL.md "Data channels")."""

from __future__ import annotations

import os
import socket
import struct
from typing import Any

from hopbench.core.transport import TransportBase, TransportOptions
from hopbench.errors import PeerClosed, ProtocolError, Timeout

from .._onesided import SetupListener, dial
from . import native
from .agent import BACKEND, _Agent, _plugins, _split, _version
from .channel import NixlChannel
from .wire import HELLO, _recv_block, _send_block


def _handshake(sock: socket.socket, agent: _Agent, chan_id: int | None, timeout_s: float) -> tuple[str, int]:
    """Hello, channel id and metadata each way over the setup connection (the client names
    the channel); returns (the peer's agent name, the channel id)."""
    sock.settimeout(timeout_s)
    try:
        mine = agent.raw.getLocalMD()
        if chan_id is not None:  # client: speaks first
            _send_block(sock, HELLO, struct.pack("!I", chan_id), mine)
        got = _recv_block(sock)
        if got[:len(HELLO)] != HELLO or len(got) < len(HELLO) + 4:
            raise ProtocolError("the peer is not a hopbench nixl endpoint")
        theirs = struct.unpack_from("!I", got, len(HELLO))[0]
        if chan_id is None:
            chan_id = theirs
            _send_block(sock, HELLO, struct.pack("!I", chan_id), mine)
        elif theirs != chan_id:
            raise ProtocolError("the NIXL peer answered for another channel")
    except socket.timeout:
        raise Timeout(f"NIXL setup: no answer within {timeout_s} s") from None
    except OSError as exc:
        raise PeerClosed(f"NIXL setup connection failed ({exc})") from None
    sock.settimeout(None)
    sock.setblocking(False)
    return agent.add_peer(got[len(HELLO) + 4:]), chan_id


class NixlListener(SetupListener):
    """The plan's data port (transports/_onesided.py): the setup names each end's agent and
    channel id."""

    def __init__(self, host: str, port: int, options: TransportOptions) -> None:
        agent = _Agent.get(options)

        def handshake(conn: socket.socket) -> NixlChannel:
            name, chan_id = _handshake(conn, agent, None, options.connect_timeout_s)
            return NixlChannel(agent, name, chan_id | 1, conn, options, self.info["endpoint"])

        super().__init__(host, port, options, "nixl", {"transport": "nixl", "nixl": _version()}, handshake)


class NixlTransport(TransportBase):
    name = "nixl"
    device_memory = True  # VRAM registered as such: --memory cuda,direct

    def check_settings(self, settings: dict[str, Any]) -> None:
        _split(settings)

    def version(self) -> str:
        return f"nixl {_version()} ({BACKEND} backend, its bundled UCX)"

    def devices(self) -> list[str] | None:
        return [f"NIXL backend plugins: {', '.join(sorted(_plugins()))}"]

    def native_note(self, poll: str) -> str | None:
        return native.BLOCKING_KEEPS_PYTHON if poll == "block" else native.bind()

    def listen(self, host: str, port: int, options: TransportOptions) -> NixlListener:
        _split(options.settings)
        return NixlListener(host, port, options)

    def connect(self, host: str, port: int, options: TransportOptions) -> NixlChannel:
        agent = _Agent.get(options)
        sock = dial(host, port, options, "nixl")
        chan_id = int.from_bytes(os.urandom(4), "big") & ~1  # the client's end is even, the server's odd
        try:
            name, _ = _handshake(sock, agent, chan_id, options.connect_timeout_s)
        except BaseException:
            sock.close()
            raise
        return NixlChannel(agent, name, chan_id, sock, options, f"{host}:{port}")
