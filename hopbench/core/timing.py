"""The timed loops: the client's closed and open loops (run_cycles), the streamed client loop
(streamed_cycles, its sends on the forward's schedule) and the server's echo loop
(echo_cycles), and the speculative loop's target and drafter ends (spec_target_cycles,
spec_drafter_cycles, over a mode's steps from hopbench.core.kinds.spec).

Transports never time anything. Each side reads one injected clock: the client loop reads
it around each round trip; a staged GPU channel (hopbench.core.gpu) wraps the transport
and reads the same clock around its copies. The server loop reads no clock; the server's
staged GPU channel reads the server's clock around its copies.

Client, per cycle: stamp the sequence number into the request (untimed), t0, send the
whole request, receive the whole reply, t1, store t1 - t0 in a preallocated int64 array,
then verify the reply's ids (untimed). A wrong, stale or short reply raises and is never a
sample. The caller decides which indices are untimed/warm-up; the loop records them all.

Server, per cycle: receive the request, check its seq (and CRC), send the reply whose ids
were packed before the request arrived, pack the next one. The `direct` GPU path checks
after sending (the check reads device memory, kept off the client's critical path).

Holds, beside the loops: Progress (how far a loop got), LoopHooks (what a loop does around
its timed send and receive), Pacing (closed loop with think time, or an open-loop schedule),
LoopPolicy (which loop may run: the compiled one or Python's), StreamHooks (a streamed
cycle's steps) and the spec modes' TargetSteps and DrafterSteps.
"""

from __future__ import annotations

import dataclasses
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np

from hopbench.core import native
from hopbench.core.inputs import Producer
from hopbench.core.protocol import SEQ, ReplyIds
from hopbench.core.transport import Channel

_HOOKED = "this plan needs the Python loop (device buffers, a per-cycle hook or an injected clock)"


@dataclass
class Progress:
    """How far a loop got: `done` round trips complete (a client's samples[:done] are valid).
    Every loop (Python or compiled, client or server) sets it as it returns **or raises**, so
    a caller reads it after an exception: the typed carrier of a partial result, where the
    loops used to patch `completed_cycles` onto the exception."""

    done: int = 0


@dataclass(frozen=True)
class LoopHooks:
    """What a loop does around its timed send and receive, untimed, and the buffers the
    channel moves (default: the host buffers themselves; the direct GPU path hands it device
    buffers). Client: `stamp()` after the seq is written (direct GPU: copy it to the
    device), `settle()` after t1 (direct GPU: copy the reply back to check it). Server:
    `fetch()` brings the request to host before a late check, `after_pack()` runs after
    every packing of ids (a GPU server moves them to its device), `check_late` checks the
    request after the reply is sent, and a body failing its CRC then goes to `on_bad_crc(seq)`."""

    send_buf: Any = None
    recv_buf: Any = None
    stamp: Callable[[], None] | None = None
    settle: Callable[[], None] | None = None
    fetch: Callable[[], None] | None = None
    after_pack: Callable[[], None] | None = None
    check_late: bool = False
    on_bad_crc: Callable[[int], None] | None = None

    def any(self) -> bool:
        return any(getattr(self, f.name) is not None and getattr(self, f.name) is not False
                   for f in dataclasses.fields(self))


NO_HOOKS = LoopHooks()


@dataclass(frozen=True)
class Pacing:
    """When the client sends: closed loop, with `gap_s` of think time after each hop
    (`sleep` waits it); or open loop, `schedule` (ns from the loop's start, one per cycle)
    with each send's lag behind it recorded in `lag`."""

    gap_s: float = 0.0
    sleep: Callable[[float], None] = time.sleep
    schedule: np.ndarray | None = None
    lag: np.ndarray | None = None


CLOSED = Pacing()


