"""`hopbench serve`: a long-lived server, one client after another (like iperf3 -s).

The control connection is always TCP on the served port; for a transport that reuses it
(tcp) the cycles run over that same connection, for other transports the session opens a
data listener on an ephemeral port per plan and announces it in ACCEPT (iperf3's
control/data split). The server only accepts and hands each connection to a session
(hopbench.core.session, the protocol's state machine), which serves each plan through the
serving path of its kind (hopbench.core.serving). A client that breaks the protocol gets an
ERROR frame (best effort) and is dropped; the server logs one line and serves the next one.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType
from typing import Any, Callable

from hopbench.core import control
from hopbench.core import env as envmod
from hopbench.core.busy import BusyAnswer, SessionPool
from hopbench.core.serving import ServerConfig
from hopbench.core.session import ServerSession, SessionStats
from hopbench.errors import HopbenchError, Timeout

__all__ = ["Server", "ServerConfig"]


class _Stop(Exception):
    pass


def _one_line_at_a_time(log: Callable[[str], None]) -> Callable[[str], None]:
    """The log callable, serialized: print() writes a line and its newline in two calls, so two
    session threads logging at once could splice their lines (a line lost to a reader)."""
    lock = threading.Lock()

    def serialized(line: str) -> None:
        with lock:
            log(line)
    return serialized


#: the longest the accept loop sleeps before it looks at a pending signal or stop()
ACCEPT_WAKE_S = 0.5


class Server:
    def __init__(self, config: ServerConfig, log: Callable[[str], None] = print,
                 clock: Callable[[], int] = time.perf_counter_ns):
        self.config = config
        self.log = _one_line_at_a_time(log)  # sessions log from their own threads (--max-sessions)
        self.clock = clock  # the server's one clock: read only around a staged GPU path's copies
        self.listener = control.listen(config.host, config.port, idle_timeout_s=config.idle_timeout_s,
                                       poll=config.poll)
        self.address: tuple[str, int] = self.listener.address
        self.env = envmod.collect()
        if config.drafter is not None:  # the drafter model it serves: its shape, device, weights, floor
            self.env["drafter"] = config.drafter.model.info()
        self.sessions = 0
        self.current: Any = None  # the session's control channel (tests cut it with control.shutdown)
        self._stopping = False
        self._lock = threading.Lock()
        #: --max-sessions N > 1: the sessions served at once (hopbench.core.busy.SessionPool)
        self.pool = SessionPool(config, self.serve_session, self.log) if config.max_sessions > 1 else None
        self.budget = self.pool.budget if self.pool is not None else None
        self.groups = self.pool.groups if self.pool is not None else None

    def serve_forever(self) -> None:
        """Serve until SIGINT/SIGTERM, stop(), or after one session with `once`."""
        main = threading.current_thread() is threading.main_thread()
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
        try:
            while not self._stopping:
                try:
                    # a bounded wait: where a signal reaches another thread than this one (CUDA's, torch's;
                    # seen under gVisor on the GPU host), an endless accept() never returned to run the
                    # handler, and SIGTERM went unanswered for 30 s and more (issue 64)
                    chan = self.listener.accept(ACCEPT_WAKE_S)
                except Timeout:
                    continue
                except HopbenchError as exc:
                    if not self._stopping:
                        self.log(f"accept failed: {exc}")
                    continue
                if self.pool is not None and not self.config.once:
                    self.pool.start(chan)
                    continue
                self._serve_queue([chan])
                if self.config.once:
                    break
        except (_Stop, KeyboardInterrupt):
            self.log("server stopping")
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self.listener.close()
            if self.pool is not None:
                self.pool.end()

    def _serve_queue(self, queue: list[Any]) -> None:
        """Serve a client, then those that arrived as its session ended; the rest are closed
        when stopping (or after one session with --once)."""
        while queue and not self._stopping:
            chan = queue.pop(0)
            busy = BusyAnswer(self.listener, chan.info.get("peer", "?"), self.log)
            busy.start()
            try:
                self.serve_session(chan)
            finally:
                queue += busy.stop()
            if self.config.once:
                break
        for waiting in queue:
            waiting.close()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # Raising interrupts whatever the main thread blocks in (accept, a session's
        # receive). Python drops an exception raised while a finaliser or weakref
        # callback happens to run (seen after UCX sessions), so the flag and a shut-down
        # listening socket end the accept loop even then.
        self._stopping = True
        control.shutdown(self.listener)
        raise _Stop()

    def stop(self) -> None:
        """Stop from another thread: the listener is shut down, so the blocked accept fails."""
        self._stopping = True
        control.shutdown(self.listener)

    def serve_session(self, chan: Any) -> SessionStats:
        """Run one client's session to its end (hopbench.core.session); one log line."""
        t0 = time.monotonic()
        with self._lock:
            self.sessions += 1
            number = self.sessions
        self.current = chan
        try:
            stats = ServerSession(chan, self.config, self.env, self.clock, self.log, self.budget,
                                  self.groups).run()
        finally:
            if self.current is chan:
                self.current = None
        outcome = "ok" if stats.error is None else f"error: {stats.error}"
        where = f", CPU {','.join(map(str, sorted(stats.cpus)))}" if stats.cpus else ""
        self.log(f"session {number} from {stats.peer}: {stats.plans} plans, {stats.cycles} cycles, "
                 f"{'/'.join(sorted(stats.transports)) or '-'}{where}, {time.monotonic() - t0:.2f} s, {outcome}")
        return stats
