"""NIXL transport (NVIDIA's Inference Xfer Library, the `nixl-cu12` wheel and its bundled UCX).

The hop as disaggregated serving moves it: no message is sent. Each end registers the
buffers it receives into; a cycle is the target's one-sided WRITE of the request into
the drafter's registered buffer, with a notification carrying the sequence number, and
the drafter's WRITE of the K ids into the target's registered buffer, with its own.

Choices (measured: `make bench-native`, benchmarks/nixl_pingpong.py; docs/TRANSPORTS.md):
- **Credits.** A WRITE needs a buffer the peer registered and is not reading from.
  `recv_into(buf)` registers `buf` (once: regions are cached by address while the
  channel lives) and gives the peer a credit, a notification naming that buffer (with
  its registration, the partial agent metadata, the first time); `send(buf)` takes the
  oldest credit, WRITEs into it with a data notification and waits for the WRITE to
  complete. A credit is taken once, so a WRITE never overwrites a message not yet read,
  and messages keep their length: a send of another length than the credit's buffer
  is not written, the peer's receive raises ProtocolError (the notification says how
  long it was).
- **Setup over the plan's data port, no etcd.** The listener is a TCP socket on the
  data port like the other transports'; the client's connection carries a hello, both
  agents' metadata and a channel id each way, then stays open as the liveness signal
  NIXL lacks: its end (or the peer's goodbye notification) is PeerClosed at once, not
  after the timeout. Every transport keeps the contract's one shape (listen/connect on
  a port, hopbench.core.transport), so sweep, matrix, spec and the fan-in take nixl
  unchanged, and the session's data-channel proof runs over NIXL itself.
- **One agent per process and settings** (an agent's creation costs 0.2-0.5 s: its UCX
  context), shared by every channel of the process, notifications routed to each
  channel by (peer agent, channel id); a peer's metadata is loaded once and invalidated
  when its last channel closes.
- **Progress:** poll=busy (auto) spins on the agent (NIXL's calls progress UCX); poll=
  block sleeps NIXL_progress_delay_us (default 50) between checks, in select() on the
  liveness connection: NIXL 1.5 offers no descriptor to block on, and its own progress
  thread either spins a CPU (no delay) or, with a delay, made round trips slower still
  (measured: 4 KiB on loopback, busy 140 us, sleeping 50 us between checks 680 us;
  docs/TRANSPORTS.md).
- **Settings** (--opt, routed by the prefix NIXL_): NIXL_UCX_<VAR> is UCX_<VAR> for
  NIXL's own UCX (e.g. NIXL_UCX_TLS=tcp), set only while the agent is created;
  NIXL_<param> for the UCX backend's parameters (num_workers, ucx_devices,
  ucx_error_handling_mode); NIXL_progress_delay_us. Recorded, with NIXL's version, the
  libucp NIXL loaded and the lanes UCX selected for the agent (its INFO log).
- Errors: every NIXL exception class and status is mapped by type (exception_map,
  status_map; a test checks each one the bindings export).
"""

from __future__ import annotations

import os
import re
import select
import socket
import struct
import threading
import time
import uuid
from typing import Any

import nixl_cu12._bindings as nb  # the wheel's module name (torch is not needed); loads no UCX yet
import numpy as np

from hopbench.core.transport import TransportBase, TransportOptions
from hopbench.errors import (
    ConfigError,
    ConnectFailed,
    PeerClosed,
    ProtocolError,
    Timeout,
    TransportError,
    TransportUnavailable,
)
from hopbench.lanes import bypass, bypass_note

from ._endwithout import end_without_library_destructors
from ._ucxlog import LOG_PATH, LogTail  # before NIXL's UCX plugin loads libucs (at the first agent): UCX's log

# NIXL's bundled libnl-route and the system's crash in their destructors at exit (issue 42)
end_without_library_destructors()

HELLO = b"HOPBNIX1"
DISTRIBUTION = "nixl-cu12"
BACKEND = "UCX"
PREFIX = "NIXL_"
UCX_PREFIX = "NIXL_UCX_"
DELAY_KEY = "NIXL_progress_delay_us"
DEFAULT_DELAY_US = 50
MAX_METADATA = 1 << 20  # a peer's agent metadata: 0.5 KiB measured; more is refused
MAX_REGIONS = 64  # registered regions per channel before the oldest idle ones are released
SPIN_CHECK = 0x3F  # busy-poll: read the clock every 64 spins (and yield, when the peer may share the CPU)
CHECK_S = 0.001  # busy-poll: the deadline and the liveness connection at most this often
_SPINS = range(SPIN_CHECK + 1)

