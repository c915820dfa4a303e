"""UCX transport over ucxx's synchronous core API (ucxx._lib.libucxx).

Why these choices (measured: benchmarks/ucx_progress.py, docs/TRANSPORTS.md):
- Core API, not ucxx's asyncio API: the asyncio event loop adds tens of microseconds per
  message; the core API with explicit progress is what ucx_perftest does.
- Progress: poll="busy" spins worker.progress() (no wake-up: the fast path on a VM where
  a cross-CPU wake-up costs ~100 us); poll="block" arms the worker and sleeps in poll()
  on its epoll fd with the remaining timeout (UCX's documented blocking pattern), so no
  CPU burns while waiting and every wait is bounded.
- Tag API, one tag per direction (client->server 1, server->client 2). A receive of a
  message larger than the buffer fails with "truncated" (-> ProtocolError). The tag API
  does not report a shorter message's length: the protocol's per-cycle id check catches
  a short reply instead.
- send() waits for the send to complete (see UcxChannel.send for why).
- UCX options come from TransportOptions.settings ("UCX_TLS": "tcp", ...), are handed to
  the UCX context when it is created (before UCX initialises) and are recorded, with the
  transport/device UCX selected for the endpoint (parsed from UCX's own log) and the
  path of the libucp actually loaded. The wheel's libucx is loaded first, never an older
  system UCX (RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY is forced off).
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import threading
import time
from typing import Any

os.environ["RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY"] = "false"  # the wheel's UCX, always
import libucx  # noqa: E402

from ._loaded import loaded_library  # noqa: E402
from ._ucxlog import LOG_PATH as _LOG_PATH  # noqa: E402  (before libucs loads: UCX's log, see there)
from ._ucxlog import LogTail  # noqa: E402

libucx.load_library()

import numpy as np  # noqa: E402
import ucxx._lib.libucxx as ucx_api  # noqa: E402
from ucxx._lib.arr import Array  # noqa: E402

from hopbench.core.transport import (  # noqa: E402
    NativeEndpoint,
    Spinner,
    TransportBase,
    TransportOptions,
    most_specific,
    native_error,
)
from hopbench.errors import (  # noqa: E402
    ConfigError,
    ConnectFailed,
    PeerClosed,
    ProtocolError,
    Timeout,
    TransportError,
)
from hopbench.lanes import bypass, bypass_note  # noqa: E402

HELLO = b"HOPBUCX1"
TAG_TO_SERVER = ucx_api.UCXXTag(1)
TAG_TO_CLIENT = ucx_api.UCXXTag(2)
RECORDED_CONFIG = ("TLS", "NET_DEVICES", "RNDV_THRESH", "RNDV_SCHEME", "ZCOPY_THRESH", "MEMTYPE_CACHE",
                   "TCP_CM_REUSEADDR", "MAX_RNDV_RAILS", "RNDV_FRAG_MEM_TYPE")
_SELECTED = re.compile(r"(intra|inter)-node cfg#\d+ (tag\([^)]*\))")

_ctx_lock = threading.Lock()
_ctx: "ucx_api.UCXContext | None" = None
_ctx_settings: dict[str, str] | None = None


def _config_dict(settings: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key, value in settings.items():
        if not str(key).startswith("UCX_"):
            raise ConfigError(f"ucx setting {key!r} must be a UCX_* variable (e.g. UCX_TLS)")
        out[key[4:]] = str(value)
    # Reuse the listening address at once after a restart (ucxx's listener does not, so a
    # quick server restart on the same port would fail; MEASURED.md).
    out.setdefault("TCP_CM_REUSEADDR", "y")
    # ucxx's import sets UCX_RNDV_FRAG_MEM_TYPE=cuda when unset; for host buffers that
    # rendezvous path measured 2x slower at 1 MiB (3,045 vs 1,470 us symmetric on loopback),
    # so host staging is the default here; GPU payloads can ask for cuda explicitly.
    out.setdefault("RNDV_FRAG_MEM_TYPE", "host")
    return out


def _context(settings: dict[str, Any]) -> "ucx_api.UCXContext":
    """The process's UCX context, created on first use with these settings."""
    global _ctx, _ctx_settings
    wanted = _config_dict(settings)
    with _ctx_lock:
        if _ctx is None:
            try:
                _ctx = ucx_api.UCXContext(wanted, feature_flags=(ucx_api.Feature.TAG, ucx_api.Feature.WAKEUP))
            except Exception as exc:  # ucxx raises UCXXNoDeviceError etc., outside its UCXError tree
                tls = settings.get("UCX_TLS", "(default)")
                raise ConfigError(f"UCX cannot start with UCX_TLS={tls} on this host ({exc}); the lanes it has here: "
                                  f"{', '.join(_lanes()) or 'none'} (hopbench doctor lists the devices); e.g. "
                                  "--opt UCX_TLS=tcp") from None
            _ctx_settings = wanted
        elif wanted != _ctx_settings:
            raise ConfigError(f"UCX is already initialised in this process with {_ctx_settings}; "
                              f"cannot switch to {wanted} (run another process)")
        return _ctx


