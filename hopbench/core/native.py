"""The compiled loop (hopbench/core/_native.c) and when it runs instead of the Python one.

`loop` is "auto" (the compiled loop where it is built and applies, else the Python loop,
saying why), "native" (refuse to measure without it) or "python" (the reference). It
applies to host-memory plans over a transport whose channel hands out a NativeEndpoint
(its own send and recv in C; the transport's native_note says when it does) with the default clock and no per-cycle hook (GPU
stages and the direct path keep the Python loop). Which loop ran is recorded per payload
(report.json data_channel.loop, and the server's in server_channel.loop).

Both loops keep one contract (hopbench.core.timing): the seq stamp and the id check
outside the timed span, one sample per cycle into the preallocated array, a wrong reply
never a sample, `progress.done` set on every exception, the same exceptions."""

from __future__ import annotations

import enum
import time
import zlib  # noqa: F401  (loads the libz whose crc32 the compiled echo loop calls)
from dataclasses import dataclass
from typing import Any, Callable, Literal

import numpy as np

from hopbench.core.protocol import ReplyIds
from hopbench.core.transport import NO_COMPILED_LOOP, NativeCapable, NativeEndpoint
from hopbench.errors import ConfigError

try:
    import hopbench._native as _C

    UNAVAILABLE: str | None = None
except ImportError as _exc:  # not built here: no compiler or headers at install time
    _C = None  # type: ignore[assignment]
    UNAVAILABLE = (f"the compiled loop is not built here ({_exc}); reinstall with a C compiler and the Python "
                   f"headers (pip install -e .)")

#: the loops' statuses, named once in C (hb_endpoint.h) and read from the extension (without
#: it no compiled loop runs, so no status but OK is ever read)
Status = enum.IntEnum("Status", {name.upper(): code for code, name in  # type: ignore[misc]
                                 enumerate(_C.STATUS if _C is not None else ("ok",))})


@dataclass(frozen=True)
class LoopChoice:
    """Which loop runs: `kind` "native" (the compiled loop) or "python", and `why` the Python
    loop runs where it does. Its text ("native", "python (why)") is what ACCEPT announces and
    the report records; `parse` reads that text back."""

    kind: Literal["native", "python"]
    why: str | None = None

    def __str__(self) -> str:
        return self.kind if self.why is None else f"{self.kind} ({self.why})"

    @classmethod
    def parse(cls, text: str) -> "LoopChoice":
        kind, _, why = text.partition(" (")
        if kind not in ("native", "python"):
            raise ConfigError(f"not a loop: {text!r}")
        return cls("native" if kind == "native" else "python", why[:-1] if why.endswith(")") else None)


def choose(channel: Any, loop: str, eligible: str | None = None) -> tuple[NativeEndpoint | None, LoopChoice]:
    """(endpoint or None, the loop that runs). eligible: the reason this plan needs the
    Python loop, if it does. loop='native' refuses instead of falling back."""
    if loop == "python":
        return None, LoopChoice("python", "asked")
    reason = UNAVAILABLE or eligible
    ep = None
    if reason is None:
        ep = channel.native_endpoint() if isinstance(channel, NativeCapable) else None
        if ep is None:
            reason = (channel.native_unavailable() if isinstance(channel, NativeCapable) else None) or NO_COMPILED_LOOP
    if reason is not None:
        if loop == "native":
            raise ConfigError(f"--loop native: {reason}")
        return None, LoopChoice("python", reason)
    return ep, LoopChoice("native")


def predict(transport: Any, poll: str, loop: str, eligible: str | None = None) -> LoopChoice:
    """What `choose` will answer for a channel of this transport, before it exists (the
    server announces its loop in ACCEPT, before the data channel is connected)."""
    if loop == "python":
        return LoopChoice("python", "asked")
    reason = UNAVAILABLE or eligible or transport.native_note(poll)
    if reason is not None and loop == "native":
        raise ConfigError(f"--loop native: {reason}")
    return LoopChoice("native") if reason is None else LoopChoice("python", reason)


