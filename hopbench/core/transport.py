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
import os
import socket
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

from hopbench.errors import ConfigError, PeerClosed, ProtocolError, Timeout, TransportError, TransportUnavailable
from hopbench.records import CONNECT_TIMEOUT_S, TIMEOUT_S


class Channel(Protocol):
    """A connected, bidirectional, message-oriented byte mover."""

    #: settings actually in effect (e.g. TCP_NODELAY read back with getsockopt),
    #: written into the result. Plain JSON types only.
    info: dict[str, Any]

    def send(self, buf: Any) -> None:
        """Send the whole buffer as one message. Blocks until the library has taken all
        of it (not until the peer has it). Raises PeerClosed, Timeout, TransportError."""

    def recv_into(self, buf: Any) -> None:
        """Receive exactly one message of len(buf) bytes into buf. Blocks until it is
        whole. Raises PeerClosed at end of stream (also mid-message), Timeout after the
        channel's timeout, ProtocolError when a message-framed library delivers a
        message of another length."""

    def alloc(self, nbytes: int) -> Any:
        """A writable buffer of nbytes this channel moves best (bytearray, or a numpy
        array a library registers once). Allocated once per plan, never per cycle."""

    def close(self) -> None:
        """Release everything. Idempotent; never raises."""


@dataclass(frozen=True)
class NativeEndpoint:
    """What a channel hands the core's compiled loops (hopbench.core.native) through its
    optional `native_endpoint()`: the transport's own send and recv in C (a capsule from its
    extension module, hopbench/core/hb_endpoint.h), and how their failures read as this
    transport's own errors. The core's C only loops, times and checks ids: every byte moves
    through the transport's functions, iperf3's `struct protocol`."""

    #: a PyCapsule named "hopbench.endpoint" holding the transport's hb_endpoint
    capsule: Any
    #: a call that makes no progress for this long ends with the status "timeout"
    timeout_s: float
    #: (status, detail, "send"/"receive", message bytes) -> the exception the channel itself
    #: would raise; status is a hopbench.core.native.Status name: "timeout", "closed" (detail:
    #: bytes received), "oserror" (detail: errno), "library" (detail: the library's status)
    #: or "length" (detail: the message's length)
    error: Callable[[str, int, str, int], BaseException]
    #: an int64 counter of completed calls the channel's watchdog reads, else None
    progress: Any = None
    #: hold(True) before the loop, hold(False) after (a call is in flight for the watchdog)
    hold: Callable[[bool], None] | None = None
    #: asked every ~1 ms while waiting: False = the peer is gone (ucx), else None
    alive: Callable[[], bool] | None = None


@runtime_checkable
class NativeCapable(Protocol):
    """The contract's optional compiled path: a channel whose transport has its send and
    recv in C (transports/_tcp.c, _ucx.c, _nixl.c) offers them to the core's compiled loops
    (hopbench.core.native.choose); None from native_endpoint() says why through
    native_unavailable()."""

    def native_endpoint(self) -> NativeEndpoint | None: ...

    def native_unavailable(self) -> str | None: ...


@runtime_checkable
class ControlChannel(Channel, Protocol):
    """What the core does with the control connection's channel beyond the contract (the
    transport registered with carries_control: tcp): read its path MTU and its peer's
    goodbye from the socket, wake a blocked call from another thread, and raise its timeout
    for one wait (hopbench.core.control)."""

    @property
    def socket(self) -> socket.socket: ...

    def shutdown(self) -> None: ...

    def set_timeout(self, timeout_s: float) -> float:
        """The timeout of the channel's blocking calls from now on; returns the one before."""
        ...


class Listener(Protocol):
    """A bound endpoint that accepts one Channel at a time."""

    #: (host, port) really bound (port 0 resolved to the real port)
    address: tuple[str, int]
    #: what the server tells the client about it in ACCEPT's transport_info (JSON types)
    info: dict[str, Any]

    def accept(self, timeout: float | None) -> Channel:
        """Wait for one peer; Timeout when none comes within `timeout` seconds."""

    def close(self) -> None: ...