def _lanes() -> list[str]:
    """The UCX transports this host offers (a throwaway default context's resources)."""
    try:
        probe = ucx_api.UCXContext({}, feature_flags=(ucx_api.Feature.TAG,))
    except Exception:
        return []
    names = [line.split("flags --")[-1].strip() for line in probe.info.splitlines() if "resource" in line]
    return sorted({n.split("/")[0] for n in names if n})


_graveyard: list[Any] = []  # endpoints that failed to connect (see UcxTransport.connect)
_log = LogTail()
_selected_seen: list[str] = []


try:
    from . import _ucx as _native

    _NATIVE_MISSING: str | None = None
except ImportError as _exc:  # not built here (no compiler at install): the Python loop runs
    _native = None  # type: ignore[assignment]
    _NATIVE_MISSING = f"the UCX transport's C part is not built here ({_exc})"
_bound: dict[str, str | None] = {}


def _native_bind() -> str | None:
    """Resolve the C part's ucp functions from the libucp this process loaded (once per
    library); why the compiled loop cannot run, if it cannot."""
    if _native is None:
        return _NATIVE_MISSING
    library = _loaded_libucp()
    if not library:
        return "libucp is not loaded"
    if library not in _bound:
        try:
            _native.bind(library)
            _bound[library] = None
        except OSError as exc:
            _bound[library] = f"cannot use the loaded libucp ({exc})"
    return _bound[library]


def _loaded_libucp() -> str | None:
    return loaded_library("libucp.so")


def _as_array(buf: Any) -> Array:
    if hasattr(buf, "__cuda_array_interface__"):  # GPU memory (--memory cuda,direct): UCX moves it itself
        return Array(buf)
    if not isinstance(buf, np.ndarray):
        buf = np.frombuffer(buf, dtype=np.uint8)
    return Array(buf)


def exception_map() -> dict[type, type]:
    """Every ucxx exception class -> the hopbench error it means (by type, not by name;
    tests/test_conformance.py checks that each class ucxx exports is here)."""
    from ucxx import exceptions as X

    peer = [X.UCXCanceled, X.UCXCanceledError, X.UCXConnectionResetError, X.UCXEndpointTimeoutError,
            X.UCXNotConnectedError, X.UCXCloseError, X.UCXFirstEndpointFailureError, X.UCXLastEndpointFailureError,
            X.UCXFirstLinkFailureError, X.UCXLastLinkFailureError]
    protocol = [X.UCXMessageTruncatedError, X.UCXMsgTruncated, X.UCXBufferTooSmallError]
    connect = [X.UCXUnreachableError, X.UCXRejectedError, X.UCXInvalidAddrError, X.UCXSomeConnectsFailedError,
               X.UCXAlreadyExistsError, X.UCXBusyError]
    timeout = [X.UCXTimedOutError]
    other = [X.UCXConfigError, X.UCXExceedsLimitError, X.UCXIOError, X.UCXInvalidParamError, X.UCXNoDeviceError,
             X.UCXNoElemError, X.UCXNoMemoryError, X.UCXNoMessageError, X.UCXNoProgressError, X.UCXNoResourceError,
             X.UCXNotImplementedError, X.UCXOutOfRangeError, X.UCXShmemSegmentError, X.UCXUnsupportedError,
             X.UCXError]  # the base class last: anything more specific is matched first
    out: dict[type, type] = {}
    for classes, target in ((peer, PeerClosed), (protocol, ProtocolError), (connect, ConnectFailed),
                            (timeout, Timeout), (other, TransportError)):
        for c in classes:
            out.setdefault(c, target)
    return out


