"""While the server runs a session, any other client is told that it is busy (iperf3's
"the server is busy running a test"): its HELLO answered with REFUSE (docs/PROTOCOL.md
"States") instead of waiting unanswered in the accept queue until its timeout."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from hopbench.core import protocol as P
from hopbench.errors import HopbenchError, Timeout


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
            peer = chan.info.get("peer", "?")
            try:
                P.recv_msg(chan, P.HELLO)
                P.send_msg(chan, P.REFUSE, {"reason": self.reason})
                self.log(f"client {peer}: refused, busy with another session")
            except HopbenchError:
                pass
            chan.close()
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