class Transport(Protocol):
    name: str
    #: a plan's data channel is the control connection itself (tcp): no data listener,
    #: ACCEPT carries data_port null
    reuses_control: bool
    #: the transport moves device (CUDA) memory itself: --memory cuda,direct
    device_memory: bool
    #: messages keep their length (zmq, ucx); False for a byte stream (tcp)
    message_framed: bool
    #: a send the peer does not drain times out (False only for in-memory fakes)
    bounded_send: bool

    def listen(self, host: str, port: int, options: "TransportOptions") -> Listener: ...

    def connect(self, host: str, port: int, options: "TransportOptions") -> Channel: ...

    def version(self) -> str: ...

    def check_settings(self, settings: dict[str, Any]) -> None:
        """ConfigError for a key this transport does not know or a value it cannot take."""

    def check_device_path(self, settings: dict[str, Any]) -> None:
        """ConfigError when these settings cannot move device memory (direct GPU path)."""

    def check_here(self, settings: dict[str, Any]) -> None:
        """ConfigError when this host cannot use these settings at all (UCX: no device for
        UCX_TLS), named in one line with what it has; called before anything is created."""

    def devices(self) -> list[str] | None:
        """The transport/device resources it sees here (for doctor); None if not applicable."""

    def native_note(self, poll: str) -> str | None:
        """None when the compiled loop drives its channels in this poll mode, else why not."""


NO_COMPILED_LOOP = "this transport has no compiled loop"


class TransportBase:
    """Defaults for the optional parts of the contract: no settings, host memory only,
    no devices to report, a data channel of its own."""

    name = "?"
    reuses_control = False
    device_memory = False
    message_framed = True  # a receive of another length than the message is a ProtocolError
    bounded_send = True  # a send the peer does not drain times out
    known_settings: frozenset[str] = frozenset()

    def check_settings(self, settings: dict[str, Any]) -> None:
        unknown = sorted(set(settings) - self.known_settings)
        if unknown:
            known = ", ".join(sorted(self.known_settings)) or "none"
            raise ConfigError(f"unknown {self.name} setting(s) {unknown} (known: {known})")

    def check_device_path(self, settings: dict[str, Any]) -> None:
        if not self.device_memory:
            raise ConfigError(f"--memory cuda,direct needs a transport that moves GPU memory itself (ucx, nixl), not "
                              f"{self.name!r}; use --memory cuda (staged)")

    def check_here(self, settings: dict[str, Any]) -> None:
        return None

    def devices(self) -> list[str] | None:
        return None

    def native_note(self, poll: str) -> str | None:
        """None when the compiled loop (hopbench.core.native) can drive this transport's
        channels in this poll mode; otherwise why the Python loop runs."""
        return NO_COMPILED_LOOP


def most_specific(table: dict[type, Any], exc: BaseException, default: Any) -> Any:
    """What a transport's exception map says for `exc`: the entry of its most specific class
    (the first of exc's own class hierarchy the table names, as httpx maps its errors), not
    the first entry that matches in the table's order; `default` where none does."""
    for cls in type(exc).__mro__:
        if cls in table:
            return table[cls]
    return default


def native_error(who: str, failure: str, detail: int, what: str, nbytes: int, timeout_s: float,
                 library: Callable[[int], BaseException] | None = None,
                 closed: str = "peer closed the channel") -> BaseException:
    """A compiled loop's failure (NativeEndpoint's error callback: "timeout", "closed",
    "length", "library" with the library's status in `detail`) as the exception the
    transport's Python path raises for the same failure, `who` naming the transport;
    `library` maps a library status the transport knows to its own exception."""
    if failure == "timeout":
        return Timeout(f"{who} {what} timed out after {timeout_s} s")
    if failure == "closed":
        return PeerClosed(f"{who} {closed} during {what}")
    if failure == "length":
        return ProtocolError(f"{who} message of {detail} B where {nbytes} B were expected during {what}")
    if failure == "library" and library is not None:
        return library(detail)
    return TransportError(f"{who} {what} failed ({failure}, status {detail})")


class WrappedChannel:
    """A channel around another (a codec's frames, a GPU's staging): its buffers and its end
    are the inner channel's; a subclass says how its send and recv_into differ."""

    inner: Any

    def alloc(self, nbytes: int) -> Any:
        return self.inner.alloc(nbytes)

    def close(self) -> None:
        self.inner.close()


class Spinner:
    """The one busy-poll policy of every transport's Python waits (the compiled loops keep
    theirs: hopbench.core.native.YIELD_EVERY). Call `spun()` after each empty poll: every
    `yield_every` spins it yields the CPU when the peer may share it (`share_cpu`,
    TransportOptions: two spinners on one CPU otherwise wait out whole scheduler slices,
    8 ms per round trip, measured), and every `check_every` spins it returns True, the
    caller's turn to check its deadline and its peer. Both counts are powers of two."""

    __slots__ = ("spins", "_yield", "_check")

    def __init__(self, share_cpu: bool, check_every: int = 256, yield_every: int = 8) -> None:
        for n in (check_every, yield_every):
            if n < 1 or n & (n - 1):
                raise ValueError(f"Spinner counts are powers of two (got {n})")
        self.spins = 0
        self._yield = yield_every - 1 if share_cpu else -1
        self._check = check_every - 1

    def spun(self) -> bool:
        self.spins = s = self.spins + 1
        if self._yield >= 0 and s & self._yield == 0:
            os.sched_yield()
        return s & self._check == 0