_EXC_MAP: dict[type, type] | None = None
BLOCKING_KEEPS_PYTHON = "UCX blocking progress (arm + epoll) runs in the Python loop"

# UCS status codes (ucs/type/status.h) -> the hopbench error ucxx's exception for the same
# status maps to in exception_map(): the compiled loop reports statuses, not exceptions
_STATUS_MAP: dict[int, type] = {
    **{c: PeerClosed for c in (-16, -24, -25, -80, *range(-89, -59), *range(-59, -39))},
    **{c: ProtocolError for c in (-9, -11)},
    **{c: ConnectFailed for c in (-6, -7, -13, -15, -18, -23)},
    -20: Timeout,
}


def _translate(exc: Exception, what: str) -> Exception:
    global _EXC_MAP
    if _EXC_MAP is None:
        _EXC_MAP = exception_map()
    target: type = most_specific(_EXC_MAP, exc, TransportError)
    return _error(target, what, exc)


def _error(target: type, what: str, exc: object) -> Exception:
    texts: dict[type, str] = {PeerClosed: f"UCX peer closed or unreachable during {what} ({exc})",
            ProtocolError: f"UCX message larger than expected during {what}",
            ConnectFailed: f"UCX peer unreachable during {what} ({exc})",
            Timeout: f"UCX timed out during {what} ({exc})"}
    err: Exception = target(texts.get(target, f"UCX error during {what}: {exc}"))
    return err


def _mode(poll: str) -> str:
    """auto = busy-poll for UCX: measured 17/68/164 us p50 at 64 B/61,440 B/184,320 B on
    loopback against 180/309/488 (asyncio API) and 100-800 (blocking, very spread)
    (benchmarks/ucx_progress.py; docs/TRANSPORTS.md). Only during a session: between
    sessions the server blocks in the TCP accept."""
    return "block" if poll == "block" else "busy"


class _Progress:
    """Waits for requests on one worker, busy-polling or blocking on its epoll fd."""

    def __init__(self, worker: Any, poll_mode: str, timeout_s: float, share_cpu: bool = True) -> None:
        self.worker = worker
        self.share_cpu = share_cpu
        self.busy = poll_mode == "busy"
        self.timeout_s = timeout_s
        if not self.busy:
            worker.init_blocking_progress_mode()
            self._poller = select.poll()
            self._poller.register(worker.epoll_file_descriptor, select.POLLIN)

    def wait(self, req: Any, what: str, timeout_s: float | None = None) -> None:
        progress = self.worker.progress
        if req.completed:
            return self._done(req, what)
        timeout = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        if self.busy:
            spin = Spinner(self.share_cpu, check_every=1024)  # yields when a peer may share this CPU
            while not req.completed:
                progress()
                if spin.spun() and time.monotonic() > deadline:
                    raise Timeout(f"UCX {what} timed out after {timeout} s")
        else:
            arm, poll = self.worker.arm, self._poller.poll
            while True:
                progress()
                if req.completed:
                    break
                if arm():  # nothing pending: safe to sleep until the NIC/socket wakes us
                    left = deadline - time.monotonic()
                    if left <= 0 or not poll(int(left * 1000) + 1):
                        progress()
                        if req.completed:
                            break
                        raise Timeout(f"UCX {what} timed out after {timeout} s")
        self._done(req, what)

    @staticmethod
    def _done(req: Any, what: str) -> None:
        try:
            req.check_error()
        except Exception as exc:
            raise _translate(exc, what) from None


