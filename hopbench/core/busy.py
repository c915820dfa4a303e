"""While the server runs a session, any other client is told that it is busy (iperf3's
"the server is busy running a test"): its HELLO answered with REFUSE (docs/PROTOCOL.md
"States") instead of waiting unanswered in the accept queue until its timeout.

Holds: BusyAnswer (the REFUSE for a client that comes while one session runs), MemoryBudget
(the request and reply memory of the plans served at once, across sessions), StartGroups
(plans started together: their start and the drafts batched across them) and SessionPool
(--max-sessions N: each session in its own thread, up to N at once)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from hopbench.core import protocol as P
from hopbench.errors import HopbenchError, Timeout
from hopbench.records import TIMEOUT_S


class BusyAnswer(threading.Thread):
    """While one session runs, any other client is told that the server is busy (its HELLO
    answered with REFUSE, docs/PROTOCOL.md "States") instead of waiting unanswered in the
    accept queue until its timeout (iperf3's "the server is busy running a test"). A client
    that arrives as the session ends (within GRACE_S) is handed back to be served, unread.
    At most MAX_WAITING clients are held at a time; beyond that they are closed."""

    MAX_WAITING = 16
    GRACE_S = 2.0  # longer than a session takes to wind down after its client has its last reply

    def __init__(self, listener: Any, serving: str, log: Callable[[str], None]):
        super().__init__(name="hopbench-busy", daemon=True)
        self.listener, self.log = listener, log
        self.reason = (f"busy: serving another client ({serving}) since {time.strftime('%H:%M:%S UTC', time.gmtime())}; "
                       "this server runs one session at a time: try again when it ends")
        self.done = threading.Event()
        self.slots = threading.BoundedSemaphore(self.MAX_WAITING)
        self.handed_back: list[Any] = []
        self.answering: list[threading.Thread] = []
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                chan = self.listener.accept(0.2)
            except Timeout:
                continue
            except HopbenchError:  # the listener was shut down (stopping) or failed: the queue takes over
                return
            if not self.slots.acquire(blocking=False):
                chan.close()
                continue
            t = threading.Thread(target=self._answer, args=(chan,), daemon=True)
            self.answering = [a for a in self.answering if a.is_alive()] + [t]  # bounded under a flood
            t.start()

    def _answer(self, chan: Any) -> None:
        try:
            if self.done.wait(self.GRACE_S):  # the session ended meanwhile: this client is next
                with self._lock:
                    self.handed_back.append(chan)
                return
            refuse(chan, self.reason, self.log, "busy with another session")
        finally:
            self.slots.release()

    def stop(self) -> list[Any]:
        """End busy answering; returns the clients that arrived as the session ended."""
        self.done.set()
        self.join(5)
        for t in self.answering:
            t.join(self.GRACE_S + 5)  # those still in their grace wait return at once: done is set
        with self._lock:
            return list(self.handed_back)


def refuse(chan: Any, reason: str, log: Callable[[str], None], why: str, limit_s: float | None = None) -> None:
    """Answer a client's HELLO with REFUSE and close; a client that sends no HELLO within
    limit_s (else the channel's timeout) is closed unanswered."""
    from hopbench.core import control

    peer = chan.info.get("peer", "?")
    timer = threading.Timer(limit_s, control.shutdown, args=(chan,)) if limit_s else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        P.recv_msg(chan, P.HELLO)
        P.send_msg(chan, P.REFUSE, {"reason": reason})
        log(f"client {peer}: refused, {why}")
    except HopbenchError:
        pass
    finally:
        if timer is not None:
            timer.cancel()
    chan.close()


class MemoryBudget:
    """The request and reply memory of the plans served at once, across sessions: a plan
    reserves its bytes before ACCEPT and gives them back when it ends, so `--max-sessions`
    clients cannot together hold more than the total (the per-plan caps bound one plan)."""

    def __init__(self, total: int):
        self.total = total
        self.used = 0
        self._lock = threading.Lock()

    def reserve(self, nbytes: int) -> bool:
        with self._lock:
            if self.used + nbytes > self.total:
                return False
            self.used += nbytes
            return True

    def release(self, nbytes: int) -> None:
        with self._lock:
            self.used -= nbytes


class _Group:
    def __init__(self, size: int):
        self.size = size
        self.members: set[int] = set()  # the sessions that have joined (by id())
        self.left = 0  # members whose sessions have ended: the others no longer wait for them
        self.waiting = 0  # members holding this round's ACCEPT
        self.round = 0
        self.batch: _Batch | None = None  # the drafts being gathered into one batch (spec --targets)


class _Batch:
    def __init__(self, opened: float):
        self.opened = opened
        self.n = 0  # drafts in it
        self.closed = False  # no more join: it runs (or has run)
        self.done = False


class StartGroups:
    """Plans started together (PLAN `group`, docs/PROTOCOL.md "Plans started together"): the
    server holds each member's ACCEPT until all `size` sessions of the group have sent their
    plan, then sends them together, round after round (one round per plan). A member whose
    session ends is no longer waited for; a round not complete within `wait_s` is refused to
    those waiting. A session belongs to one group; the groups live while a member does."""

    def __init__(self, limit: int, wait_s: float):
        self.limit, self.wait_s = limit, wait_s
        self._groups: dict[str, _Group] = {}
        self._of: dict[int, str] = {}  # session -> its group's id
        self._cond = threading.Condition()

    def refusal(self, session: object, group: Any) -> str | None:
        """Why this plan's group cannot be joined at all (REFUSE before anything is held)."""
        gid, size = group.id, group.size  # protocol.GroupPlan
        if size > self.limit:
            return (f"a start group of {size} targets exceeds this server's limit of {self.limit} sessions at once "
                    f"(--max-sessions {self.limit})")
        with self._cond:
            mine = self._of.get(id(session))
            if mine is not None and mine != gid:
                return "a session belongs to one start group"
            g = self._groups.get(gid)
            if g is not None and g.size != size:
                return f"start group {gid!r} has {g.size} targets, not {size}"
            if g is not None and id(session) not in g.members and len(g.members) >= size:
                return f"start group {gid!r} already has its {size} targets"
        return None

    def together(self, session: object, group: Any) -> str | None:
        """Wait for this round's other members; None when they are all here, else the reason
        for refusing this plan (the round did not complete within wait_s)."""
        gid = group.id
        deadline = time.monotonic() + self.wait_s
        with self._cond:
            g = self._groups.setdefault(gid, _Group(group.size))
            g.members.add(id(session))
            self._of[id(session)] = gid
            g.waiting += 1
            here = g.round
            if self._release(g):
                return None
            while g.round == here:
                left = deadline - time.monotonic()
                if left <= 0:
                    g.waiting -= 1
                    return (f"start group {gid!r}: {g.waiting + 1} of {g.size - g.left} targets sent this plan "
                            f"within {self.wait_s:g} s")
                self._cond.wait(left)
        return None

    def leave(self, session: object) -> None:
        """The session ended: its group no longer waits for it (and is forgotten with its last member)."""
        with self._cond:
            gid = self._of.pop(id(session), None)
            g = self._groups.get(gid) if gid is not None else None
            if g is None or gid is None:
                return
            g.left += 1
            if g.left >= len(g.members):  # its last member: a latecomer starts a group afresh
                del self._groups[gid]
            else:
                self._release(g)

    def draft(self, gid: str, a_ms: float, b_ms: float, window_s: float, max_batch: int) -> int:
        """A batching drafter (docs/SPEC.md "Several targets"): the drafts of a group's sessions
        that arrive together run as one batch of b drafts taking A + b*B ms. A batch opens with
        its first draft and closes when `window_s` has passed since, when it holds `max_batch`
        drafts, or when every live member of the group is in it; its first draft's thread then
        runs the work and every member of the batch answers when it is done. Returns b."""
        from hopbench.core.timing import wait_until

        with self._cond:
            g = self._groups.get(gid)
            if g is None:  # not a member (the plan was refused its group): a batch of one
                leader, bt = True, _Batch(time.monotonic())
                bt.n, bt.closed = 1, True
            else:
                current = g.batch if g.batch is not None and not g.batch.closed else None
                leader = current is None
                bt = current if current is not None else _Batch(time.monotonic())
                g.batch = bt
                bt.n += 1
                if bt.n >= max_batch or bt.n >= g.size - g.left:
                    bt.closed = True
                    self._cond.notify_all()
                if leader:
                    deadline = bt.opened + window_s
                    while not bt.closed and (left := deadline - time.monotonic()) > 0:
                        self._cond.wait(left)
                    bt.closed = True
                else:
                    limit = time.monotonic() + self.wait_s
                    while not bt.done and (left := limit - time.monotonic()) > 0:
                        self._cond.wait(left)
                    return bt.n
            n = bt.n
        try:
            wait_until(time.perf_counter_ns, time.perf_counter_ns() + int((a_ms + n * b_ms) * 1e6))
        finally:
            with self._cond:
                bt.done = True
                self._cond.notify_all()
        return n

    def _release(self, g: _Group) -> bool:
        if g.waiting and g.waiting >= g.size - g.left:
            g.waiting = 0
            g.round += 1
            self._cond.notify_all()
            return True
        return False


class SessionPool:
    """--max-sessions N > 1: each session in its own thread, up to N at once; one more client
    is told so at once (REFUSE). Sessions share nothing but the memory budget; the compiled
    loops release the GIL, so echo loops do not wait on one another."""

    def __init__(self, config: Any, serve: Callable[[Any], Any], log: Callable[[str], None]):
        caps = config.caps
        self.limit = config.max_sessions
        self.handshake_s = config.handshake_timeout_s
        self.budget = MemoryBudget(config.max_memory_bytes or caps.max_request_bytes + caps.max_reply_bytes)
        self.groups = StartGroups(config.max_sessions, P.GROUP_WAIT_S)
        self.serve, self.log = serve, log
        self.active: dict[threading.Thread, Any] = {}  # thread -> its session's control channel
        self.peak = 0  # the most sessions served at once so far
        self.refusing = threading.BoundedSemaphore(BusyAnswer.MAX_WAITING)  # clients being told "busy" at once
        self._lock = threading.Lock()

    def start(self, chan: Any) -> None:
        with self._lock:
            self.active = {t: c for t, c in self.active.items() if t.is_alive()}
            full = len(self.active) >= self.limit
        if full:
            if not self.refusing.acquire(blocking=False):  # a flood: beyond MAX_WAITING, closed unanswered
                chan.close()
                return
            reason = (f"busy: serving {self.limit} sessions at once, this server's limit (--max-sessions "
                      f"{self.limit}); try again when one ends")
            threading.Thread(target=self._refuse, args=(chan, reason), daemon=True).start()
            return
        t = threading.Thread(target=self._run, args=(chan,), daemon=True, name="hopbench-session")
        with self._lock:
            self.active[t] = chan
            self.peak = max(self.peak, len(self.active))
        t.start()

    def _refuse(self, chan: Any, reason: str) -> None:
        try:
            refuse(chan, reason, self.log, "at the session limit", self.handshake_s)
        finally:
            self.refusing.release()

    def _run(self, chan: Any) -> None:
        try:
            self.serve(chan)
        except BaseException as exc:  # a session never takes the server down (ServerSession answers faults)
            self.log(f"session ended by {exc.__class__.__name__}: {exc}")

    def end(self, wait_s: float = TIMEOUT_S) -> None:
        """Stopping: the sessions still running have their control connections shut down (a
        blocked receive ends) and are waited for."""
        from hopbench.core import control

        with self._lock:
            running = dict(self.active)
        for chan in running.values():
            control.shutdown(chan)
        for t in running:
            t.join(wait_s)