#: the CPUs a host needs before `auto` busy-polls a drafter plan's messages (the client, the
#: server's session thread and its forward's launcher, on one host)
BUSY_DRAFTER_CPUS = 4


def plan_poll(poll: str, drafter: bool) -> str:
    """The poll mode a data channel takes for a plan, at either end. `auto` busy-polls where
    the other end's message comes a drafter's forward away (milliseconds) and this host has
    BUSY_DRAFTER_CPUS CPUs: a receiver that blocks sleeps through the forward and wakes late.
    With both ends busy-polling what the ledger leaves unexplained fell to 1.0-1.5% of a
    2.9 ms hop on an H100, against 2.5-3.4% with either end blocking (docs/DRAFTER.md "The
    leader hands on"). The server passes `drafter` only for a lone target's plan (no start
    group): a group's sessions share one interpreter, and their spinners would take turns at
    its lock. Elsewhere the transport's own default (`auto`)."""
    if poll != "auto" or not drafter or len(os.sched_getaffinity(0)) < BUSY_DRAFTER_CPUS:
        return poll
    return "busy"


@dataclass(frozen=True)
class TransportOptions:
    """What a transport needs to know: timeouts, poll mode and its own settings.

    `settings` holds transport-specific knobs from config or flags (e.g. UCX_TLS); each
    transport checks them (Transport.check_settings) and rejects unknown ones."""

    timeout_s: float = TIMEOUT_S
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    poll: str = "auto"  # "block", "busy", or "auto": the transport's measured-faster default
    settings: dict[str, Any] = field(default_factory=dict)
    #: the peer may run on one of this process's CPUs (hopbench.core.native.may_share_cpu):
    #: a busy-polling channel then yields the CPU now and then; False lets it spin as the
    #: native tools do (a transport may ignore it)
    share_cpu: bool = True


@dataclass(frozen=True)
class Option:
    """One --opt KEY=VALUE a transport takes (fio's engine options): its key (or, for a
    family routed by prefix, the prefix and an example key), its type and its help."""

    key: str
    type: str  # "int", "str", ... (what VALUE is)
    help: str
    example: str | None = None  # "UCX_TLS=tcp": shown in the help, used by the settings test


@dataclass(frozen=True)
class Registered:
    name: str
    target: str  # "module:attribute", imported on first use
    extra: str | None  # pip extra that provides the library
    library: str | None  # distribution name whose version we report
    # which --opt KEY=VALUE keys belong to it, known without importing the library (a test
    # checks them against the transport's own known_settings)
    settings_prefix: str | None = None
    settings: frozenset[str] = frozenset()
    broken: str | None = None  # why its entry point could not be read (a plugin's fault)
    #: the protocol's control connection runs over this transport (docs/PROTOCOL.md: TCP)
    carries_control: bool = False
    #: the exact install line when an extra cannot say it (nixl: its wheel declares torch,
    #: which NIXL's agent API does not need: installed with --no-deps)
    install: str | None = None
    #: what it is, in a few words (the --transport help)
    summary: str = ""
    #: the --opt keys it takes, described (the --opt help, the settings test)
    options: tuple[Option, ...] = ()
    #: distributions besides `library` whose versions each end reports (libucx-cu12 for ucx)
    libraries: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.options and not self.settings and not self.settings_prefix:  # the keys, said once
            object.__setattr__(self, "settings", frozenset(o.key for o in self.options))

    def install_line(self) -> str | None:
        return self.install or (install_line(self.extra) if self.extra else None)

    def owns(self, key: str) -> bool:
        return key in self.settings or bool(self.settings_prefix and key.startswith(self.settings_prefix))


ENTRY_POINT_GROUP = "hopbench.transports"


_REGISTRY: dict[str, Registered] = {}
_INSTALLED: set[str] = set()  # the names that came from entry points (not register()ed here)
_LOADED = False