class UcxChannel:
    def __init__(self, worker: Any, ep: Any, progress: _Progress, send_tag: Any, recv_tag: Any,
                 info: dict[str, Any]) -> None:
        self._worker = worker
        self._ep = ep
        self._p = progress
        self._send_tag = send_tag
        self._recv_tag = recv_tag
        self._arrays: dict[int, tuple[object, Array]] = {}
        self._info = info

    @property
    def info(self) -> dict[str, Any]:
        """The settings in effect; the lanes UCX selected are read afresh (UCX logs them
        as it configures the endpoint, not always before connect returns), and a UCX_TLS
        that UCX could not honour is named in `warnings`."""
        info = dict(self._info)
        info["selected"] = _selected()
        notes = [fallback_note((info.get("settings") or {}).get("UCX_TLS"), info["selected"])]
        found = bypass(info["selected"])
        if found:
            info["bypass"] = found
            notes.append(bypass_note(found, "UCX_TLS"))
        if any(notes):
            info["warnings"] = [n for n in notes if n]
        return info

    def alloc(self, n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.uint8)

    def native_unavailable(self) -> str | None:
        """Why the compiled loop cannot drive this channel (None: it can)."""
        if not self._p.busy:
            return BLOCKING_KEEPS_PYTHON
        if self._ep is None:
            return "the endpoint is closed"
        return _native_bind()

    def native_endpoint(self) -> NativeEndpoint | None:
        """The compiled loop's view: this transport's tag send and receive in C
        (transports/_ucx.c) on the ucp worker and endpoint ucxx created (their raw handles),
        busy-polling ucp_worker_progress as _Progress does; the timeout, and ucxx's liveness."""
        if self.native_unavailable() is not None:
            return None
        capsule = _native.endpoint(int(self._worker.handle), int(self._ep.handle), int(self._send_tag.value),
                                   int(self._recv_tag.value))
        return NativeEndpoint(capsule, self._p.timeout_s, self._native_error, alive=self._alive)

    def _alive(self) -> bool:
        """ucxx's view of the endpoint: False once UCX reported it failed or the peer closed it."""
        ep = self._ep
        return ep is not None and bool(ep.alive)

    def _native_error(self, failure: str, detail: int, what: str, nbytes: int) -> BaseException:
        return native_error("UCX", failure, detail, what, nbytes, self._p.timeout_s,
                            lambda st: _error(_STATUS_MAP.get(st, TransportError), what, _native.status_string(st)),
                            closed="peer closed or unreachable (endpoint closed)")

    def _array(self, buf: Any) -> Array:
        hit = self._arrays.get(id(buf))
        if hit is not None and hit[0] is buf:
            return hit[1]
        arr = _as_array(buf)
        if len(self._arrays) > 8:
            self._arrays.clear()
        self._arrays[id(buf)] = (buf, arr)
        return arr

    def send(self, buf: Any) -> None:
        """Post the send and wait for it: with rendezvous (messages above RNDV_THRESH) the
        data only moves while this worker is progressed, so returning early would leave a
        final reply stranded when the sender stops progressing."""
        try:
            req = self._ep.tag_send(self._array(buf), self._send_tag)
        except Exception as exc:
            raise _translate(exc, "send") from None
        self._p.wait(req, "send")

    def recv_into(self, buf: Any) -> None:
        try:
            req = self._ep.tag_recv(self._array(buf), self._recv_tag)
        except Exception as exc:
            raise _translate(exc, "receive") from None
        self._p.wait(req, "receive")

    def close(self) -> None:
        ep, self._ep = self._ep, None
        if ep is not None:
            # close_blocking progresses the worker until UCX has told the peer (bounded:
            # 100 attempts 10 ms apart), so the peer's pending receive fails at once
            # instead of waiting for its timeout
            with contextlib.suppress(Exception):
                ep.close_blocking(10_000_000, 100)
        self._arrays.clear()


def _selected() -> list[str]:
    """Transport/device lanes UCX has configured in this process so far (from its log)."""
    _selected_seen.extend(f"{m.group(1)}-node {m.group(2)}" for line in _log.new_lines() if (m := _SELECTED.search(line)))
    return sorted(set(_selected_seen)) if _LOG_PATH else ["unknown (UCX_LOG_* set by the user)"]


