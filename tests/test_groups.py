"""Plans started together (PLAN `group`, docs/PROTOCOL.md "Plans started together"): the
server holds each member's ACCEPT until the group's M sessions have sent their plan; a
member that ends is no longer waited for; a group above the server's limit is refused."""

import threading
import time

import pytest

from hopbench.core import control
from hopbench.core.client import Session
from hopbench.errors import HopbenchError, Refused
from tests.conftest import small_plan


def _until(test, within_s=20.0):
    """Bounded poll of the server's own state until test() holds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if test():
            return True
        time.sleep(0.01)  # polling the server's state, bounded; not a measurement
    return False


def _waiting(srv, gid, n):
    """n members of gid hold their ACCEPT."""
    return _until(lambda: (g := srv.server.groups._groups.get(gid)) is not None and g.waiting == n)


def _measure_in_thread(s, plan, out, key):
    def go():
        try:
            out[key] = s.measure(plan)
        except HopbenchError as exc:
            out[key] = exc
    t = threading.Thread(target=go)
    t.start()
    return t


@pytest.mark.parametrize("transport", ["tcp", "zmq"])
def test_a_group_starts_when_its_last_member_has_sent_its_plan(server_factory, transport):
    srv = server_factory(max_sessions=4)
    group = {"id": "g1", "size": 3}
    sessions = [Session(srv.host, srv.port) for _ in range(3)]
    out: dict = {}
    try:
        threads = [_measure_in_thread(s, small_plan(transport, cycles=30, group=group), out, i)
                   for i, s in enumerate(sessions[:2])]
        assert _waiting(srv, "g1", 2)  # two held ...
        assert not out  # ... and neither has measured anything
        threads.append(_measure_in_thread(sessions[2], small_plan(transport, cycles=30, group=group), out, 2))
        for t in threads:
            t.join(30)
        assert [out[i].completed for i in range(3)] == [36, 36, 36]
        # a second round of the same group: held and released again
        threads = [_measure_in_thread(s, small_plan(transport, cycles=30, group=group), out, i)
                   for i, s in enumerate(sessions)]
        for t in threads:
            t.join(30)
        assert [out[i].completed for i in range(3)] == [36, 36, 36]
        for s in sessions:
            s.bye()
    finally:
        for s in sessions:
            s.close()


def test_a_member_that_ends_is_not_waited_for(server_factory):
    srv = server_factory(max_sessions=4)
    group = {"id": "g2", "size": 3}
    a, b, c = (Session(srv.host, srv.port) for _ in range(3))
    out: dict = {}
    try:
        threads = [_measure_in_thread(s, small_plan(cycles=20, group=group), out, i) for i, s in enumerate((a, b, c))]
        for t in threads:
            t.join(30)
        assert all(out[i].completed == 26 for i in range(3))  # round 1: all three
        t1 = _measure_in_thread(a, small_plan(cycles=20, group=group), out, "a2")
        assert _waiting(srv, "g2", 1)
        control.shutdown(c.control)  # c dies between plans ...
        c.close()
        t2 = _measure_in_thread(b, small_plan(cycles=20, group=group), out, "b2")
        t1.join(30)
        t2.join(30)  # ... and a and b go on without it
        assert out["a2"].completed == 26 and out["b2"].completed == 26
        a.bye()
        b.bye()
    finally:
        for s in (a, b, c):
            s.close()


def _refused(srv, group, match):
    s = Session(srv.host, srv.port)
    try:
        with pytest.raises(Refused, match=match):
            s.measure(small_plan(cycles=10, group=group))
        return s.server_hello["caps"]
    finally:
        s.close()


def test_a_group_above_the_limit_is_refused_before_anything_is_measured(server_factory):
    caps = _refused(server_factory(max_sessions=2), {"id": "big", "size": 3},
                    r"start group of 3 targets exceeds this server's limit of 2 sessions")
    assert caps["max_sessions"] == 2
    _refused(server_factory(max_sessions=1), {"id": "g", "size": 2}, r"one session at a time \(--max-sessions 1\)")


def test_a_round_not_complete_within_its_wait_is_refused(server_factory):
    srv = server_factory(max_sessions=4)
    srv.server.groups.wait_s = 0.5  # the documented 120 s, shortened for the test
    _refused(srv, {"id": "lonely", "size": 2}, r"start group 'lonely': 1 of 2 targets sent this plan within 0.5 s")
    assert _until(lambda: "lonely" not in srv.server.groups._groups)


def test_drafts_that_arrive_together_run_as_one_batch():
    """StartGroups.draft: the drafts of a group's live members gather into one batch (closed
    when every live member is in, or at max_batch); each member learns the batch's size."""
    from hopbench.core.busy import StartGroups

    groups = StartGroups(limit=8, wait_s=30.0)
    members = [object() for _ in range(3)]
    with groups._cond:  # three sessions joined the group (as their PLANs' ACCEPTs would have)
        from hopbench.core.busy import _Group

        g = groups._groups["b"] = _Group(3)
        g.members.update(id(m) for m in members)
        groups._of.update((id(m), "b") for m in members)
    sizes = []
    start = threading.Barrier(3)

    def one():
        start.wait()
        sizes.append(groups.draft("b", 0.5, 0.1, window_s=30.0, max_batch=8))
    _all([threading.Thread(target=one) for _ in range(3)])
    assert sizes == [3, 3, 3]  # one batch: the window (30 s) never had to expire
    sizes.clear()
    together = threading.Barrier(3)

    def capped():
        together.wait()
        sizes.append(groups.draft("b", 0.1, 0.1, 0.5, 2))
    _all([threading.Thread(target=capped) for _ in range(3)])
    assert sorted(sizes) == [1, 2, 2]  # max_batch 2: a batch of two, the third alone once its window (0.5 s) ends
    groups.leave(members[0])  # a member gone: two live ones close a batch of two
    sizes.clear()
    _all([threading.Thread(target=lambda: sizes.append(groups.draft("b", 0.1, 0.1, 30.0, 8))) for _ in range(2)])
    assert sizes == [2, 2]


def _all(threads):
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
