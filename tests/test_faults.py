"""Faults mid-run: the server killed mid-cycle, the emulated link set down mid-run, the
server killed between sweep cells. The client reports one clear error, keeps every sample
measured so far in valid files, and the sweep carries on."""

import csv
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hopbench.core.client import Session
from hopbench.errors import ConnectFailed
from hopbench.orchestration import netem
from hopbench.orchestration.serverproc import ready_port

ok, why = netem.available()
CYCLES = 20000
# T1 complete (1 untimed + 2 warm-up + CYCLES) and 50 round trips of T3 under way
MID_T3 = (CYCLES + 3) * 61440 + 50 * 184320


def serve(prefix=(), host="127.0.0.1"):
    p = subprocess.Popen([*prefix, sys.executable, "-m", "hopbench", "serve", "--bind", f"{host}:0"],
                         stdout=subprocess.PIPE, text=True)
    return p, ready_port(p)


def run_until_first_payload(prefix, peer, out, timeout="3"):
    """Start a run whose second payload takes long; return once the first is reported."""
    c = subprocess.Popen([*prefix, sys.executable, "-m", "hopbench", "run", "--peer", peer, "--tokens", "1,3",
                          "--cycles", str(CYCLES), "--warmup", "2", "--timeout", timeout, "--out", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # the table row for T1 is printed after T1's files were written; T3 runs for minutes
    for line in c.stdout:
        if line.strip().startswith("T1"):
            return c
    raise AssertionError(c.stderr.read())


def wait_received(port: int, nbytes: int, netns: str | None = None, limit_s: float = 60) -> None:
    """Block until the server's end of the connection has received nbytes (read from the
    kernel with `ss`), so a fault lands mid-payload, not between payloads."""
    import time

    pre = ["ip", "netns", "exec", netns] if netns else []
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        out = subprocess.run(pre + ["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
                             capture_output=True, text=True).stdout
        got = [int(w.split(":")[1]) for w in out.split() if w.startswith("bytes_received:")]
        if got and max(got) >= nbytes:
            return
    raise AssertionError(f"server never received {nbytes} bytes")


def check_kept(out: Path, stderr: str, code: int):
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert code != 0 and len(lines) == 1 and lines[0].startswith("hopbench: error:"), stderr
    rep = json.loads((out / "report.json").read_text())
    assert rep["status"] == "error"
    assert rep["payloads"][0]["summary"]["complete"] is True
    t3 = rep["payloads"][1]
    assert t3["summary"]["complete"] is False and t3["completed_cycles"] > 0
    rows = list(csv.DictReader(open(out / "samples.csv")))
    assert len([r for r in rows if r["payload"] == "T3"]) == t3["completed_cycles"]
    return lines[0]


def test_server_killed_mid_cycle(tmp_path):
    srv, port = serve()
    out = tmp_path / "r"
    c = run_until_first_payload([], f"127.0.0.1:{port}", out, timeout="60")
    wait_received(port, MID_T3)
    srv.send_signal(signal.SIGKILL)
    srv.wait(10)
    _, err = c.communicate(timeout=60)
    line = check_kept(out, err, c.returncode)
    assert "peer" in line and "measured so far kept" in line


@pytest.mark.netns
@pytest.mark.skipif(not ok, reason=f"needs network namespaces: {why}")
def test_link_down_mid_run(tmp_path):
    with netem.Link.create() as link:
        srv, port = serve(link.exec_prefix("server"), link.server_addr)
        try:
            out = tmp_path / "r"
            c = run_until_first_payload(link.exec_prefix("client"), f"{link.server_addr}:{port}", out)
            wait_received(port, MID_T3, link.server_ns)
            subprocess.run(["ip", "-n", link.client_ns, "link", "set", f"{link.name}b", "down"], check=True)
            _, err = c.communicate(timeout=60)
        finally:
            srv.kill()
            srv.wait(10)
    line = check_kept(out, err, c.returncode)
    assert "timed out" in line or "unreachable" in line


@pytest.mark.slow
def test_server_killed_between_sweep_cells(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text((Path(__file__).parent / "data" / "sweep-tiny.toml").read_text()
                   .replace('rungs = ["loopback", "emu-unshaped", "emu-1g"]', 'rungs = ["loopback"]')
                   .replace('transports = ["tcp", "zmq", "ucx"]', 'transports = ["tcp"]'))
    out = tmp_path / "sweep"
    p = subprocess.Popen([sys.executable, "-m", "hopbench", "sweep", str(cfg), "--out", str(out), "--no-analyse"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in p.stdout:
        if line.startswith("rung loopback:"):
            m = re.search(r"server 127\.0\.0\.1:(\d+) \(pid (\d+)\)", line)
            port, pid = int(m.group(1)), int(m.group(2))
            break
    # kill the sweep's own server (the pid it printed) as soon as it is up: the next
    # cells meet a dead server
    os.kill(pid, signal.SIGKILL)
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 0, stderr[-2000:]
    state = json.loads((out / "sweep.json").read_text())
    assert state["status"] == "complete" and state["server_restarts"]
    restart = state["server_restarts"][0]
    assert restart["error"] and restart["cell"].startswith("loopback/tcp/")
    with pytest.raises(ConnectFailed):  # the server that died is gone; the sweep used a new one
        Session("127.0.0.1", port, connect_timeout_s=1)