# UCX_TLS names that are not transports of their own (aliases, modifiers, always-there)
_TLS_GENERIC = {"all", "self", "sm", "shm", "tcp", "posix", "sysv", "cma", "knem", "xpmem", "mm", "^"}


def fallback_note(tls: object, selected: list[str]) -> str | None:
    """A warning when UCX_TLS asked for transports (rc, ud, dc, cuda_ipc, ...) none of
    which UCX put on a lane: it fell back (to tcp, typically, on a host without RDMA)."""
    if not tls or not isinstance(tls, str) or tls.startswith("^"):
        return None
    asked = {t.strip() for t in tls.split(",") if t.strip()} - _TLS_GENERIC
    used = {m.split("/")[0] for lane in selected for m in re.findall(r"[\w.]+/[\w.:-]+", lane)}
    if not asked or not used or any(a in used or any(u.startswith(a.rstrip("_x")) for u in used) for a in asked):
        return None
    return (f"UCX_TLS={tls} asked for {', '.join(sorted(asked))}, but UCX put only {', '.join(sorted(used))} on the "
            f"lanes (no such device here?): the measurement is of {', '.join(sorted(used))}")


def _base_info(ctx: Any, options: TransportOptions) -> dict[str, Any]:
    cfg = ctx.config
    return {
        "transport": "ucx",
        "api": "ucxx core (tag)",
        "ucx_version": ".".join(map(str, ucx_api.get_ucx_version())),
        "libucp": _loaded_libucp(),
        "settings": dict(options.settings),
        "config": {k: cfg.get(k) for k in RECORDED_CONFIG if k in cfg},
        "selected": _selected(),
        "poll": _mode(options.poll),
        "progress": "busy-poll worker.progress()" if _mode(options.poll) == "busy" else "blocking (arm + epoll)",
        "timeout_s": options.timeout_s,
    }


class UcxListener:
    def __init__(self, host: str, port: int, options: TransportOptions):
        self._options = options
        self._ctx = _context(options.settings)
        self._worker = ucx_api.UCXWorker(self._ctx)
        self._progress = _Progress(self._worker, _mode(options.poll), options.timeout_s, options.share_cpu)
        self._pending: list[Any] = []

        def on_connect(conn_request: Any) -> None:
            self._pending.append(self._listener.create_endpoint_from_conn_request(conn_request, True))

        try:
            self._listener = ucx_api.UCXListener.create(self._worker, port, on_connect)
        except Exception as exc:
            msg = str(exc)
            from ucxx import exceptions as X

            if isinstance(exc, X.UCXBusyError) or "busy" in msg.lower() or "in use" in msg.lower():
                raise ConnectFailed(f"cannot listen on {host}:{port} over UCX: port in use") from None
            raise ConnectFailed(f"cannot listen on {host}:{port} over UCX: {exc}") from None
        # ucxx's listener binds every interface; `host` is where clients are told to connect
        self.address = (host, self._listener.port)
        self.info = {"listener_ip": self._listener.ip, "port": self._listener.port}

    def accept(self, timeout: float | None) -> UcxChannel:
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while not self._pending:
            self._worker.progress()
            if time.monotonic() > deadline:
                raise Timeout(f"no UCX peer within {timeout} s")
            if not self._pending:
                time.sleep(0.0005)  # accept is not on the hot path; a short nap keeps it cheap
        ep = self._pending.pop(0)
        hello = np.zeros(len(HELLO), dtype=np.uint8)
        self._progress.wait(ep.tag_recv(Array(hello), TAG_TO_SERVER), "hello", max(0.1, deadline - time.monotonic()))
        if hello.tobytes() != HELLO:
            raise ProtocolError("UCX peer did not send the hopbench hello")
        answer = np.frombuffer(bytearray(HELLO), dtype=np.uint8)
        self._progress.wait(ep.tag_send(Array(answer), TAG_TO_CLIENT), "hello")
        info = _base_info(self._ctx, self._options)
        return UcxChannel(self._worker, ep, self._progress, TAG_TO_CLIENT, TAG_TO_SERVER, info)

    def close(self) -> None:
        self._listener = None


