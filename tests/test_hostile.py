"""A smaller hostile-load check (issue 30; the full one is `make bench-hostile`): while a few
dozen hostile connections of every kind hit a server that serves sessions at once, an
honest client's session, opened first, completes its plans with --verify, and every hostile
connection is answered or closed within the server's handshake deadline (+1 s)."""

import random
import threading

from hopbench.core.client import Session
from hopbench.testing.hostile import KINDS, one
from tests.conftest import small_plan


def test_an_honest_client_is_served_while_hostile_connections_hit_the_server(server_factory):
    limit = 1.0
    srv = server_factory(max_sessions=8, handshake_timeout_s=limit)
    honest = Session(srv.host, srv.port, timeout_s=30.0)
    results: list = []
    lock = threading.Lock()

    def attacker(i: int) -> None:
        rng = random.Random(i)
        for n in range(3):
            res = one(KINDS[(i + n) % len(KINDS)], srv.port, limit, rng)
            with lock:
                results.append(res)

    threads = [threading.Thread(target=attacker, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    try:
        for tokens in (1, 3):
            m = honest.measure(small_plan(request_bytes=8 + tokens * 61440, cycles=200, verify=True))
            assert m.completed == m.plan.total and m.error is None
    finally:
        for t in threads:
            t.join(60)
    honest.bye()
    honest.close()
    assert len(results) == 60 and {r[0] for r in results} == set(KINDS)
    late = [r for r in results if not r[1]]
    assert not late, late