@dataclass(frozen=True)
class LoopPolicy:
    """Which loop may run: `loop` "auto" hands the whole loop to the compiled one
    (hopbench.core.native) where it is built and applies, "python" runs the reference loop
    here, "native" refuses without the compiled loop; `info["loop"]` gets which ran (and,
    for Python, why). `share_cpu`: the peer may run on this process's CPUs
    (native.may_share_cpu), so a busy-polling compiled loop yields now and then."""

    loop: str = "auto"
    share_cpu: bool = True
    info: dict[str, Any] | None = None

    @staticmethod
    def of(loop: "str | LoopPolicy") -> "LoopPolicy":
        return loop if isinstance(loop, LoopPolicy) else LoopPolicy(loop)

    def choose(self, channel: Channel, hooked: bool) -> Any:
        ep, which = native.choose(channel, self.loop, _HOOKED if hooked else None)
        if self.info is not None:
            self.info["loop"] = str(which)
        return ep


def run_cycles(
    channel: Channel,
    request: Any,
    reply: Any,
    ids: ReplyIds,
    samples: np.ndarray,
    *,
    clock: Callable[[], int] = time.perf_counter_ns,
    hooks: LoopHooks = NO_HOOKS,
    pacing: Pacing = CLOSED,
    loop: str | LoopPolicy = "auto",
    progress: Progress | None = None,
) -> int:
    """Run len(samples) round trips; samples[i] gets the round trip of seq i in ns.

    Open loop (`pacing.schedule`): cycle i is sent at its intended time start + schedule[i],
    or at once when the previous reply came back later; samples[i] is then measured from the
    intended time (coordinated omission corrected, as wrk2 does) and lag[i] = actual send -
    intended (>= 0; > 0: a late send).

    `request`/`reply` are the host buffers the loop stamps and checks; `hooks` what runs
    around the timed part and the buffers the channel moves (LoopHooks).

    Returns the number of cycles completed; `progress.done` holds it too, also when the loop
    raises (transport error, verify error, KeyboardInterrupt): samples[:done] are valid.
    `loop`: which loop may run (LoopPolicy, or its `loop` alone).
    """
    progress = progress if progress is not None else Progress()
    policy = LoopPolicy.of(loop)
    if pacing.schedule is not None:
        return _open_loop(channel, request, reply, ids, samples, clock, pacing, policy.info, progress)
    hooked = hooks.any() or not native.default_clock(clock) or bool(pacing.gap_s and pacing.sleep is not time.sleep)
    ep = policy.choose(channel, hooked)
    if ep is not None:
        return native.run_client(ep, request, reply, ids, samples, progress, pacing.gap_s, policy.share_cpu)
    return _python_loop(channel, request, reply, ids, samples, clock, pacing, hooks, progress)


def _python_loop(channel: Channel, request: Any, reply: Any, ids: ReplyIds, samples: np.ndarray,
                 clock: Callable[[], int], pacing: Pacing, hooks: LoopHooks, progress: Progress) -> int:
    """run_cycles' reference loop, in Python: the hooks run untimed around the timed send and
    receive."""
    out = request if hooks.send_buf is None else hooks.send_buf
    into = reply if hooks.recv_buf is None else hooks.recv_buf
    stamp, settle, gap_s, sleep = hooks.stamp, hooks.settle, pacing.gap_s, pacing.sleep
    pack_seq = SEQ.pack_into
    send = channel.send
    recv_into = channel.recv_into
    check = ids.checker(reply)
    n = len(samples)
    i = 0
    try:
        while i < n:
            pack_seq(request, 0, i)
            if stamp is not None:
                stamp()
            t0 = clock()
            send(out)
            recv_into(into)
            t1 = clock()
            if settle is not None:
                settle()
            check(i)
            samples[i] = t1 - t0
            i += 1
            if gap_s:
                sleep(gap_s)  # think time between hops (--gap-ms), not synchronisation
    finally:
        progress.done = i
    return i


SPIN_NS = 200_000  # a scheduled send: sleep until this close to its intended time, then spin


def wait_until(clock: Callable[[], int], when: int, sleep: Callable[[float], None] = time.sleep) -> None:
    """Wait for a scheduled send (open loop's schedule, the streamed hop's forward): the
    schedule is the load's definition, not synchronisation; a sleep, then a spin on the clock."""
    ahead = when - clock()
    if ahead > SPIN_NS:
        sleep((ahead - SPIN_NS) / 1e9)
    while clock() < when:
        pass