# notifications: kind, the receiving end's id (the client's is even, the server's the client's
# + 1: both ends of a channel may share one agent), then the kind's fields
_HEAD = struct.Struct("!cI")
_HEAD3 = struct.Struct("!cII")
# k numbers the receives (and so the sends) of each direction: message k fills receive k
_CREDIT = struct.Struct("!cIIIQQIB")  # C, end, k, region id, address, length, device, VRAM? [+ registration]
_DATA = struct.Struct("!cIII")  # D, end, k, region id: WRITE k is in that region [+ _NEXT]
_NEXT = struct.Struct("!II")  # a predicted credit riding on a data notification: k, region id
_EAGER = struct.Struct("!cII")  # E, end, k [+ the message]: a small send no receive was posted for
_MISMATCH = struct.Struct("!cIIQ")  # M, end, k, the message's length
_GOODBYE = struct.Struct("!cI")  # G, end
EAGER_MAX = 64 << 10  # a send this small with no credit after EAGER_WAIT_S travels in its notification
EAGER_WAIT_S = 0.01
_LANES = re.compile(r"\s(\S+) ((?:self|intra-node|inter-node) cfg#\d+ .*)$")


def exception_map() -> dict[type, type]:
    """Every NIXL exception class -> the hopbench error it means (by type; tests check that
    each class the bindings export is here)."""
    out: dict[type, type] = {
        nb.nixlRemoteDisconnectError: PeerClosed, nb.nixlCancelledError: PeerClosed,
        nb.nixlNotFoundError: TransportError, nb.nixlMismatchError: ProtocolError,
        nb.nixlInvalidParamError: TransportError, nb.nixlNotAllowedError: TransportError,
        nb.nixlNotPostedError: TransportError, nb.nixlNotSupportedError: TransportError,
        nb.nixlRepostActiveError: TransportError, nb.nixlBackendError: TransportError,
        nb.nixlUnknownError: TransportError, nb.nixlNoTelemetryError: TransportError,
    }
    return out


def status_map() -> dict[Any, type | None]:
    """Every nixl_status_t -> the hopbench error it means (None: not an error)."""
    s = nb.nixl_status_t
    return {s.NIXL_SUCCESS: None, s.NIXL_IN_PROG: None, s.NIXL_ERR_NOT_POSTED: TransportError,
            s.NIXL_ERR_INVALID_PARAM: TransportError, s.NIXL_ERR_BACKEND: PeerClosed,
            s.NIXL_ERR_NOT_FOUND: TransportError, s.NIXL_ERR_MISMATCH: ProtocolError,
            s.NIXL_ERR_NOT_ALLOWED: TransportError, s.NIXL_ERR_REPOST_ACTIVE: TransportError,
            s.NIXL_ERR_UNKNOWN: TransportError, s.NIXL_ERR_NOT_SUPPORTED: TransportError}


_EXC = exception_map()
_STATUS = status_map()
_DONE, _BUSY = nb.NIXL_SUCCESS, nb.NIXL_IN_PROG
_BUSY_VALUE, _DONE_VALUE = int(_BUSY.value), int(_DONE.value)  # (.value: cheaper than comparing the enums)


def _translate(exc: BaseException, what: str) -> Exception:
    target = next((t for c, t in _EXC.items() if isinstance(exc, c)), TransportError)
    if target is PeerClosed:
        return PeerClosed(f"NIXL peer closed or unreachable during {what} ({exc})")
    return target(f"NIXL error during {what}: {type(exc).__name__} {exc}")  # type: ignore[no-any-return]


def _status_error(status: Any, what: str) -> Exception:
    target = _STATUS.get(status) or TransportError
    name = getattr(status, "name", str(status))
    if target is PeerClosed:  # a transfer's backend error: UCX lost the endpoint (peer gone)
        return PeerClosed(f"NIXL transfer failed during {what} ({name}): the peer is gone or unreachable")
    return target(f"NIXL {what} failed ({name})")  # type: ignore[no-any-return]


def _split(settings: dict[str, Any]) -> tuple[dict[str, str], dict[str, str], int]:
    """--opt keys -> (UCX env for NIXL's UCX, backend parameters, progress delay in us)."""
    env: dict[str, str] = {}
    params: dict[str, str] = {}
    delay = DEFAULT_DELAY_US
    for key, value in settings.items():
        key = str(key)
        if key.startswith(UCX_PREFIX) and len(key) > len(UCX_PREFIX):
            env["UCX_" + key[len(UCX_PREFIX):]] = str(value)
        elif key == DELAY_KEY:
            try:
                delay = int(value)
            except ValueError:
                raise ConfigError(f"{DELAY_KEY}={value!r}: expected microseconds (an integer >= 0)") from None
            if delay < 0:
                raise ConfigError(f"{DELAY_KEY}={value!r}: expected microseconds (an integer >= 0)")
        elif key.startswith(PREFIX) and key[len(PREFIX):] in _backend_params():
            params[key[len(PREFIX):]] = str(value)
        else:
            known = ", ".join([f"{UCX_PREFIX}<UCX variable>", DELAY_KEY] + [PREFIX + p for p in sorted(_backend_params())])
            raise ConfigError(f"unknown nixl setting {key!r} (known: {known})")
    return env, params, delay


