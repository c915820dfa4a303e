"""Hostile connections, as an attacker would open them against `hopbench serve` (docs/SECURITY.md):
used by benchmarks/bench_hostile.py (hundreds at a time, beside an honest client) and by
tests/test_hostile.py (a few, in `make test`)."""

from __future__ import annotations

import json
import random
import socket
import time

from hopbench.core import protocol as P

KINDS = ("half_open", "slow_sender", "garbage", "oversized", "hello_flood")
HELLO = {"protocol": P.VERSION, "role": "client", "software": "hostile"}


def frame(t: int, obj: dict | None) -> bytes:
    body = json.dumps(obj).encode() if obj is not None else b""
    return P.pack_header(t, len(body)) + body


def one(kind: str, port: int, limit_s: float, rng: random.Random) -> tuple[str, bool, float]:
    """One hostile connection: (kind, answered or closed in time, seconds from the connection's
    establishment until then; a connect held back by a full listen backlog is not counted)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=limit_s + 5)
    t0 = time.monotonic()
    try:
        if kind == "slow_sender":
            data = frame(P.HELLO, HELLO)
            for b in data:
                s.sendall(bytes([b]))
                time.sleep(0.3)  # the attack itself: a byte at a time (not synchronisation)
                if time.monotonic() - t0 > limit_s + 5:
                    break
        elif kind == "garbage":
            s.sendall(rng.randbytes(64))
        elif kind == "oversized":
            s.sendall(frame(P.HELLO, HELLO))
            s.recv(65536)
            s.sendall(frame(P.PLAN, {"transport": "tcp", "request_bytes": 2**40, "reply_bytes": 8, "k": 2,
                                      "id_bytes": 4, "cycles": 10, "warmup": 0}))
        elif kind == "hello_flood":
            s.sendall(frame(P.HELLO, HELLO))
        try:
            while s.recv(65536):  # an answer, then the close (or the close alone)
                if kind in ("hello_flood", "garbage"):
                    break
        except (ConnectionResetError, socket.timeout):
            pass
        took = time.monotonic() - t0
        return kind, took <= limit_s + 1, took
    except OSError:
        took = time.monotonic() - t0  # reset while sending: closed by the server
        return kind, took <= limit_s + 1, took
    finally:
        s.close()


