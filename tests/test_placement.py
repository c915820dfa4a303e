"""Placement and poll modes: recorded affinity, busy-poll equivalence, an idle server
that never spins."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hopbench.analysis import data as D
from hopbench.analysis import export as E
from hopbench.cli import app
from hopbench.core.placement import parse_cpus
from hopbench.errors import ConfigError
from hopbench.orchestration.serverproc import ready_port
from hopbench.testing import transport_or_skip
from hopbench.testing.conformance import exchange
from tests.conftest import cli
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


runner = CliRunner()


def test_run_records_the_link_and_advises_placement(server, tmp_path):
    out = tmp_path / "r"
    res = runner.invoke(app, ["run", "--peer", f"{server.host}:{server.port}", "--tokens", "3", "--cycles", "20",
                              "--warmup", "2", "--no-floor", "--link", "lab-1g,rate=1000", "--out", str(out)])
    assert res.exit_code == 0, res.output
    if len(os.sched_getaffinity(0)) <= 8:
        assert "unpinned on a" in res.output and "--cpu" in res.output
    cfg = json.loads((out / "report.json").read_text())["config"]
    assert cfg["rate_mbit"] == 1000 and cfg["rung"] == "lab-1g"
    (g,), _ = D.load_groups(out)
    assert g.rung == "lab-1g" and g.rate_mbit == 1000
    rec = E.records([g], {}, "x", "s", rid="r-1")[0]
    assert rec["rung"] == "lab-1g" and rec["rate_mbit"] == 1000


def test_the_placement_is_stated_with_every_verdict_and_compare_names_a_difference(tmp_path):
    """Item 12: 'auto' placement moved zmq/ucx small-payload latency 2-4x between the full
    and the quick sweep, and nothing said which placement a verdict stood on."""
    import json

    sweep = shutil.copytree("tests/golden/sweep-v1", tmp_path / "s")
    out = cli("verdict", sweep, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["results"][0]["placement"] == "placement: same-block"
    assert "placement: same-block" in cli("verdict", sweep).stdout
    assert cli("report", sweep).returncode == 0
    assert "placement: same-block" in (sweep / "report.html").read_text()
    cmp = cli("compare", "tests/golden/run-v1", sweep)
    assert "placement differs" in cmp.stdout + cmp.stderr