def _ids(ids: ReplyIds) -> tuple[int, int]:
    return ids.k, ids.span // ids.k


def _raise(ep: NativeEndpoint, status: int, detail: int, what: str, nbytes: int, exc: Any) -> None:
    if status == Status["INTERRUPTED"]:
        raise exc if isinstance(exc, BaseException) else KeyboardInterrupt()
    raise ep.error(Status(status).name.lower(), detail, what, nbytes)


def may_share_cpu(mine: dict[str, Any] | None, peer: dict[str, Any] | None) -> bool:
    """Whether the peer process may run on one of this process's CPUs: the same host (by
    hostname) and CPU sets that overlap, or anything unknown. A busy-polling loop then yields
    every few empty polls so the peer gets the CPU; otherwise it spins as ucx_perftest does
    (a yield costs a system call per few polls: measured ~2x on a 64 B UCX round trip)."""
    mine, peer = mine or {}, peer or {}
    if mine.get("hostname") and peer.get("hostname") and mine["hostname"] != peer["hostname"]:
        return False
    a, b = mine.get("cpu_affinity"), peer.get("cpu_affinity")
    if not a or not b:
        return True
    return bool(set(a) & set(b))


YIELD_EVERY = 8  # empty polls between sched_yield calls when the peer may share this CPU


def run_client(ep: NativeEndpoint, request: Any, reply: Any, ids: ReplyIds, samples: np.ndarray,
               progress: Any, gap_s: float = 0.0, share_cpu: bool = True) -> int:
    """The timed loop in C: samples[i] = the round trip of seq i in ns (CLOCK_MONOTONIC);
    progress.done = the round trips completed, also when it raises."""
    assert _C is not None
    k, idb = _ids(ids)
    y = YIELD_EVERY if share_cpu else 0
    n = len(samples)
    gap_ns = int(gap_s * 1e9)
    if ep.hold is not None:
        ep.hold(True)
    try:
        done, st, phase, detail, exc = _C.client(ep.capsule, int(ep.timeout_s * 1e9), y, ep.progress, ep.alive,
                                                 request, reply, k, idb, samples, n, gap_ns)
    finally:
        if ep.hold is not None:
            ep.hold(False)
    progress.done = done
    if st == Status["BAD_REPLY"]:  # the Python checker says what was wrong, in its own words
        ids.check(reply, done)
    if st:
        what = "send" if phase else "receive"
        _raise(ep, st, detail, what, len(memoryview(reply).cast("B")), exc)
    return done


def run_echo(ep: NativeEndpoint, request: Any, reply: Any, ids: ReplyIds, total: int, crc: int | None,
             on_bad_seq: Callable[[int], None], progress: Any, share_cpu: bool = True) -> int:
    """The server's echo loop in C; a request with another seq goes to on_bad_seq (as in Python)."""
    assert _C is not None
    k, idb = _ids(ids)
    y = YIELD_EVERY if share_cpu else 0
    if ep.hold is not None:
        ep.hold(True)
    try:
        done, st, phase, detail, exc = _C.echo(ep.capsule, int(ep.timeout_s * 1e9), y, ep.progress, ep.alive,
                                               request, reply, k, idb, total, -1 if crc is None else crc)
    finally:
        if ep.hold is not None:
            ep.hold(False)
    progress.done = done
    if st == Status["BAD_SEQ"]:
        on_bad_seq(done)
        return done
    if st:
        what = "send" if phase else "receive"
        _raise(ep, st, detail, what, len(memoryview(request).cast("B")), exc)
    return done


def default_clock(clock: Callable[[], int]) -> bool:
    """The compiled loop reads CLOCK_MONOTONIC, which is time.perf_counter_ns on Linux."""
    return clock is time.perf_counter_ns


__all__ = ["UNAVAILABLE", "LoopChoice", "Status", "choose", "predict", "run_client", "run_echo"]
