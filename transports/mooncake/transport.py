"""The mooncake transport's setup: the listener on the plan's data port (a TCP listener
whose connections carry the setup and then stand as the liveness signal), the client's
connect, and the handshake both run (docs/PROTOCOL.md "Data channels")."""

from __future__ import annotations

import json
import os
import socket
import struct
from typing import Any

import numpy as np

from hopbench.core.transport import TransportBase, TransportOptions
from hopbench.errors import ConfigError, PeerClosed, ProtocolError, Timeout

from .._onesided import SetupListener, dial, recv_exact
from .channel import MooncakeChannel, Peer
from .engine import PROTOCOLS, RDMA_DEVICES, Engine, Inbox, parse, rdma_devices, version

HELLO = "HOPBMOON1"
MAX_SETUP = 4096


def _send(sock: socket.socket, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    sock.sendall(struct.pack("!I", len(raw)) + raw)


def _recv(sock: socket.socket) -> dict[str, Any]:
    n = struct.unpack("!I", recv_exact(sock, 4, "Mooncake"))[0]
    if n > MAX_SETUP:
        raise ProtocolError(f"Mooncake setup block of {n} B (at most {MAX_SETUP})")
    try:
        body: dict[str, Any] = json.loads(recv_exact(sock, n, "Mooncake"))
        if body.get("hello") != HELLO:
            raise ValueError
        for key in ("chan", "rpc_port", "ring_addr", "ring_bytes"):
            if not isinstance(body.get(key), int):
                raise ValueError
    except (ValueError, AttributeError):
        raise ProtocolError("the peer is not a hopbench mooncake endpoint") from None
    return body


def _handshake(sock: socket.socket, options: TransportOptions, chan: int | None) -> MooncakeChannel:
    """Each end's engine port, channel id and ring over the setup connection (the client names
    the channel: its end is even, the server's odd); returns the channel."""
    settings = parse(options.settings)
    made: tuple[Engine, int, np.ndarray] | None = None
    sock.settimeout(options.connect_timeout_s)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        engine = Engine.get(sock.getsockname()[0], settings)
        peer_host = sock.getpeername()[0]
        if chan is None:  # server: the client speaks first
            theirs = _recv(sock)
            chan = theirs["chan"] | 1
        me = chan
        ring = np.zeros(settings.ring_bytes, dtype=np.uint8)
        engine.register(ring.ctypes.data, ring.nbytes)
        engine.inboxes[me] = Inbox()
        made = (engine, me, ring)
        mine = {"hello": HELLO, "chan": me, "rpc_port": engine.rpc_port, "ring_addr": int(ring.ctypes.data),
                "ring_bytes": ring.nbytes}
        _send(sock, mine)
        if me & 1 == 0:
            theirs = _recv(sock)
            if theirs["chan"] != me | 1:
                raise ProtocolError("the Mooncake peer answered for another channel")
    except BaseException as exc:
        if made is not None:  # nothing of a channel that never was stays registered
            made[0].unregister(made[2].ctypes.data)
            made[0].inboxes.pop(made[1], None)
        if isinstance(exc, socket.timeout):
            raise Timeout(f"Mooncake setup: no answer within {options.connect_timeout_s} s") from None
        if isinstance(exc, OSError):
            raise PeerClosed(f"Mooncake setup connection failed ({exc})") from None
        raise
    sock.settimeout(None)
    sock.setblocking(False)
    peer = Peer(f"{peer_host}:{theirs['rpc_port']}", theirs["chan"], theirs["ring_addr"], theirs["ring_bytes"])
    return MooncakeChannel(engine, me, ring, peer, sock, options, settings)


class MooncakeListener(SetupListener):
    """The plan's data port (transports/_onesided.py): the setup names each end's segment,
    channel and ring."""

    def __init__(self, host: str, port: int, options: TransportOptions) -> None:
        super().__init__(host, port, options, "Mooncake", {"transport": "mooncake", "mooncake": version()},
                         lambda conn: _handshake(conn, options, None))


class MooncakeTransport(TransportBase):
    name = "mooncake"

    def check_settings(self, settings: dict[str, Any]) -> None:
        parse(settings)

    def check_here(self, settings: dict[str, Any]) -> None:
        s = parse(settings)
        if s.protocol == "rdma" and not rdma_devices():
            raise ConfigError(f"MOONCAKE_protocol=rdma: this host has no RDMA device ({RDMA_DEVICES} is empty); "
                              f"use one of {', '.join(PROTOCOLS)} that it has: MOONCAKE_protocol=tcp")

    def version(self) -> str:
        return f"{version()} (Transfer Engine, P2PHANDSHAKE)"

    def devices(self) -> list[str] | None:
        found = rdma_devices()
        return [f"RDMA devices for MOONCAKE_protocol=rdma: {', '.join(found) if found else 'none'}"]

    def listen(self, host: str, port: int, options: TransportOptions) -> MooncakeListener:
        parse(options.settings)
        return MooncakeListener(host, port, options)

    def connect(self, host: str, port: int, options: TransportOptions) -> MooncakeChannel:
        parse(options.settings)
        sock = dial(host, port, options, "mooncake")
        chan = int.from_bytes(os.urandom(4), "big") & ~1 & 0x7FFFFFFF
        try:
            return _handshake(sock, options, chan)
        except BaseException:
            sock.close()
            raise
