"""Placement and poll modes: recorded affinity, busy-poll equivalence, an idle server
that never spins."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hopbench.core.placement import parse_cpus
from hopbench.errors import ConfigError
from hopbench.orchestration.serverproc import ready_port
from hopbench.testing import transport_or_skip
from hopbench.testing.conformance import exchange
from tests.test_conformance import TRANSPORTS

CPUS = sorted(os.sched_getaffinity(0))


def test_parse_cpus():
    assert parse_cpus("0") == {0} and parse_cpus("0,2") == {0, 2} and parse_cpus("1-3") == {1, 2, 3}
    with pytest.raises(ConfigError, match="CPU list"):
        parse_cpus("a")


def start_server(*extra):
    p = subprocess.Popen([sys.executable, "-m", "hopbench", "serve", "--bind", "127.0.0.1:0", *extra],
                         stdout=subprocess.PIPE, text=True)
    return p, ready_port(p)


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs")
def test_affinity_recorded_on_both_ends(tmp_path):
    srv, port = start_server("--cpu", str(CPUS[1]))
    try:
        out = tmp_path / "r"
        r = subprocess.run([sys.executable, "-m", "hopbench", "run", "--peer", f"127.0.0.1:{port}", "--tokens", "1",
                            "--cycles", "20", "--warmup", "2", "--cpu", str(CPUS[0]), "--transport", "zmq",
                            "--out", str(out)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    finally:
        srv.terminate()
        srv.wait(10)
    rep = json.loads((out / "report.json").read_text())
    assert rep["client_env"]["cpu_affinity"] == [CPUS[0]] and rep["server_env"]["cpu_affinity"] == [CPUS[1]]
    # every thread, ZeroMQ's I/O thread included, inherited the mask
    threads = rep["client_affinity"]["threads"]
    assert len(threads) >= 2 and set(threads.values()) == {str(CPUS[0])}


@pytest.mark.parametrize("name", TRANSPORTS)
def test_busy_poll_is_byte_identical(name):
    import threading

    from hopbench.core.transport import TransportOptions

    t = transport_or_skip(name)
    opts = TransportOptions(timeout_s=5, poll="busy")
    lst = t.listen("127.0.0.1", 0, opts)
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("s", lst.accept(10)))
    th.start()
    c = t.connect("127.0.0.1", lst.address[1], opts)
    th.join()
    lst.close()
    try:
        assert c.info["poll"] == "busy"
        exchange((c, box["s"]), [(n, n) for n in (1, 64, 61440, 184320, 1 << 20)] + [(184320, 8)] * 10)
    finally:
        c.close()
        box["s"].close()


def cpu_seconds(pid):
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def test_idle_busy_poll_server_does_not_spin():
    srv, port = start_server("--poll", "busy")
    try:
        # one session first, so the server has been through a busy-polled session
        from hopbench.core import protocol as P
        from hopbench.core.client import Session

        s = Session("127.0.0.1", port)
        s.measure(P.Plan("tcp", 64, 8, 2, 4, 50, 5))
        s.close()
        c0, t0 = cpu_seconds(srv.pid), time.monotonic()
        time.sleep(2.0)  # the measurement window itself, not synchronisation
        used = cpu_seconds(srv.pid) - c0
        assert used < 0.05 * (time.monotonic() - t0), f"idle server used {used:.2f} CPU s"
    finally:
        srv.terminate()
        srv.wait(10)