@dataclass
class StreamHooks:
    """What a streamed cycle does at each step, the timing kept in streamed_cycles:
    `ready(i, j, n)` prepares chunk j of cycle i (n: its running number; untimed),
    `go(i, j)` sends it, `end(i)` sends the end message, `receive(i)` the reply (inside the
    hop), `settle()` and `check(i)` follow the sample untimed; `pending(n)` is told the bytes
    a send has in flight (0: none), for a caller that must account for them on an error."""

    ready: Callable[[int, int, int], None]
    go: Callable[[int, int], None]
    end: Callable[[int], None]
    receive: Callable[[int], None]
    settle: Callable[[], None]
    check: Callable[[int], None]
    pending: Callable[[int], None]


def streamed_cycles(hooks: StreamHooks, ready_ns: Any, end_ns: int, chunk_bytes: int, samples: np.ndarray,
                    lags: tuple[np.ndarray, np.ndarray], clock: Callable[[], int], progress: Progress,
                    gap_s: float = 0.0) -> int:
    """The streamed client loop (hopbench.workload.stream): per cycle t0, each chunk sent at
    t0 + ready_ns[j] (its lag behind that in lags[0]), the end message at t0 + end_ns (its lag
    in lags[1]), the reply; the sample is the exposed hop, reply time - t0 - end_ns. The
    forward's schedule is the load's definition (wait_until), not synchronisation."""
    send_lag, end_lag = lags
    i = 0
    try:
        while i < len(samples):
            t0 = clock()
            for j in range(len(ready_ns)):
                hooks.pending(chunk_bytes)
                hooks.ready(i, j, i * len(ready_ns) + j)
                wait_until(clock, t0 + ready_ns[j])
                send_lag[i] = max(send_lag[i], clock() - t0 - ready_ns[j])
                hooks.go(i, j)
            wait_until(clock, t0 + end_ns)
            end_lag[i] = clock() - t0 - end_ns
            hooks.end(i)
            hooks.pending(0)
            hooks.receive(i)
            samples[i] = clock() - t0 - end_ns
            hooks.settle()
            hooks.check(i)
            i += 1
            if gap_s:
                time.sleep(gap_s)  # think time between cycles (--gap-ms), not synchronisation
    finally:
        progress.done = i
    return i


def produced_cycles(hooks: StreamHooks, producer: Producer, chunks: int, chunk_bytes: int, samples: np.ndarray,
                    stages: dict[str, np.ndarray], clock: Callable[[], int], progress: Progress,
                    gap_s: float = 0.0) -> int:
    """The streamed client loop with a real producer (`--target gpu`): per cycle t0, the
    forward started, each tap's chunk sent as soon as its rows have landed (`hooks.ready`
    waits for them), the end message as soon as the host sees the forward end, the reply;
    the sample is the exposed hop, reply time - that end. Per cycle in `stages` (ns): the
    last chunk's send done and the forward's end as the host saw them (from t0), and the
    device's own: the last tap ready, its copy landed, the forward's end (from its start)."""
    sent, seen = stages["taps_sent_ns"], stages["forward_seen_ns"]
    ready, copied, ended = stages["tap_ready_ns"], stages["tap_copied_ns"], stages["forward_end_ns"]
    i = 0
    try:
        while i < len(samples):
            t0 = clock()
            producer.start()
            for j in range(chunks):
                hooks.pending(chunk_bytes)
                hooks.ready(i, j, i * chunks + j)
                hooks.go(i, j)
            sent[i] = clock() - t0
            producer.end()
            t_end = clock()
            seen[i] = t_end - t0
            hooks.end(i)
            hooks.pending(0)
            hooks.receive(i)
            samples[i] = clock() - t_end
            r, c, ended[i] = producer.times()
            ready[i], copied[i] = (r[-1] if r else 0), (c[-1] if c else 0)
            hooks.settle()
            hooks.check(i)
            i += 1
            if gap_s:
                time.sleep(gap_s)  # think time between cycles (--gap-ms), not synchronisation
    finally:
        progress.done = i
    return i