_params_cache: dict[str, str] | None = None


def _backend_params() -> dict[str, str]:
    """The UCX backend plugin's parameters and their defaults (from the plugin, no agent)."""
    global _params_cache
    if _params_cache is None:
        probe = nb.nixlAgent(f"hopbench-probe-{os.getpid()}", _config())
        _params_cache = dict(probe.getPluginParams(BACKEND)[0]) if BACKEND in probe.getAvailPlugins() else {}
        del probe
    return _params_cache


def _gpu_present() -> bool:
    return os.path.exists("/dev/nvidia0") or os.path.exists("/proc/driver/nvidia/gpus")


def _ucx_defaults(env: dict[str, str]) -> dict[str, str]:
    """NIXL's UCX as hopbench runs it. UCX_MEMTYPE_CACHE=n (as ucxx sets for its UCX): with
    the cache, NIXL's UCX took CuPy's device memory for host memory and refused its VRAM
    registration (H200 host, NIXL 1.5.1). On a host with an NVIDIA GPU, NIXL refuses a
    UCX_TLS without a CUDA transport ("Add cuda_copy for basic GPU support"): cuda_copy is
    added to a UCX_TLS that names none (it moves only GPU memory; host memory keeps the
    lanes asked for). Both recorded in the channel's info (ucx_env)."""
    out = dict(env)
    out.setdefault("UCX_MEMTYPE_CACHE", "n")
    tls = out.get("UCX_TLS")
    if tls and not tls.startswith("^") and "cuda" not in tls and _gpu_present():
        out["UCX_TLS"] = tls + ",cuda_copy"
    return out


def _config() -> Any:
    cfg = nb.nixlAgentConfig()
    cfg.useProgThread = False  # our waits progress the agent (see Progress above)
    cfg.useListenThread = False  # metadata travels over hopbench's own connection
    cfg.syncMode = nb.NIXL_THREAD_SYNC_STRICT  # channels of several sessions share the agent
    cfg.pthrDelay = 0
    cfg.lthrDelay = 100000
    cfg.captureTelemetry = False
    return cfg


def _loaded_libucp() -> str | None:
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                if "libucp" in line and "nixl" in line:
                    return line.split()[-1]
    except OSError:
        pass
    return None


class _Agent:
    """One NIXL agent (its UCX backend) shared by the process's channels with these settings;
    the notifications it receives are routed to each channel's inbox."""

    _lock = threading.Lock()  # creation: UCX_* variables are process-wide while UCX reads them
    _agents: dict[tuple[Any, ...], "_Agent"] = {}

    def __init__(self, env: dict[str, str], params: dict[str, str], busy: bool, delay_us: int) -> None:
        self.name = f"hopbench-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        saved = {k: os.environ.get(k) for k in env}
        try:
            os.environ.update(env)
            try:
                self.raw = nb.nixlAgent(self.name, _config())
                if BACKEND not in self.raw.getAvailPlugins():
                    raise TransportUnavailable(f"NIXL has no {BACKEND} backend plugin here")
                self.backend = self.raw.createBackend(BACKEND, params)
            except nb.nixlBackendError as exc:
                raise ConfigError(f"NIXL's UCX backend cannot start with {env} {params or ''}({exc}; NIXL's own "
                                  "log lines above say why); e.g. --opt NIXL_UCX_TLS=tcp") from None
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.settings = {"ucx_env": env, "backend_params": {**_backend_params(), **params}}
        self.busy = busy
        self.delay_s = delay_us / 1e6
        self.inbox_lock = threading.Lock()
        self.inboxes: dict[tuple[str, int], "_Inbox"] = {}
        self.peers: dict[str, int] = {}  # loaded peer metadata -> channels using it
        self.lanes: list[str] = []
        self._log = LogTail()

    @classmethod
    def get(cls, options: TransportOptions) -> "_Agent":
        env, params, delay = _split(options.settings)
        env = _ucx_defaults(env)
        busy = options.poll != "block"
        key = (tuple(sorted(env.items())), tuple(sorted(params.items())), busy, delay if not busy else 0)
        with cls._lock:
            agent = cls._agents.get(key)
            if agent is None:
                agent = cls._agents[key] = _Agent(env, params, busy, delay)
            return agent

    def poll(self) -> None:
        """Fetch new notifications (progressing the agent) and file each in its channel's inbox."""
        got = self.raw.getNotifs({}, [])
        if got:
            self.route(got)

    def route(self, got: dict[str, list[bytes]]) -> None:
        """File each notification in its channel's inbox; one for no live channel (a closed
        one's late goodbye) is dropped. No lock: the sessions' threads may poll the shared
        agent at once (NIXL's STRICT sync serializes the calls), and what they file needs no
        order: inbox entries are keyed by k, each filed by one atomic dict operation
        (_Inbox.put), a hard credit replacing a predicted one whichever comes first. (A lock
        here cost ~0.3 us per poll, on the round trip's critical path: ~12 polls a side.)"""
        inboxes = self.inboxes
        for peer, msgs in got.items():
            for msg in msgs:
                if len(msg) >= _HEAD.size:
                    box = inboxes.get((peer, _HEAD.unpack_from(msg)[1]))
                    if box is not None:
                        box.put(msg)

    def add_peer(self, metadata: bytes) -> str:
        with self.inbox_lock:
            if _md_name(metadata) == self.name:  # both ends in this process: a loopback transfer
                return self.name
            try:
                name = self.raw.loadRemoteMD(metadata)
            except Exception as exc:
                raise _translate(exc, "the metadata exchange") from None
            name = name.decode() if isinstance(name, bytes) else str(name)
            self.peers[name] = self.peers.get(name, 0) + 1
            return name

    def drop_peer(self, name: str) -> None:
        if name == self.name:
            return
        with self.inbox_lock:
            left = self.peers.get(name, 0) - 1
            if left > 0:
                self.peers[name] = left
                return
            self.peers.pop(name, None)
            try:
                self.raw.invalidateRemoteMD(name)
            except Exception:
                pass

    def selected(self) -> list[str]:
        """The lanes UCX configured for this agent's endpoints so far (its INFO log)."""
        with self.inbox_lock:
            for line in self._log.new_lines():
                m = _LANES.search(line)
                if m and m.group(1) == self.name and m.group(2) not in self.lanes:
                    self.lanes.append(m.group(2))
        return list(self.lanes) if LOG_PATH else ["unknown (UCX_LOG_* set by the user)"]


