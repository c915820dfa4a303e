"""A drafter shared by several targets, first part (issue 32): `serve --max-sessions N`
serves sessions at once, each in its own thread; the limit is told at once; a session that
dies mid-plan touches no other; the request and reply memory holds in total."""

import contextlib
import os
import threading
import time

import pytest

from hopbench.core import control
from hopbench.core.client import Session
from hopbench.core.placement import SessionCpus
from hopbench.errors import ConfigError, HopbenchError, Refused
from tests.conftest import small_plan


def _midway(n: int):
    """A clock for Session.measure that sets an event after n readings (a plan under way)."""
    import time

    seen = threading.Event()
    count = [0]

    def clock() -> int:
        count[0] += 1
        if count[0] == n:
            seen.set()
        return time.perf_counter_ns()

    return clock, seen


@contextlib.contextmanager
def _two_sessions(srv):
    """Two live sessions against srv (both handshakes done), closed whatever happens."""
    a, b = Session(srv.host, srv.port), Session(srv.host, srv.port)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("transport", ["tcp", "zmq", "ucx"])
def test_sessions_are_served_at_once(server_factory, transport):
    if transport == "ucx":
        pytest.importorskip("ucxx")
    srv = server_factory(max_sessions=4)
    with _two_sessions(srv) as (a, b):  # both handshakes done: two sessions live
        assert srv.server.pool.peak == 2
        results = {}

        def go(name, s):
            results[name] = s.measure(small_plan(transport, cycles=200, verify=True))

        threads = [threading.Thread(target=go, args=(n, s)) for n, s in (("a", a), ("b", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert {n: m.completed for n, m in results.items()} == {"a": 206, "b": 206}
        a.bye()
        b.bye()


def test_one_more_client_than_the_limit_is_told_at_once(server_factory):
    srv = server_factory(max_sessions=2)
    with _two_sessions(srv) as (a, b):
        with pytest.raises(Refused, match=r"serving 2 sessions at once, this server's limit \(--max-sessions 2\)"):
            Session(srv.host, srv.port, timeout_s=30.0)
        assert a.measure(small_plan(cycles=10)).completed == 16 and b.measure(small_plan(cycles=10)).completed == 16


def test_a_session_killed_mid_plan_touches_no_other(server_factory):
    srv = server_factory(max_sessions=4)
    clock, midway = _midway(200)
    failed = []
    with _two_sessions(srv) as (a, b):
        def doomed():
            try:
                a.measure(small_plan(cycles=100_000), clock=clock)
            except HopbenchError as exc:
                failed.append(exc)

        t = threading.Thread(target=doomed)
        t.start()
        assert midway.wait(30)  # a's plan is under way ...
        control.shutdown(a.control)  # ... when its connection is cut
        t.join(30)
        assert failed and not t.is_alive()
        m = b.measure(small_plan(cycles=300, verify=True))  # the other session is served as before
        assert m.completed == 306 and m.error is None
        b.bye()
    srv.stop()
    assert any("error" in ln for ln in srv.lines if ln.startswith("session")), srv.lines
    assert any(ln.startswith("session") and ln.endswith("ok") for ln in srv.lines), srv.lines


def test_the_memory_budget_holds_across_sessions(server_factory):
    """Two plans of 184 KB each against a 300,000 B budget: the second is refused while the
    first runs (one line naming the budget), and accepted once it has ended."""
    srv = server_factory(max_sessions=4, max_memory_bytes=300_000)
    with _two_sessions(srv) as (a, b):
        clock, midway = _midway(50)
        result = []
        t = threading.Thread(target=lambda: result.append(a.measure(small_plan(request_bytes=184_328, cycles=3000),
                                                                    clock=clock)))
        t.start()
        assert midway.wait(30)
        with pytest.raises(Refused, match=r"busy: the plans of the other sessions hold 184336 of the server's 300000 B"):
            b.measure(small_plan(request_bytes=184_328, cycles=10))
        t.join(60)
        assert result and result[0].completed == 3006
    c = Session(srv.host, srv.port)
    try:
        assert c.measure(small_plan(request_bytes=184_328, cycles=10)).completed == 16  # the budget is back
    finally:
        c.close()


def test_log_lines_from_session_threads_never_splice():
    """print() writes a line and its newline in two calls; sessions log from their own threads,
    so the server serializes its log (CI once lost a line of protocol_barrage's count to this)."""
    import io

    out = io.StringIO()

    def two_writes(line):  # print's own shape: the text, then the newline, a thread switch between
        out.write(line)
        time.sleep(0)
        out.write("\n")
    from hopbench.core.server import Server, ServerConfig

    srv = Server(ServerConfig(host="127.0.0.1", port=0, max_sessions=4), log=two_writes)
    start = threading.Barrier(8)

    def burst(k):
        start.wait()
        for i in range(200):
            srv.log(f"session {k}-{i}")
    threads = [threading.Thread(target=burst, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    srv.stop()
    srv.listener.close()
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("session ")]
    assert len(lines) == 8 * 200 and all(ln.count("session") == 1 for ln in lines)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_session_cpus_put_each_plan_on_a_cpu_of_its_own(server_factory):
    """serve --session-cpus: while a's plan is live (held midway), b's plan goes to the
    other session CPU (the least used); each is reported in ACCEPT's transport_info, a
    server thread runs on it alone, and the CPUs are free again after. (Two CPUs suffice
    here: the allocation does not need the control CPU apart; split_control keeps it so.)"""
    every = sorted(os.sched_getaffinity(0))
    data = set(every[:2])
    cpus = SessionCpus(data, set(every))
    srv = server_factory(max_sessions=4, session_cpus=cpus)
    midway, go_on = threading.Event(), threading.Event()
    count = [0]
    masks = []

    def held() -> int:  # a's clock: stops reading at its 100th cycle until b has measured
        count[0] += 1
        if count[0] == 100:
            masks.extend(_session_thread_masks())
            midway.set()
            go_on.wait(30)
        return time.perf_counter_ns()

    got = {}
    with _two_sessions(srv) as (a, b):
        t = threading.Thread(target=lambda: got.setdefault("a", a.measure(small_plan(cycles=200), clock=held)))
        t.start()
        assert midway.wait(30)
        got["b"] = b.measure(small_plan(cycles=50))
        go_on.set()
        t.join(30)
        assert {n: m.server_info["server_cpu"] for n, m in got.items()} == {"a": min(data), "b": max(data)}
        assert {min(data)} in masks, masks  # a's session thread ran there
        assert got["a"].completed == 206 and got["b"].completed == 56
        assert cpus.load == {c: 0 for c in data}
        m = a.measure(small_plan(cycles=20))  # nothing runs now: the lowest session CPU again
        assert m.server_info["server_cpu"] == min(data)
        a.bye()
        b.bye()
    srv.stop()
    assert any(ln.startswith("session") and f"CPU {min(data)}," in ln for ln in srv.lines), srv.lines


def _session_thread_masks() -> list[set[int]]:
    """The CPU masks of this process's threads (the in-process server's among them)."""
    from hopbench.core.placement import affinity, parse_cpus

    return [parse_cpus(mask) for mask in affinity()["threads"].values()]


def test_session_cpus_are_checked_before_anything_is_pinned(monkeypatch):
    from hopbench.core.placement import split_control

    pinned = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: pinned.append(cpus))
    every = os.sched_getaffinity(0)
    with pytest.raises(ConfigError, match="leaves no CPU for the control connections"):
        split_control(",".join(map(str, sorted(every))))
    with pytest.raises(ConfigError, match=r"CPUs \[4096\] are not this machine's"):
        split_control("4096")
    with pytest.raises(ConfigError, match="expected a CPU list"):
        split_control("one")
    assert pinned == []


def test_a_second_client_is_told_at_once_that_the_server_is_busy(server):
    """Item 11: a second client waited unanswered in the accept queue until its timeout."""
    import time

    import pytest

    from hopbench.core.client import Session
    from hopbench.errors import Refused
    from tests.conftest import small_plan

    first = Session(server.host, server.port)
    try:
        t0 = time.monotonic()
        with pytest.raises(Refused, match="busy: serving another client"):
            Session(server.host, server.port, timeout_s=30.0)
        assert time.monotonic() - t0 < 10  # told at once, not after its 30 s timeout
        assert first.measure(small_plan(cycles=10)).completed == 16  # undisturbed (10 + 5 warm-up + 1 untimed)
        first.bye()
    finally:
        first.close()
    s = Session(server.host, server.port)  # and once it ends, the next client is served
    try:
        assert s.measure(small_plan(cycles=10)).completed == 16
    finally:
        s.close()


def test_a_server_stops_on_sigterm_delivered_to_another_thread(tmp_path):
    """Issue 64: on the GPU host `serve --drafter` ignored SIGTERM for 30 s and more: the signal
    reached one of CUDA's threads, and the main thread, blocked in an endless accept(), never
    ran the handler. Here the signal is sent to a helper thread on purpose."""
    import subprocess
    import sys

    script = tmp_path / "serve.py"
    script.write_text(
        "import signal, threading, time\n"
        "from hopbench.core.server import Server, ServerConfig\n"
        "srv = Server(ServerConfig(port=0), log=lambda line: print(line, flush=True))\n"
        "def poke():\n"
        "    while signal.getsignal(signal.SIGTERM) != srv._on_signal:  # serve_forever's handler is in\n"
        "        time.sleep(0.01)\n"
        "    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # to this thread, not the main one\n"
        "threading.Thread(target=poke, daemon=True).start()\n"
        "srv.serve_forever()\n"
        "print('stopped', flush=True)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0 and "server stopping" in out.stdout and "stopped" in out.stdout, out
