"""The served drafter's path around its forward, with a stand-in model: who leads a batch (no
session's reply waits for another session's forward), and how a client waits for the reply."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from hopbench.core import protocol as P
from hopbench.core import transport
from hopbench.core.batcher import Batcher
from hopbench.core.session import data_poll


class _Model:
    """run_bodies per the DraftModel protocol; `hold` lets a test stop a batch's forward until
    a condition it names holds."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, list[bytes]]] = []
        self.hold = lambda bodies: None

    def run_bodies(self, bodies, rows, k):
        self.ran.append((threading.current_thread().name, list(bodies)))
        self.hold(bodies)
        return np.zeros((len(bodies), k), dtype=np.int64), 1, 0, 0


def test_a_leader_hands_the_lead_on_once_its_own_ask_is_answered():
    """Asks a, b, c one at a time (max_batch 1): a's thread leads a's forward and then returns,
    so a's reply is never held behind b's forward; a waiter leads the rest."""
    model = _Model()
    batcher = Batcher(model, window_s=0.0, max_batch=1)
    a_back, saw = threading.Event(), {}

    def hold(bodies):
        if bodies == [b"a"]:  # a's forward ends once b and c are queued behind it
            with batcher.arrived:  # an arrival signals the leader's condition (not every waiter's)
                assert batcher.arrived.wait_for(lambda: len(batcher.queue) == 2, timeout=30)
        elif bodies == [b"b"]:
            saw["a returned before b's forward ended"] = a_back.wait(30)

    model.hold = hold
    for _ in range(3):
        batcher.join()

    def ask(name):
        batcher.submit(name.encode(), 3, 2)
        if name == "a":
            a_back.set()

    threads = {n: threading.Thread(target=ask, args=(n,), name=n) for n in "abc"}
    threads["a"].start()
    with batcher.cv:  # b and c ask only once a leads
        assert batcher.cv.wait_for(lambda: batcher.running, timeout=30)
    threads["b"].start(), threads["c"].start()
    for t in threads.values():
        t.join(60)
    assert saw == {"a returned before b's forward ended": True}
    leaders = {bodies[0]: who for who, bodies in model.ran}
    assert leaders[b"a"] == "a" and leaders[b"b"] != "a" and leaders[b"c"] != "a", leaders


@pytest.mark.parametrize("cpus, poll, drafter, want", [
    (8, "auto", True, "busy"),  # a reply a forward away, CPUs to spare: spin
    (8, "auto", False, "auto"),  # a plain echo keeps the transport's default
    (8, "block", True, "block"),  # asked for: kept
    (2, "auto", True, "auto"),  # a spinning client would take the server's CPU
])
def test_a_drafter_plan_busy_polls_by_default_where_the_client_has_cpus(monkeypatch, cpus, poll, drafter, want):
    monkeypatch.setattr(transport.os, "sched_getaffinity", lambda pid: set(range(cpus)))
    assert transport.plan_poll(poll, drafter) == want


@pytest.mark.parametrize("group, want", [(None, "busy"), (P.GroupPlan("g1", 8), "auto")])
def test_the_server_spins_for_a_lone_targets_drafter_plan_not_for_a_groups(monkeypatch, group, want):
    """A lone target's session spins on its receive (the ledger's wake-up taken out); the
    sessions of a start group block, or their spinners would share one interpreter's lock."""
    monkeypatch.setattr(transport.os, "sched_getaffinity", lambda pid: set(range(8)))
    plan = P.Plan("tcp", 3 * 320, 8, 2, 4, 30, 3, drafter=P.DrafterPlan(), group=group)
    assert data_poll("auto", plan) == want
    assert data_poll("block", plan) == "block"