_INHERITED: list[Any] = []


def _forget_agents() -> None:
    """A forked child must not use its parent's agents (same name, a copy of the parent's
    UCX state): it creates its own. Nor may it destroy them: their destructors would act on
    the parent's UCX endpoints (a segfault, and UCX's "unable to modify event set", in a
    child that subprocess forked to run a preexec_fn), so they stay referenced, unused."""
    _INHERITED.append(_Agent._agents)
    _Agent._agents = {}
    _Agent._lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_agents)


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


class _Region:
    """A registered buffer: its registration, its local descriptor list, the object kept alive."""

    __slots__ = ("id", "obj", "addr", "nbytes", "dev", "vram", "reg", "local", "announced", "used")

    def __init__(self, rid: int, obj: Any, addr: int, nbytes: int, dev: int, vram: bool) -> None:
        self.id, self.obj, self.addr, self.nbytes, self.dev, self.vram = rid, obj, addr, nbytes, dev, vram
        self.reg: Any = None
        self.local: Any = None
        self.announced = False
        self.used = 0


def _copy(dst: Any, src: Any) -> None:
    """dst[:] = src, bytewise, host or GPU memory on either side."""
    if hasattr(dst, "__cuda_array_interface__") or hasattr(src, "__cuda_array_interface__"):
        import cupy

        d = cupy.asarray(dst).view(cupy.uint8).reshape(-1)
        d[:] = cupy.asarray(src if hasattr(src, "__cuda_array_interface__") else np.frombuffer(src, dtype=np.uint8)
                            ).view(cupy.uint8).reshape(-1)
        return
    memoryview(dst).cast("B")[:] = memoryview(src).cast("B")


def _address(buf: Any) -> tuple[int, int, int, bool, Any]:
    """(address, bytes, device, VRAM?, the object that keeps the memory alive) of a buffer."""
    cai = getattr(buf, "__cuda_array_interface__", None)
    if cai is not None:  # GPU memory (--gpu-path direct): registered as VRAM
        import cupy

        arr = cupy.asarray(buf)
        return int(cai["data"][0]), int(arr.nbytes), int(arr.device.id), True, buf
    arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    return int(arr.ctypes.data), int(arr.nbytes), 0, False, arr