def _open_loop(channel: Channel, request: Any, reply: Any, ids: ReplyIds, samples: np.ndarray,
               clock: Callable[[], int], pacing: Pacing, info: dict[str, Any] | None, progress: Progress) -> int:
    """run_cycles' open loop (see there): pacing to a schedule is the load's definition, so the
    wait before a send is a sleep then a spin on the clock (not synchronisation)."""
    if info is not None:
        info["loop"] = "python (open loop: sends paced to a schedule)"
    schedule = pacing.schedule
    assert schedule is not None
    lag = pacing.lag if pacing.lag is not None else np.zeros(len(samples), dtype=np.int64)
    pack_seq, send, recv_into = SEQ.pack_into, channel.send, channel.recv_into
    check = ids.checker(reply)
    sleep = time.sleep
    n = len(samples)
    i = 0
    try:
        start = clock()
        while i < n:
            pack_seq(request, 0, i)
            intended = start + int(schedule[i])
            wait_until(clock, intended, sleep)
            t0 = clock()
            send(request)
            recv_into(reply)
            t1 = clock()
            check(i)
            samples[i] = t1 - intended
            lag[i] = t0 - intended
            i += 1
    finally:
        progress.done = i
    return i


def open_schedule(total: int, per_s: float, arrivals: str, seed: int = 0) -> np.ndarray:
    """Intended send times (ns from the start) of `total` cycles at `per_s` a second: fixed
    intervals, or poisson (exponential intervals of that mean, seeded)."""
    interval = 1e9 / per_s
    if arrivals == "poisson":
        gaps = np.random.default_rng(seed).exponential(interval, total)
        gaps[0] = 0.0
        return np.cumsum(gaps).astype(np.int64)
    return (np.arange(total, dtype=np.float64) * interval).astype(np.int64)


def echo_cycles(
    channel: Channel,
    request: Any,
    reply: Any,
    ids: ReplyIds,
    total: int,
    *,
    on_bad_seq: Callable[[int], None],
    crc: int | None = None,
    hooks: LoopHooks = NO_HOOKS,
    loop: str | LoopPolicy = "auto",
    progress: Progress | None = None,
) -> int:
    """The server's loop for one plan: `total` round trips. Returns the cycles served, which
    `progress.done` holds too, also when the loop raises.

    `request`/`reply` are the host buffers checked and packed; `hooks` the buffers the
    channel moves and what runs around the loop's steps (LoopHooks). A request whose seq is
    not the expected one goes to `on_bad_seq(seq)` and ends the plan (an abort from the
    client, or a fault the callback turns into an exception). A body failing its CRC gets
    the ids inverted (the client's signal), or with `hooks.check_late` goes to
    `hooks.on_bad_crc(seq)`. `loop` as for run_cycles."""
    policy = LoopPolicy.of(loop)
    ep = policy.choose(channel, hooks.any())
    progress = progress if progress is not None else Progress()
    if ep is not None:
        return native.run_echo(ep, request, reply, ids, total, crc, on_bad_seq, progress, policy.share_cpu)
    progress.done = _echo(channel, request, reply, ids, total, crc, on_bad_seq, hooks, progress)
    return progress.done


def _echo(channel: Channel, request: Any, reply: Any, ids: ReplyIds, total: int, crc: int | None,
          on_bad_seq: Callable[[int], None], hooks: LoopHooks, progress: Progress) -> int:
    """echo_cycles' Python loop (see there); progress.done follows every served cycle."""
    recv_into, send = channel.recv_into, channel.send
    into = request if hooks.recv_buf is None else hooks.recv_buf
    out = reply if hooks.send_buf is None else hooks.send_buf
    fetch, after_pack, check_late, on_bad_crc = hooks.fetch, hooks.after_pack, hooks.check_late, hooks.on_bad_crc
    unpack_seq = SEQ.unpack_from
    pack = ids.packer(reply)
    body = memoryview(request).cast("B")[SEQ.size:] if crc is not None else None
    pack(0)  # the reply for the expected seq is packed before the request arrives
    if after_pack is not None:
        after_pack()
    seq = 0
    try:
        for seq in range(total):
            recv_into(into)
            if not check_late:
                if unpack_seq(request, 0)[0] != seq:
                    on_bad_seq(seq)
                    return seq
                if body is not None and zlib.crc32(body) != crc:
                    ids.pack(reply, seq, corrupt=True)
                    if after_pack is not None:
                        after_pack()
            send(out)
            if check_late:
                if fetch is not None:
                    fetch()
                if unpack_seq(request, 0)[0] != seq:
                    on_bad_seq(seq)
                    return seq
                if body is not None and zlib.crc32(body) != crc and on_bad_crc is not None:
                    on_bad_crc(seq)
            pack(seq + 1)
            if after_pack is not None:
                after_pack()
        seq = total
    finally:
        progress.done = seq  # a bad seq returns early: the cycles before it were served
    return total


