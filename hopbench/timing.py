"""The one timing loop. Transports never time anything; this is the only clock read.

Per cycle: stamp the sequence number into the request (untimed), t0, send the whole
request, receive the whole reply, t1, store t1 - t0 in a preallocated int64 array, then
verify the reply's ids (untimed). A wrong, stale or short reply raises and is never a
sample. The caller decides which indices are untimed/warm-up; the loop records them all.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from hopbench.protocol import SEQ, ReplyCodec


def run_cycles(
    channel,
    request: bytearray,
    reply: bytearray,
    codec: ReplyCodec,
    samples: np.ndarray,
    *,
    start_seq: int = 0,
    clock: Callable[[], int] = time.perf_counter_ns,
    gap_s: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Run len(samples) round trips; samples[i] gets the round trip of seq start_seq+i in ns.

    Returns the number of cycles completed. On any exception (transport error, verify
    error, KeyboardInterrupt) the exception gets `completed_cycles`: samples[:n] are valid.
    """
    pack_seq = SEQ.pack_into
    send = channel.send
    recv_into = channel.recv_into
    check = codec.checker(reply)
    n = len(samples)
    i = 0
    try:
        while i < n:
            seq = start_seq + i
            pack_seq(request, 0, seq)
            t0 = clock()
            send(request)
            recv_into(reply)
            t1 = clock()
            check(seq)
            samples[i] = t1 - t0
            i += 1
            if gap_s:
                sleep(gap_s)  # think time between hops (--gap-ms), not synchronisation
    except BaseException as exc:
        exc.completed_cycles = i  # type: ignore[attr-defined]
        raise
    return i