class NixlChannel:
    def __init__(self, agent: _Agent, peer: str, my_id: int, sock: socket.socket, options: TransportOptions,
                 endpoint: str) -> None:
        self._a = agent
        self._raw = agent.raw
        self._peer = peer
        self._me = my_id
        self._chan = my_id ^ 1  # the peer end's id: every notification is addressed to it
        self._sock = sock
        self._timeout = options.timeout_s
        self._share = options.share_cpu  # the peer may run on our CPU: busy waits yield now and then
        self._box = _Inbox()
        self._closed = False
        self._regions: dict[tuple[int, int, bool], _Region] = {}
        self._by_obj: dict[int, tuple[Any, _Region]] = {}
        self._remote: dict[int, Any] = {}  # the peer's region id -> prepped remote descriptor list
        self._remote_len: dict[int, int] = {}
        self._pending: dict[int, bytes] = {}  # the peer's credits by k, not yet used (hard "C" or predicted "S")
        self._xfers: dict[tuple[int, int], Any] = {}
        self._ids = 0
        self._clock = 0
        self._sent = 0  # messages sent (k of the next)
        self._received = 0  # receives posted (k of the next)
        self._credited = 0  # receives the peer holds a credit for (hard or predicted)
        self._predicted: dict[int, int] = {}  # k -> the region a predicted credit named
        self._last_rx = (0, -1)  # the regions of the last two receives
        self.eager_sends = 0
        self.credits_sent = 0  # credits sent on their own (the rest rode on data notifications)
        agent.inboxes[(peer, my_id)] = self._box
        self._info = {"transport": "nixl", "endpoint": endpoint, "nixl": _version(), "backend": BACKEND,
                      "agent": agent.name, "peer_agent": peer, "write": "one-sided WRITE + notification",
                      "poll": "busy" if agent.busy else "block", "timeout_s": options.timeout_s,
                      "share_cpu": options.share_cpu,
                      "libucp": _loaded_libucp(), **agent.settings}
        if not agent.busy:
            self._info["progress_delay_us"] = int(agent.delay_s * 1e6)

    @property
    def info(self) -> dict[str, Any]:
        """The settings in effect and the lanes UCX selected (read afresh: UCX logs them as it
        connects, on the first transfer)."""
        selected = self._a.selected()
        out = {**self._info, "selected": selected, "eager_sends": self.eager_sends,
               "credits_sent": self.credits_sent, "receives": self._received}
        found = bypass(selected)
        if found:
            out["bypass"] = found
            out["warnings"] = [bypass_note(found, "NIXL_UCX_TLS")]
        return out

    def alloc(self, nbytes: int) -> np.ndarray:
        return np.zeros(nbytes, dtype=np.uint8)

    # -- registration --------------------------------------------------------------------
    def _region(self, buf: Any) -> _Region:
        hit = self._by_obj.get(id(buf))
        if hit is not None and hit[0] is buf:
            r = hit[1]
        else:
            addr, nbytes, dev, vram, keep = _address(buf)
            r = self._regions.get((addr, nbytes, vram))  # type: ignore[assignment]
            if r is None:
                r = self._register(addr, nbytes, dev, vram, keep)
            if len(self._by_obj) > 32:
                self._by_obj.clear()
            self._by_obj[id(buf)] = (buf, r)
        self._clock += 1
        r.used = self._clock
        return r

    def _register(self, addr: int, nbytes: int, dev: int, vram: bool, keep: Any) -> _Region:
        if len(self._regions) >= MAX_REGIONS:
            self._release_oldest()
        self._ids += 1
        r = _Region(self._ids, keep, addr, nbytes, dev, vram)
        seg = nb.VRAM_SEG if vram else nb.DRAM_SEG
        try:
            r.reg = nb.nixlRegDList(seg, [(addr, max(nbytes, 1), dev, "")])
            self._raw.registerMem(r.reg, [])
            r.local = self._raw.prepXferDlist(nb.NIXL_INIT_AGENT, nb.nixlXferDList(seg, [(addr, max(nbytes, 1), dev)]),
                                              [])
        except Exception as exc:
            raise _translate(exc, "memory registration") from None
        self._regions[(addr, nbytes, vram)] = r
        return r

    def _release_oldest(self) -> None:
        """Release the least recently used half of the regions (none is in flight: every
        call completes before it returns); the peer never sees their ids again."""
        old = sorted(self._regions.items(), key=lambda kv: kv[1].used)[: len(self._regions) // 2]
        for key, r in old:
            for xk in [k for k in self._xfers if k[0] == r.id]:
                self._release_xfer(self._xfers.pop(xk))
            self._deregister(r)
            del self._regions[key]
        self._by_obj.clear()

    def _deregister(self, r: _Region) -> None:
        try:
            self._raw.releasedDlistH(r.local)
            self._raw.deregisterMem(r.reg, [])
        except Exception:
            pass

    def _release_xfer(self, handle: Any) -> None:
        try:
            self._raw.releaseXferReq(handle)
        except Exception:
            pass

    # -- the two calls ---------------------------------------------------------------------
    def send(self, buf: Any) -> None:
        """WRITE buf into the buffer of the peer's receive this message fills (its credit k),
        with a data notification; returns when the WRITE is complete. A hard credit for
        another length gets a mismatch notification instead (the peer's receive raises
        ProtocolError). A small message no receive was posted for within EAGER_WAIT_S
        travels in a notification (the contract's send does not wait for the peer's
        receive; counted in info's eager_sends).

        The data notification predicts our own next receive (a credit riding on it) when
        our last two receives used one buffer, as a loop's do: the peer then needs no
        separate credit message, and may WRITE into that buffer as soon as we have sent.
        A wrong prediction is corrected by a hard credit (recv_into)."""
        if self._closed:
            raise PeerClosed("send on a closed NIXL channel")
        src = self._region(buf)
        k = self._sent
        self._sent = k + 1
        credits = self._box.credits
        c = credits.pop(k, None)
        if credits:  # credits of receives filled eagerly: their regions may be the ones named now
            self._drop_stale(k)
        if c is None or not (c[0] or self._remote_len.get(c[1]) == src.nbytes):
            c = self._credit(k, src.nbytes, c, eager=not src.vram)
            if c is None:  # eager: the message in the notification
                self.eager_sends += 1
                self._notify(_EAGER.pack(b"E", self._chan, k) + bytes(memoryview(src.obj).cast("B")), "send")
                return
        hard, rid, length, raw_credit = c
        if hard:
            if length != src.nbytes:
                self._notify(_MISMATCH.pack(b"M", self._chan, k, src.nbytes), "send")
                return
            remote = self._remote.get(rid)
            if remote is None:
                remote = self._learn(raw_credit)  # type: ignore[arg-type]
        else:
            remote = self._remote[rid]
        notif = _DATA.pack(b"D", self._chan, k, rid)
        a, b = self._last_rx
        if a == b and self._credited == self._received:  # steady: our next receive uses that buffer again
            notif += _NEXT.pack(self._received, a)
            self._predicted[self._received] = a
            self._credited += 1
        handle = self._xfers.get((src.id, rid))
        raw = self._raw
        try:
            if handle is None:
                handle = self._xfers[(src.id, rid)] = raw.makeXferReq(nb.NIXL_WRITE, src.local, [0], remote, [0], b"",
                                                                      [], False)
            status = raw.postXferReq(handle, notif)
            if status.value == _BUSY_VALUE:
                status = self._complete(handle)
        except (TransportError, PeerClosed, Timeout):
            raise
        except Exception as exc:
            raise _translate(exc, "send") from None
        if status.value != _DONE_VALUE:
            raise _status_error(status, "send")

    def _credit(self, k: int, nbytes: int, c: Credit | None, eager: bool = True) -> Credit | None:
        """The slow way to credit k: learn the regions of credits for receives already filled
        (eagerly), wait for k's; a predicted one for another length waits for the peer's
        hard credit (or the message goes eager when small). None: send eagerly."""
        credits = self._box.credits
        eager = eager and nbytes <= EAGER_MAX  # (GPU memory never: the notification carries host bytes)
        eager_at = time.monotonic() + EAGER_WAIT_S if eager else None
        while True:
            self._drop_stale(k)
            c = credits.pop(k, None) or c
            if c is not None:
                if c[0]:
                    return c
                if c[1] in self._remote and self._remote_len[c[1]] == nbytes:
                    return c
                if eager:  # predicted for another length: the message says its own
                    return None
                c = None  # predicted for another length: the peer's hard credit for k will come
            if not self._wait(credits, k, "send (waiting for the peer's receive)", until=eager_at):
                return None

    def _drop_stale(self, k: int) -> None:
        """Drop the credits of receives before k (filled eagerly), learning their regions."""
        credits = self._box.credits
        for old in [ck for ck in credits if ck < k]:
            stale = credits.pop(old)
            if stale[0]:
                self._learn(stale[3])  # type: ignore[arg-type]

    def _learn(self, credit: bytes) -> Any:
        """The peer's region a credit names, prepared as a WRITE target (its registration
        comes with the first credit that names it)."""
        _, _, _, rid, addr, length, dev, vram = _CREDIT.unpack_from(credit)
        if rid in self._remote:
            return self._remote[rid]
        blob = credit[_CREDIT.size:]
        try:
            if blob and self._peer != self._a.name:  # the region's registration, the first time the peer offers it
                self._raw.loadRemoteMD(blob)
            seg = nb.VRAM_SEG if bool(vram) else nb.DRAM_SEG
            remote = self._raw.prepXferDlist(self._peer, nb.nixlXferDList(seg, [(addr, max(length, 1), dev)]), [])
        except Exception as exc:
            raise _translate(exc, "send (the peer's buffer)") from None
        if len(self._remote) >= 2 * MAX_REGIONS:  # the peer released its old regions (it never offers them again)
            for old in list(self._remote)[:MAX_REGIONS]:
                for xk in [x for x in self._xfers if x[1] == old]:
                    self._release_xfer(self._xfers.pop(xk))
                try:
                    self._remote_len.pop(old, None)
                    self._raw.releasedDlistH(self._remote.pop(old))
                except Exception:
                    pass
        self._remote[rid] = remote
        self._remote_len[rid] = length
        return remote

    def _complete(self, handle: Any) -> Any:
        status_of = self._raw.getXferStatus
        deadline = time.monotonic() + self._timeout
        next_check = 0.0
        while True:
            for _ in _SPINS:
                status = status_of(handle)
                if status.value != _BUSY_VALUE:  # (.value: half the cost of comparing pybind11 enums)
                    return status
            self._a.poll()  # the peer's notifications keep flowing while a WRITE is in flight
            _, next_check = self._between_spins(deadline, "send", next_check)

    def _between_spins(self, deadline: float, what: str, next_check: float) -> tuple[float, float]:
        """After each SPIN_CHECK + 1 busy polls: the deadline and the liveness connection at
        most every CHECK_S, a yield when the peer may share this CPU (see transports/tcp.py).
        Returns (now, the next check's time)."""
        now = time.monotonic()
        if now > next_check:
            self._check(deadline, what)
            next_check = now + CHECK_S
        if self._share:
            os.sched_yield()
        return now, next_check

    def recv_into(self, buf: Any) -> None:
        """Offer buf to the peer (credit k) unless a predicted credit already did, wait for
        message k: its WRITE's notification (or the message itself, eager). A message
        WRITTEN into the predicted buffer when buf is another is copied over."""
        if self._closed:
            raise PeerClosed("receive on a closed NIXL channel")
        dst = self._region(buf)
        k = self._received
        self._received = k + 1
        self._last_rx = (self._last_rx[1], dst.id)
        predicted = self._predicted.pop(k, None)
        if predicted != dst.id:
            if predicted is None:
                self._credited += 1
            credit = _CREDIT.pack(b"C", self._chan, k, dst.id, dst.addr, dst.nbytes, dst.dev, int(dst.vram))
            if not dst.announced:
                try:
                    credit += self._raw.getLocalPartialMD(dst.reg, False, [])
                except Exception as exc:
                    raise _translate(exc, "receive (offering the buffer)") from None
                dst.announced = True
            self._notify(credit, "receive")
            self.credits_sent += 1
        events = self._box.events
        event = events.pop(k, None)
        if event is None:
            self._wait(events, k, "receive")
            event = events.pop(k)
        kind, value, body = event
        if kind == b"D":
            if value == dst.id:
                return
            into = next((r for r in self._regions.values() if r.id == value), None)  # written where we predicted
            if into is None or into.nbytes != dst.nbytes:
                raise ProtocolError(f"NIXL message of {into.nbytes if into else '?'} B where {dst.nbytes} B were "
                                    "expected")
            _copy(dst.obj, into.obj)
        elif kind == b"M":
            raise ProtocolError(f"NIXL message of {value} B where {dst.nbytes} B were expected")
        else:  # eager
            if len(body) != dst.nbytes:
                raise ProtocolError(f"NIXL message of {len(body)} B where {dst.nbytes} B were expected")
            _copy(dst.obj, body)

    def _notify(self, msg: bytes, what: str) -> None:
        try:
            self._raw.genNotif(self._peer, msg)
        except Exception as exc:
            raise _translate(exc, what) from None

    def _wait(self, entries: dict[int, Any], k: int, what: str, until: float | None = None) -> bool:
        """Poll the agent until entries (of the inbox) holds k: busy, or sleeping between
        checks (block). False when `until` (monotonic) passed first; Timeout after the
        channel's timeout, PeerClosed when the peer is gone."""
        agent = self._a
        box = self._box
        deadline = time.monotonic() + self._timeout
        if agent.busy:  # the hot loop: each pass costs the round trip once per protocol step
            get, route = agent.raw.getNotifs, agent.route
            next_check = 0.0
            while k not in entries:
                for _ in _SPINS:
                    got = get({}, [])
                    if got:
                        route(got)
                        if k in entries:
                            return True
                if box.goodbye:
                    raise PeerClosed(f"NIXL peer closed the channel during {what}")
                now, next_check = self._between_spins(deadline, what, next_check)
                if until is not None and now > until:
                    return False
            return True
        while k not in entries:
            if box.goodbye:
                raise PeerClosed(f"NIXL peer closed the channel during {what}")
            agent.poll()
            if k in entries:
                break
            self._check(deadline, what, agent.delay_s)
            if until is not None and time.monotonic() > until:
                return False
        return True

    def _check(self, deadline: float, what: str, sleep_s: float = 0.0) -> None:
        """The timeout, and the liveness connection: its end is the peer's."""
        if time.monotonic() > deadline:
            raise Timeout(f"NIXL {what} timed out after {self._timeout} s")
        try:
            ready = select.select([self._sock], [], [], sleep_s)[0]
            if ready and not self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                self._box.goodbye = True
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._box.goodbye = True
        if self._box.goodbye:
            raise PeerClosed(f"NIXL peer closed the channel during {what}")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._raw.genNotif(self._peer, _GOODBYE.pack(b"G", self._chan))
            self._a.poll()  # hand the goodbye to UCX
        except Exception:
            pass
        for handle in self._xfers.values():
            self._release_xfer(handle)
        self._xfers.clear()
        for remote in self._remote.values():
            try:
                self._raw.releasedDlistH(remote)
            except Exception:
                pass
        self._remote.clear()
        for r in self._regions.values():
            self._deregister(r)
        self._regions.clear()
        self._by_obj.clear()
        with self._a.inbox_lock:
            self._a.inboxes.pop((self._peer, self._me), None)
        self._a.drop_peer(self._peer)
        try:
            self._sock.close()
        except OSError:
            pass


def _md_name(metadata: bytes) -> str | None:
    """The agent name at the head of NIXL's serialized metadata ("nixlSerDes|Agent" + u64 length + name)."""
    head = b"nixlSerDes|Agent"
    if not metadata.startswith(head) or len(metadata) < len(head) + 8:
        return None
    n = int.from_bytes(metadata[len(head):len(head) + 8], "little")
    return metadata[len(head) + 8:len(head) + 8 + n].decode(errors="replace")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


def _send_block(sock: socket.socket, *parts: bytes) -> None:
    body = b"".join(parts)
    sock.sendall(struct.pack("!I", len(body)) + body)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        got = sock.recv(n - len(out))
        if not got:
            raise PeerClosed("the NIXL peer closed its setup connection")
        out += got
    return bytes(out)


def _recv_block(sock: socket.socket) -> bytes:
    n = struct.unpack("!I", _recv_exact(sock, 4))[0]
    if n > MAX_METADATA:
        raise ProtocolError(f"NIXL setup block of {n} B (at most {MAX_METADATA})")
    return _recv_exact(sock, n)


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


class NixlListener:
    """The plan's data port: a TCP listener (transports/tcp.py's) whose connections carry
    the setup and then stand as the liveness signal."""

    def __init__(self, host: str, port: int, options: TransportOptions) -> None:
        from .tcp import TcpListener

        self._options = options
        self._agent = _Agent.get(options)
        self._tcp = TcpListener(host, port, options)
        self.address = self._tcp.address
        self.info = {"transport": "nixl", "endpoint": "%s:%d" % self.address, "nixl": _version()}

    def accept(self, timeout: float | None) -> NixlChannel:
        conn = self._tcp.accept_socket(timeout)
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            name, chan_id = _handshake(conn, self._agent, None, self._options.connect_timeout_s)
        except OSError as exc:
            conn.close()
            raise PeerClosed(f"nixl peer went away during setup ({exc})") from None
        except BaseException:
            conn.close()
            raise
        return NixlChannel(self._agent, name, chan_id | 1, conn, self._options, self.info["endpoint"])

    def close(self) -> None:
        self._tcp.close()


class NixlTransport(TransportBase):
    name = "nixl"
    device_memory = True  # VRAM registered as such: --gpu-path direct

    def check_settings(self, settings: dict[str, Any]) -> None:
        _split(settings)

    def version(self) -> str:
        return f"nixl {_version()} ({BACKEND} backend, its bundled UCX)"

    def devices(self) -> list[str] | None:
        return [f"NIXL backend plugins: {', '.join(sorted(_plugins()))}"]

    def native_note(self, poll: str) -> str | None:
        return "the nixl transport's calls are NIXL's Python bindings (no compiled loop)"

    def listen(self, host: str, port: int, options: TransportOptions) -> NixlListener:
        _split(options.settings)
        return NixlListener(host, port, options)

    def connect(self, host: str, port: int, options: TransportOptions) -> NixlChannel:
        agent = _Agent.get(options)
        try:
            sock = socket.create_connection((host, port), timeout=options.connect_timeout_s)
        except OSError as exc:
            raise ConnectFailed(f"cannot reach {host}:{port} over nixl: {exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        chan_id = int.from_bytes(os.urandom(4), "big") & ~1  # the client's end is even, the server's odd
        try:
            name, _ = _handshake(sock, agent, chan_id, options.connect_timeout_s)
        except BaseException:
            sock.close()
            raise
        return NixlChannel(agent, name, chan_id, sock, options, f"{host}:{port}")


def _plugins() -> list[str]:
    probe = nb.nixlAgent(f"hopbench-probe-{os.getpid()}", _config())
    return list(probe.getAvailPlugins())

