"""The transport contract and the registry.

A transport only moves bytes. It never times anything, never interprets payloads and
never sees the CLI. Messages have a length both ends already know (the protocol says
it); a receive fills its buffer exactly or raises.

Errors: every library exception is translated to the tree in hopbench.errors
(ConnectFailed, PeerClosed, Timeout, TransportError); TransportUnavailable when the
library is not installed, with the exact install line.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from hopbench.errors import ConfigError, TransportUnavailable


@runtime_checkable
class Channel(Protocol):
    """A connected, bidirectional, message-oriented byte mover."""

    #: settings actually in effect (e.g. TCP_NODELAY read back with getsockopt),
    #: written into the result. Plain JSON types only.
    info: dict[str, Any]

    def send(self, buf) -> None:
        """Send the whole buffer as one message. Blocks until the library has taken all
        of it (not until the peer has it). Raises PeerClosed, Timeout, TransportError."""

    def recv_into(self, buf) -> None:
        """Receive exactly one message of len(buf) bytes into buf. Blocks until it is
        whole. Raises PeerClosed at end of stream (also mid-message), Timeout after the
        channel's timeout, ProtocolError when a message-framed library delivers a
        message of another length."""

    def close(self) -> None:
        """Release everything. Idempotent; never raises."""


class Listener(Protocol):
    """A bound endpoint that accepts one Channel at a time."""

    #: (host, port) really bound (port 0 resolved to the real port)
    address: tuple[str, int]

    def accept(self, timeout: float | None) -> Channel:
        """Wait for one peer; Timeout when none comes within `timeout` seconds."""

    def close(self) -> None: ...


class Transport(Protocol):
    name: str

    def listen(self, host: str, port: int, options: "TransportOptions") -> Listener: ...

    def connect(self, host: str, port: int, options: "TransportOptions") -> Channel: ...

    def version(self) -> str: ...


@dataclass(frozen=True)
class TransportOptions:
    """What a transport needs to know: timeouts, poll mode and its own settings.

    `settings` holds transport-specific knobs from config or flags (e.g. UCX_TLS); each
    transport documents which keys it reads and rejects unknown ones."""

    timeout_s: float = 10.0
    connect_timeout_s: float = 5.0
    poll: str = "auto"  # "block", "busy", or "auto": the transport's measured-faster default
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Registered:
    name: str
    target: str  # "module:attribute", imported on first use
    extra: str | None  # pip extra that provides the library
    library: str | None  # distribution name whose version we report


REGISTRY: dict[str, Registered] = {
    "tcp": Registered("tcp", "transports.tcp:TcpTransport", None, None),
    "zmq": Registered("zmq", "transports.zmq:ZmqTransport", "zmq", "pyzmq"),
    "ucx": Registered("ucx", "transports.ucx:UcxTransport", "ucx", "ucxx-cu12"),
    "fake": Registered("fake", "transports.fake:FakeTransport", None, None),
}


def install_line(extra: str) -> str:
    return f"pip install 'hopbench[{extra}]'"


def get_transport(name: str) -> Transport:
    """Resolve a transport by name, importing its module only now."""
    try:
        reg = REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown transport {name!r} (known: {', '.join(REGISTRY)})") from None
    module_name, attr = reg.target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f"; install it with: {install_line(reg.extra)}" if reg.extra else ""
        raise TransportUnavailable(f"transport {name!r} is not available ({exc}){hint}") from None
    return getattr(module, attr)()


def describe_transports() -> list[dict[str, Any]]:
    """One row per registered transport: importable here?, library version, install line."""
    rows = []
    for reg in REGISTRY.values():
        row: dict[str, Any] = {"name": reg.name, "extra": reg.extra}
        try:
            t = get_transport(reg.name)
            row.update(available=True, version=t.version(), error=None, install=None)
        except TransportUnavailable as exc:
            row.update(available=False, version=None, error=str(exc),
                       install=install_line(reg.extra) if reg.extra else None)
        rows.append(row)
    return rows