def registry() -> dict[str, Registered]:
    """The registered transports, read once from the `hopbench.transports` entry points (each
    names a Registered and imports no transport library), plus any `register()`ed in this
    process (the tests' fake). The core names no transport: it knows them only from here."""
    global _LOADED
    if not _LOADED:
        _LOADED = True
        from importlib.metadata import entry_points
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                reg = ep.load()
                ok = isinstance(reg, Registered)
                why = "" if ok else "is not a hopbench.core.transport.Registered"
            except Exception as exc:  # a broken third-party plugin must not take the tool down
                ok, why = False, f"fails to load ({type(exc).__name__}: {exc})"
            if not ok:
                reg = Registered(ep.name, ep.value, None, None, broken=f"its entry point {ep.value} {why}")
            _REGISTRY.setdefault(reg.name, reg)
            _INSTALLED.add(reg.name)
    return _REGISTRY


def installed() -> list[Registered]:
    """The transports installed (entry points), without any register()ed in this process
    (the tests' fake): what help texts and reports describe."""
    return [r for r in registry().values() if r.name in _INSTALLED]


def transport_help() -> str:
    """--transport's help, from the registry: each transport and what it is."""
    return "; ".join(f"{r.name} ({r.summary})" if r.summary else r.name for r in installed() if not r.broken)


def options_help() -> str:
    """--opt's help, from the registry: which keys go to which transport, an example each."""
    each = []
    for r in installed():
        if r.options:
            keys = ", ".join(o.key for o in r.options)
            ex = next((o.example for o in r.options if o.example), None)
            each.append(f"{keys} to {r.name}" + (f", e.g. {ex}" if ex else ""))
    return ("Transport option KEY=VALUE, repeatable: each key goes to the transport that declares it ("
            + "; ".join(each) + "); an unknown key is refused.")


def libraries() -> tuple[str, ...]:
    """Every registered transport's library distributions (what env reports the versions of)."""
    out: list[str] = []
    for r in installed():
        out += [d for d in (r.library, *r.libraries) if d and d not in out]
    return tuple(out)


def register(reg: Registered) -> None:
    """Add a transport in this process only (tests: hopbench.testing.register_fake)."""
    registry()[reg.name] = reg


def owner_of_setting(key: str) -> str:
    """The transport a --opt key belongs to; ConfigError naming who owns what otherwise."""
    for reg in registry().values():
        if reg.owns(key):
            return reg.name
    owned = "; ".join(f"{r.name}: {r.settings_prefix + '*' if r.settings_prefix else ', '.join(sorted(r.settings))}"
                      for r in registry().values() if r.settings or r.settings_prefix)
    raise ConfigError(f"--opt {key}: no transport has this setting ({owned})")


def install_line(extra: str) -> str:
    return f"pip install 'hopbench[{extra}]'"


def get_transport(name: str) -> Transport:
    """Resolve a transport by name, importing its module only now."""
    try:
        reg = registry()[name]
    except KeyError:
        raise ConfigError(f"unknown transport {name!r} (known: {', '.join(registry())})") from None
    if reg.broken:
        raise TransportUnavailable(f"transport {name!r} is not available: {reg.broken}")
    module_name, attr = reg.target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f"; install it with: {reg.install_line()}" if reg.install_line() else ""
        raise TransportUnavailable(f"transport {name!r} is not available ({exc}){hint}") from None
    transport: Transport = getattr(module, attr)()
    return transport


def control_transport() -> Transport:
    """The transport the control connection runs over: the registered one that says it
    carries it (the protocol defines it as TCP; the core does not spell the name)."""
    for reg in registry().values():
        if reg.carries_control:
            return get_transport(reg.name)
    raise TransportUnavailable("no registered transport carries the control connection (is hopbench installed?)")


def describe_transports() -> list[dict[str, Any]]:
    """One row per registered transport: importable here?, library version, install line."""
    rows = []
    for reg in registry().values():
        row: dict[str, Any] = {"name": reg.name, "extra": reg.extra}
        try:
            t = get_transport(reg.name)
            row.update(available=True, version=t.version(), error=None, install=None)
        except TransportUnavailable as exc:
            row.update(available=False, version=None, error=str(exc), install=reg.install_line())
        rows.append(row)
    return rows


def split_options(opts: list[str] | None) -> dict[str, dict[str, str]]:
    """KEY=VALUE flags -> {transport: {KEY: VALUE}}; each key goes to the transport that
    declares it (the registry's Registered.owns: registry())."""
    out: dict[str, dict[str, str]] = {}
    for item in opts or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--opt {item!r}: expected KEY=VALUE")
        out.setdefault(owner_of_setting(key), {})[key] = value
    return out
