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

from hopbench.core.protocol import SEQ, ReplyCodec


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


#: per-cycle stage columns of the GPU loop (ns); see run_cycles_gpu
CLIENT_STAGES = ("d2h_ns", "transfer_ns", "h2d_ns")


def run_cycles_gpu(
    channel,
    request,
    reply,
    codec: ReplyCodec,
    samples: np.ndarray,
    stages: np.ndarray | None,
    *,
    direct: bool,
    start_seq: int = 0,
    clock: Callable[[], int] = time.perf_counter_ns,
    gap_s: float = 0.0,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """The same loop for requests that start, and replies that end, in GPU memory.

    `request` and `reply` are hopbench.gpu.Staging buffers. The sequence number is
    hopbench's framing, not payload: it is stamped before t0 (into the pinned buffer when
    staged; into the device buffer by an untimed 8-byte copy when direct).

    staged: t0, D2H of the request payload, t1, send pinned, receive pinned, t2, H2D of
            the reply, t3. samples = t3 - t0; stages[i] = (t1-t0, t2-t1, t3-t2).
    direct: t0, send the device buffer, receive into the device buffer, t1 (UCX moves
            GPU memory itself; its staging is inside the transfer). samples = t1 - t0;
            stages is None. The reply is copied back untimed to check its ids.
    """
    pack_seq = SEQ.pack_into
    send = channel.send
    recv_into = channel.recv_into
    check = codec.checker(reply.host)
    req_host = request.host
    n = len(samples)
    i = 0
    try:
        if direct:
            req_dev, rep_dev = request.device, reply.device
            stamp, fetch = request.h2d, reply.d2h
            nseq = SEQ.size
            while i < n:
                seq = start_seq + i
                pack_seq(req_host, 0, seq)
                stamp(0, nseq)
                t0 = clock()
                send(req_dev)
                recv_into(rep_dev)
                t1 = clock()
                fetch()
                check(seq)
                samples[i] = t1 - t0
                i += 1
                if gap_s:
                    sleep(gap_s)
        else:
            rep_host = reply.host
            d2h, h2d = request.d2h, reply.h2d
            lo = SEQ.size
            while i < n:
                seq = start_seq + i
                pack_seq(req_host, 0, seq)
                t0 = clock()
                d2h(lo)
                t1 = clock()
                send(req_host)
                recv_into(rep_host)
                t2 = clock()
                h2d()
                t3 = clock()
                check(seq)
                samples[i] = t3 - t0
                stages[i, 0] = t1 - t0
                stages[i, 1] = t2 - t1
                stages[i, 2] = t3 - t2
                i += 1
                if gap_s:
                    sleep(gap_s)
    except BaseException as exc:
        exc.completed_cycles = i  # type: ignore[attr-defined]
        raise
    return i