# ---- the speculative loop's two ends (the spec kind: hopbench.core.kinds.spec) ------------------

class TargetSteps(Protocol):
    """A spec mode's steps on the target (hopbench.core.kinds.spec.TargetSteps)."""

    def verify(self, seq: int, t0: int) -> None: ...

    def draft(self, seq: int, accepted: int) -> None: ...

    def drafted(self) -> tuple[int, int, int] | None: ...

    def check(self, seq: int) -> None: ...


class DrafterSteps(Protocol):
    """A spec mode's steps on the drafter (hopbench.core.kinds.spec.SyncDrafter)."""

    def intake(self, seq: int) -> tuple[int, int] | None: ...

    def predrafted(self, accepted: int, ready: int, now: int) -> bool: ...

    def states(self, tokens: int) -> None: ...

    def draft(self, tokens: int) -> int: ...

    def answer(self, seq: int, draft_ns: int, hit: bool, batch: int) -> None: ...


def spec_target_cycles(steps: TargetSteps, outcomes: np.ndarray, rows: np.ndarray, first_timed: int,
                       clock: Callable[[], int], progress: Progress) -> int:
    """The target's decode loop, one row per cycle (hopbench.core.spec.CYCLE_COLUMNS): t0, the
    verify (`steps.verify`: a work model, or the forward that streams its taps), t1, the draft
    (`steps.draft`: the hop, header to the drafter's ids, or the draft run here), t2, then,
    untimed, the reply's tail read (`steps.drafted`: the drafter's time, hit and batch; None
    where the draft ran here) and its ids checked. `outcomes[seq]`: the accepted count; the
    hop is the wait less the drafter's own time."""
    seq = 0
    try:
        for seq in range(len(rows)):
            accepted = int(outcomes[seq])
            t0 = clock()
            steps.verify(seq, t0)
            t1 = clock()
            steps.draft(seq, accepted)
            t2 = clock()
            remote = steps.drafted()
            steps.check(seq)
            wait = t2 - t1
            draft_ns, hit, batch = remote if remote is not None else (wait, 0, 0)
            rows[seq] = (seq, 0 if seq == 0 else (1 if seq < first_timed else 2), accepted, accepted + 1, t1 - t0, wait,
                         draft_ns, max(wait - draft_ns, 0) if remote is not None else 0, t2 - t0, hit, batch)
        seq = len(rows)
    finally:
        progress.done = seq
    return seq


def spec_drafter_cycles(steps: DrafterSteps, total: int, clock: Callable[[], int], progress: Progress) -> int:
    """The drafter's loop: per cycle the request (`steps.intake`: the header, after the
    streamed chunks in mode stream; None ends the plan, reported), then either the answer at
    once (`steps.predrafted`: drafted while the target verified) and the hidden states after
    it, or the hidden states, the draft timed here, and its answer. Returns the cycles served."""
    ready = clock()
    seq = 0
    try:
        for seq in range(total):
            asked = steps.intake(seq)
            if asked is None:
                return seq
            tokens, accepted = asked
            if steps.predrafted(accepted, ready, clock()):
                steps.answer(seq, 0, True, 0)
                steps.states(tokens)
            else:
                steps.states(tokens)
                t0 = clock()
                batch = steps.draft(tokens)
                steps.answer(seq, clock() - t0, False, batch)
            ready = clock()
        seq = total
    finally:
        progress.done = seq
    return total
