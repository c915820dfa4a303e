"""The nixl channel's compiled path (transports/_nixl.c): binding NIXL's C API, finding the
Python agent's nixlAgent behind its binding, and the bridge between the C endpoint and the
Python channel. The C endpoint runs the steady loop (a posted WRITE with its data
notification, the notifications polled) without the interpreter; everything else (a
buffer's first credit with its registration, an eager message, a copy from another
region) is the Python channel's own code, called through the bridge with the channel's
state handed over and back, so the Python channel stays the one reference of the protocol."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np

from hopbench.core.transport import NativeEndpoint, native_error
from hopbench.errors import PeerClosed, ProtocolError, TransportError

from .memory import _copy

try:
    from .. import _nixl as _C

    MISSING: str | None = None
except ImportError as _exc:  # not built here (no compiler at install): the Python loop runs
    _C = None  # type: ignore[assignment]
    MISSING = f"the nixl transport's C part is not built here ({_exc})"

BLOCKING_KEEPS_PYTHON = "NIXL's blocking progress (a sleep between polls) runs in the Python loop"
_bound: list[str | None] = []  # [why not] once NIXL's C API was looked for
_checked: dict[int, str | None] = {}  # id(agent) -> why its pointer cannot be used, or None
CAPI_BACKEND = -2  # nixl_capi_status_t: NIXL_CAPI_ERROR_BACKEND (a transfer's UCX failure)
INBOX_FULL = -1000  # _nixl.c: a peer far ahead of the protocol


def capi_path() -> Path:
    """libnixl_capi.so, beside the libnixl.so the binding loads (the nixl-cu12 wheel ships both)."""
    import nixl_cu12

    return Path(nixl_cu12.__file__).resolve().parent.parent / ".nixl_cu12.mesonpy.libs" / "libnixl_capi.so"


def bind() -> str | None:
    """Resolve NIXL's C API once; why the compiled path cannot run, if it cannot."""
    if _C is None:
        return MISSING
    if not _bound:
        path = capi_path()
        try:
            _C.bind(str(path))
            _bound.append(None)
        except OSError as exc:
            _bound.append(f"NIXL's C API is not usable ({exc})")
    return _bound[0]


def agent_pointer(agent: Any) -> tuple[int | None, str | None]:
    """(the nixlAgent * behind the agent's binding, None) or (None, why not). Checked once per
    agent: the C API's getLocalMD through the pointer must give the binding's own bytes."""
    why = bind()
    if why is not None:
        return None, why
    try:
        ptr = _C.agent_pointer(agent.raw)
    except TypeError as exc:
        return None, f"the NIXL binding's agent is not where hopbench looks for it ({exc})"
    if id(agent) not in _checked:
        try:
            same = _C.local_md(ptr) == agent.raw.getLocalMD()
        except OSError as exc:
            same = False
            _checked[id(agent)] = f"NIXL's C API refused the agent ({exc})"
        if same:
            _checked[id(agent)] = None
        else:
            _checked.setdefault(id(agent), "the agent pointer read from the NIXL binding does not check out")
    why = _checked[id(agent)]
    return (ptr if why is None else None), why


def _view(address: int, nbytes: int) -> np.ndarray:
    """The loop's buffer at address as a byte array (the loop owns the memory)."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * max(nbytes, 1)).from_address(address))[:nbytes]


class _Forward:
    """While the C endpoint runs the loop, the agent files this channel's notifications that
    another thread polled here (sessions share the agent) into the endpoint's inbox."""

    def __init__(self, capsule: Any) -> None:
        self._cap = capsule

    def put(self, msg: bytes) -> None:
        _C.put(self._cap, msg)


