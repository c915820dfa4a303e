"""The nixl channel: the contract's send and recv_into as one-sided WRITEs into buffers the
peer credited, with notifications (the choices: the package's docstring, __init__.py)."""

from __future__ import annotations

import socket
import time
from typing import Any

import nixl_cu12._bindings as nb
import numpy as np

from hopbench.core.transport import NativeEndpoint, Spinner, TransportOptions
from hopbench.errors import PeerClosed, ProtocolError, Timeout, TransportError
from hopbench.lanes import bypass, bypass_note

from .._loaded import loaded_library
from .._onesided import Liveness
from . import native
from .agent import _BUSY_VALUE, _DONE_VALUE, BACKEND, _Agent, _status_error, _translate, _version
from .memory import Memory, _copy
from .wire import _CREDIT, _DATA, _EAGER, _GOODBYE, _MISMATCH, _NEXT, EAGER_MAX, EAGER_WAIT_S, Credit, _Inbox

SPIN_CHECK = 0x3F  # busy-poll: read the clock every 64 spins (and yield, when the peer may share the CPU)
CHECK_S = 0.001  # busy-poll: the deadline and the liveness connection at most this often
_SPINS = range(SPIN_CHECK + 1)


class Waits:
    """A channel's waits: poll the agent until an inbox entry or a WRITE's completion comes,
    busy (a yield between rounds when the peer may share the CPU: core.transport.Spinner)
    or sleeping between checks in select() on the liveness connection (block); Timeout
    after the channel's timeout, PeerClosed as soon as the peer is gone."""

    def __init__(self, agent: _Agent, box: _Inbox, sock: socket.socket, options: TransportOptions) -> None:
        self._a = agent
        self._raw = agent.raw
        self._box = box
        self.live = Liveness("NIXL", sock, box, options.timeout_s)
        # after each SPIN_CHECK + 1 polls: a yield when the peer may run on our CPU
        self._spin = Spinner(options.share_cpu, check_every=1, yield_every=1)

    def complete(self, handle: Any) -> Any:
        status_of = self._raw.getXferStatus
        deadline = self.live.deadline()
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
        most every CHECK_S, a yield when the peer may share this CPU (core.transport.Spinner).
        Returns (now, the next check's time)."""
        now = time.monotonic()
        if now > next_check:
            self.live.check(deadline, what)
            next_check = now + CHECK_S
        self._spin.spun()
        return now, next_check

    def wait(self, entries: dict[int, Any], k: int, what: str, until: float | None = None) -> bool:
        """Poll the agent until entries (of the inbox) holds k: busy, or sleeping between
        checks (block). False when `until` (monotonic) passed first; Timeout after the
        channel's timeout, PeerClosed when the peer is gone."""
        agent = self._a
        live = self.live
        deadline = live.deadline()
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
                live.closed(what)
                now, next_check = self._between_spins(deadline, what, next_check)
                if until is not None and now > until:
                    return False
            return True
        while k not in entries:
            live.closed(what)
            agent.poll()
            if k in entries:
                break
            live.check(deadline, what, agent.delay_s)
            if until is not None and time.monotonic() > until:
                return False
        return True


class NixlChannel:
    def __init__(self, agent: _Agent, peer: str, my_id: int, sock: socket.socket, options: TransportOptions,
                 endpoint: str) -> None:
        self._a = agent
        self._raw = agent.raw
        self._peer = peer
        self._me = my_id
        self._chan = my_id ^ 1  # the peer end's id: every notification is addressed to it
        self._sock = sock
        self._box = _Inbox()
        self._waits = Waits(agent, self._box, sock, options)
        self._closed = False
        self._mem = Memory(agent, peer)
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
                      "libucp": loaded_library("libucp", "nixl"), **agent.settings}
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

    # -- the compiled loop's endpoint (transports/_nixl.c, nixl/native.py) ------------------
    def native_unavailable(self) -> str | None:
        if self._closed:
            return "the channel is closed"
        if not self._a.busy:
            return native.BLOCKING_KEEPS_PYTHON
        return native.agent_pointer(self._a)[1]

    def native_endpoint(self) -> NativeEndpoint | None:
        """This channel's send and receive in C for the core's compiled loops: the steady loop's
        WRITEs and notifications run there, the rest through this channel's own calls."""
        if self.native_unavailable() is not None:
            return None
        return native.endpoint(self, self._waits.live.timeout_s, self._waits.live.alive)

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
        src = self._mem.region(buf)
        k = self._sent
        self._sent = k + 1
        where = self._where(k, src)
        if where is not None:  # (None: the message went in a notification)
            rid, remote = where
            self._write(src, rid, remote, self._data_notif(k, rid))

    def _where(self, k: int, src: Any) -> tuple[int, Any] | None:
        """The peer's buffer message k fills (its region id and descriptor), from its credit;
        None where the message went in a notification instead (eager, or a mismatch)."""
        credits = self._box.credits
        c = credits.pop(k, None)
        if credits:  # credits of receives filled eagerly: their regions may be the ones named now
            self._drop_stale(k)
        if c is None or not (c[0] or self._mem.remote_len.get(c[1]) == src.nbytes):
            c = self._credit(k, src.nbytes, c, eager=not src.vram)
            if c is None:  # eager: the message in the notification
                self.eager_sends += 1
                self._notify(_EAGER.pack(b"E", self._chan, k) + bytes(memoryview(src.obj).cast("B")), "send")
                return None
        hard, rid, length, raw_credit = c
        if not hard:
            return rid, self._mem.remote[rid]
        if length != src.nbytes:
            self._notify(_MISMATCH.pack(b"M", self._chan, k, src.nbytes), "send")
            return None
        remote = self._mem.remote.get(rid)
        return rid, remote if remote is not None else self._mem.learn(raw_credit)  # type: ignore[arg-type]

    def _data_notif(self, k: int, rid: int) -> bytes:
        """Message k's data notification, predicting our own next receive (a credit riding on
        it) when our last two receives used one buffer."""
        notif = _DATA.pack(b"D", self._chan, k, rid)
        a, b = self._last_rx
        if a == b and self._credited == self._received:  # steady: our next receive uses that buffer again
            notif += _NEXT.pack(self._received, a)
            self._predicted[self._received] = a
            self._credited += 1
        return notif

    def _write(self, src: Any, rid: int, remote: Any, notif: bytes) -> None:
        """The WRITE of src into the peer's region rid with its notification (its transfer
        handle made once per pair), waited to completion."""
        handle = self._mem.xfers.get((src.id, rid))
        raw = self._raw
        try:
            if handle is None:
                handle = self._mem.xfers[(src.id, rid)] = raw.makeXferReq(nb.NIXL_WRITE, src.local, [0], remote, [0], b"",
                                                                      [], False)
            status = raw.postXferReq(handle, notif)
            if status.value == _BUSY_VALUE:
                status = self._waits.complete(handle)
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
                if c[1] in self._mem.remote and self._mem.remote_len[c[1]] == nbytes:
                    return c
                if eager:  # predicted for another length: the message says its own
                    return None
                c = None  # predicted for another length: the peer's hard credit for k will come
            if not self._waits.wait(credits, k, "send (waiting for the peer's receive)", until=eager_at):
                return None

    def _drop_stale(self, k: int) -> None:
        """Drop the credits of receives before k (filled eagerly), learning their regions."""
        credits = self._box.credits
        for old in [ck for ck in credits if ck < k]:
            stale = credits.pop(old)
            if stale[0]:
                self._mem.learn(stale[3])  # type: ignore[arg-type]

    def recv_into(self, buf: Any) -> None:
        """Offer buf to the peer (credit k) unless a predicted credit already did, wait for
        message k: its WRITE's notification (or the message itself, eager). A message
        WRITTEN into the predicted buffer when buf is another is copied over."""
        if self._closed:
            raise PeerClosed("receive on a closed NIXL channel")
        dst = self._mem.region(buf)
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
            self._waits.wait(events, k, "receive")
            event = events.pop(k)
        kind, value, body = event
        if kind == b"D":
            if value == dst.id:
                return
            into = self._mem.by_id(value)  # written where we predicted
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

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._raw.genNotif(self._peer, _GOODBYE.pack(b"G", self._chan))
            self._a.poll()  # hand the goodbye to UCX
        except Exception:
            pass
        self._mem.close()
        with self._a.inbox_lock:
            self._a.inboxes.pop((self._peer, self._me), None)
        self._a.drop_peer(self._peer)
        try:
            self._sock.close()
        except OSError:
            pass
