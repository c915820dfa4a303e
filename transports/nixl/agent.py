"""NIXL's agent as hopbench runs it: one per process and settings (its creation costs
0.2-0.5 s: its UCX context), shared by every channel of the process, the notifications it
receives routed to each channel's inbox; the settings (--opt NIXL_*), the error maps, and
what the wheel offers (its version, its backend plugins). Package overview: __init__.py."""

from __future__ import annotations

import os
import re
import threading
import uuid
from typing import Any

import nixl_cu12._bindings as nb  # the wheel's module name (torch is not needed); loads no UCX yet

from hopbench.core.transport import TransportOptions, most_specific
from hopbench.errors import (
    ConfigError,
    PeerClosed,
    ProtocolError,
    TransportError,
    TransportUnavailable,
)

from .._endwithout import end_without_library_destructors
from .._ucxlog import LOG_PATH, LogTail  # before NIXL's UCX plugin loads libucs (at the first agent): UCX's log
from .wire import _HEAD, _Inbox, _md_name

# NIXL's bundled libnl-route and the system's crash in their destructors at exit (issue 42)
end_without_library_destructors()

DISTRIBUTION = "nixl-cu12"
BACKEND = "UCX"
PREFIX = "NIXL_"
UCX_PREFIX = "NIXL_UCX_"
DELAY_KEY = "NIXL_progress_delay_us"
DEFAULT_DELAY_US = 50
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
    target = most_specific(_EXC, exc, TransportError)
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


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


def _plugins() -> list[str]:
    probe = nb.nixlAgent(f"hopbench-probe-{os.getpid()}", _config())
    return list(probe.getAvailPlugins())