class Bridge:
    """What the C endpoint calls back (with the GIL) and the hold around the loop: the channel's
    state and inbox handed to C before, back after, and around each call it leaves to Python."""

    def __init__(self, channel: Any) -> None:
        self._ch = channel
        self.capsule: Any = None  # set once the endpoint exists; dropped after the loop

    # -- around the loop -------------------------------------------------------------------
    def hold(self, on: bool) -> None:
        if on:
            self._push()
            self._route_to_c(True)
        else:
            self._route_to_c(False)
            self._pull()
            self.capsule = None  # (the capsule holds this bridge: no cycle left behind)

    def _route_to_c(self, on: bool) -> None:
        ch = self._ch
        with ch._a.inbox_lock:
            ch._a.inboxes[(ch._peer, ch._me)] = _Forward(self.capsule) if on else ch._box

    def _push(self) -> None:
        """The Python channel's state (and its inbox, emptied here) to C."""
        ch, box = self._ch, self._ch._box
        xfers = [(src, rid, int(handle), ch._mem.remote_len[rid]) for (src, rid), handle in ch._mem.xfers.items()
                 if rid in ch._mem.remote_len][-16:]
        state = (ch._sent, ch._received, ch._credited, ch.eager_sends, ch.credits_sent, dict(ch._predicted),
                 ch._last_rx, dict(box.credits), dict(box.events), box.goodbye)
        _C.set_state(self.capsule, state, xfers)
        box.credits.clear()
        box.events.clear()

    def _pull(self) -> None:
        """C's state (and its inbox) back to the Python channel."""
        ch, box = self._ch, self._ch._box
        (ch._sent, ch._received, ch._credited, ch.eager_sends, ch.credits_sent, predicted, last_rx, credits, events,
         goodbye) = _C.state(self.capsule)
        ch._predicted = predicted
        ch._last_rx = last_rx
        box.credits.update(credits)
        box.events.update({k: (kind, value, memoryview(body) if body is not None else None)
                           for k, (kind, value, body) in events.items()})
        box.goodbye = box.goodbye or goodbye

    def _python(self, call: Any) -> None:
        """One of the Python channel's own calls, the state handed over and back."""
        self._pull()
        self._route_to_c(False)
        try:
            call()
        finally:
            self._route_to_c(True)
            self._push()

    # -- called from C ----------------------------------------------------------------------
    def region(self, address: int, nbytes: int) -> int:
        """The loop's buffer's region id; a registration may release old regions and their
        transfers, so C gets the prepared transfers afresh (its state round-trips)."""
        out: list[int] = []
        self._python(lambda: out.append(int(self._ch._mem.region(_view(address, nbytes)).id)))
        return out[0]

    def send(self, address: int, nbytes: int, _: int) -> None:
        self._python(lambda: self._ch.send(_view(address, nbytes)))

    def recv(self, address: int, nbytes: int, _: int) -> None:
        self._python(lambda: self._ch.recv_into(_view(address, nbytes)))

    def copy_from(self, address: int, nbytes: int, rid: int) -> None:
        into = self._ch._mem.by_id(rid)
        if into is None or into.nbytes != nbytes:
            raise ProtocolError(f"NIXL message of {into.nbytes if into else '?'} B where {nbytes} B were expected")
        _copy(_view(address, nbytes), into.obj)

    def foreign(self, agent: str, msg: bytes) -> None:
        self._ch._a.route({agent: [msg]})


def endpoint(channel: Any, timeout_s: float, alive: Any) -> NativeEndpoint:
    """The channel's compiled endpoint (its agent's pointer checked: native_unavailable)."""
    ptr, _ = agent_pointer(channel._a)
    assert ptr is not None and _C is not None
    bridge = Bridge(channel)
    bridge.capsule = _C.endpoint(ptr, channel._peer, channel._chan, channel._me, bridge)
    return NativeEndpoint(bridge.capsule, timeout_s, lambda f, d, w, n: error(f, d, w, n, timeout_s),
                          hold=bridge.hold, alive=alive)


def error(failure: str, detail: int, what: str, nbytes: int, timeout_s: float) -> BaseException:
    """A C endpoint's status as the exception the Python channel raises for the same failure."""
    def library(status: int) -> BaseException:
        if status == CAPI_BACKEND:
            return PeerClosed(f"NIXL transfer failed during {what} (NIXL_ERR_BACKEND): the peer is gone or unreachable")
        if status == INBOX_FULL:
            return ProtocolError(f"NIXL peer sent more notifications than the protocol allows during {what}")
        return TransportError(f"NIXL {what} failed (C API status {status})")

    return native_error("NIXL", failure, detail, what, nbytes, timeout_s, library)