class UcxTransport(TransportBase):
    name = "ucx"
    device_memory = True  # UCX moves CUDA memory itself (cuda_copy, cuda_ipc, GPUDirect RDMA)

    def check_settings(self, settings: dict[str, Any]) -> None:
        _config_dict(settings)

    def check_here(self, settings: dict[str, Any]) -> None:
        _context(settings)  # the context this process will use: a missing device fails here

    def check_device_path(self, settings: dict[str, Any]) -> None:
        tls = str(settings.get("UCX_TLS", ""))
        if tls and "cuda" not in tls and tls != "all":
            raise ConfigError(f"--memory cuda,direct moves GPU memory through UCX, but UCX_TLS={tls} has no "
                              "cuda transport (add cuda_copy, e.g. UCX_TLS=tcp,cuda_copy)")

    def native_note(self, poll: str) -> str | None:
        return BLOCKING_KEEPS_PYTHON if _mode(poll) != "busy" else _native_bind()

    def devices(self) -> list[str]:
        """The transport/device resources UCX sees in this process's context."""
        try:
            ctx = _context({})
        except Exception as exc:
            return [f"error: {exc}"]
        return [line.split("flags --")[-1].strip() for line in ctx.info.splitlines() if "resource" in line]

    def version(self) -> str:
        import ucxx

        return f"ucxx {ucxx.__version__} (UCX {'.'.join(map(str, ucx_api.get_ucx_version()))}, {_loaded_libucp()})"

    def listen(self, host: str, port: int, options: TransportOptions) -> UcxListener:
        return UcxListener(host, port, options)

    def connect(self, host: str, port: int, options: TransportOptions) -> UcxChannel:
        if ":" in host:  # measured against serve --bind [::1]: the hello never arrives
            raise ConnectFailed(f"cannot reach {host}:{port} over UCX: ucxx's listener takes a port and binds IPv4 "
                                "only (UCXListener.create has no address), so an IPv6 peer cannot be reached; give the "
                                "server an IPv4 address (tcp and zmq run over IPv6)")
        ctx = _context(options.settings)
        worker = ucx_api.UCXWorker(ctx)
        progress = _Progress(worker, _mode(options.poll), options.timeout_s, options.share_cpu)
        ep = None
        try:
            ep = ucx_api.UCXEndpoint.create(worker, host, port, True)
            hello = np.frombuffer(bytearray(HELLO), dtype=np.uint8)
            answer = np.zeros(len(HELLO), dtype=np.uint8)
            r = ep.tag_recv(Array(answer), TAG_TO_CLIENT)
            progress.wait(ep.tag_send(Array(hello), TAG_TO_SERVER), "hello", options.connect_timeout_s)
            progress.wait(r, "hello", options.connect_timeout_s)
            if answer.tobytes() != HELLO:
                raise ProtocolError(f"{host}:{port} is not a hopbench UCX data listener")
        except (Timeout, PeerClosed, TransportError) as exc:
            # closing an endpoint that failed to connect crashes ucxx 0.52 (segfault in
            # ep.close); keep it referenced and let the worker own it instead
            _graveyard.append((worker, ep))
            hint = ("; where both ends share one host (two network namespaces), UCX may have chosen shared memory "
                    "or cma, which cannot cross them: --opt UCX_TLS=tcp keeps the hop on the network"
                    ) if "UCX_TLS" not in options.settings and "unreachable" in str(exc).lower() else ""
            raise ConnectFailed(f"cannot reach {host}:{port} over UCX: {exc}{hint}") from None
        except Exception as exc:
            raise ConnectFailed(f"cannot reach {host}:{port} over UCX: {exc}") from None
        info = _base_info(ctx, options)
        info["endpoint"] = f"{host}:{port}"
        return UcxChannel(worker, ep, progress, TAG_TO_SERVER, TAG_TO_CLIENT, info)
