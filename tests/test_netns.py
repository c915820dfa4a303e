"""Two hosts on one machine: server and client in two network namespaces joined by a
veth pair, created and removed by the tests. Skipped (with the reason) without root/ip."""

import json
import subprocess
import sys

import pytest

from hopbench.orchestration import netem
from hopbench.orchestration.serverproc import ready_port

ok, why = netem.available()
pytestmark = [pytest.mark.netns, pytest.mark.skipif(not ok, reason=f"needs network namespaces: {why}")]


def start_server(link, *extra):
    proc = subprocess.Popen(link.exec_prefix("server") + [sys.executable, "-m", "hopbench", "serve", "--bind",
                            f"{link.server_addr}:0", *extra], stdout=subprocess.PIPE, text=True)
    return proc, ready_port(proc)


@pytest.mark.parametrize("transport", ["tcp", pytest.param("zmq", marks=pytest.mark.zmq),
                                       pytest.param("ucx", marks=pytest.mark.ucx),
                                       pytest.param("nixl", marks=pytest.mark.nixl)])
def test_two_hosts_run(tmp_path, transport):
    from hopbench.core.transport import get_transport
    from hopbench.errors import TransportUnavailable

    try:
        get_transport(transport)
    except TransportUnavailable as exc:
        pytest.skip(str(exc))
    with netem.Link.create() as link:
        srv, port = start_server(link, "--opt", "UCX_TLS=tcp", "--opt", "NIXL_UCX_TLS=tcp")
        try:
            out = tmp_path / "r"
            cmd = link.exec_prefix("client") + [sys.executable, "-m", "hopbench", "run", "--peer",
                                                f"{link.server_addr}:{port}", "--tokens", "1,3", "--k", "2",
                                                "--cycles", "50", "--warmup", "5", "--transport", transport,
                                                "--out", str(out), "--opt", "UCX_TLS=tcp", "--opt", "NIXL_UCX_TLS=tcp"]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
        finally:
            srv.terminate()
            srv.wait(10)
    import csv

    summary = list(csv.DictReader(open(out / "summary.csv")))
    assert [(s["request_bytes"], s["reply_bytes"]) for s in summary] == [("61440", "8"), ("184320", "8")]
    timed = [s for s in csv.DictReader(open(out / "samples.csv")) if s["phase"] == "timed"]
    assert len(timed) == 100
    rep = json.loads((out / "report.json").read_text())
    assert rep["client_env"]["route"]["interface"]["name"] == f"{link.name}b"
    assert rep["server_env"]["netns"] == link.server_ns and rep["client_env"]["netns"] == link.client_ns
    assert rep["payloads"][0]["data_channel"]["transport"] == transport
    if transport == "nixl":  # NIXL's own UCX moved the bytes over the veth, by TCP as asked
        lanes = " ".join(rep["payloads"][0]["data_channel"]["selected"])
        assert f"tcp/{link.name}b" in lanes and "cma" not in lanes, lanes
    assert not netem.leftovers() or all(not ns.startswith(link.name) for ns in netem.leftovers())


def test_shaped_link_records_qdisc_and_tears_down():
    link = netem.Link.create(rate_mbit=100)
    try:
        d = link.describe()
        assert "tbf" in d["qdisc"][f"{link.name}a"] and "rate 100Mbit" in d["qdisc"][f"{link.name}b"]
    finally:
        link.destroy()
    assert not any(ns.startswith(link.name) for ns in netem.leftovers())
    assert link.name not in subprocess.run(["ip", "link"], capture_output=True, text=True).stdout


def test_teardown_after_failure_mid_setup(monkeypatch):
    calls = {"n": 0}
    real = netem._run

    def failing(cmd, check=True):
        calls["n"] += 1
        if cmd[:3] == ["ip", "-n", cmd[2]] and "addr" in cmd:
            raise netem.NetnsUnavailable("planted failure")
        return real(cmd, check)

    monkeypatch.setattr(netem, "_run", failing)
    before = set(netem.leftovers())
    with pytest.raises(netem.NetnsUnavailable, match="planted"):
        netem.Link.create(rate_mbit=1000)
    monkeypatch.setattr(netem, "_run", real)
    assert set(netem.leftovers()) == before
