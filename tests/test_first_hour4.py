"""The first hour, fourth pass (issue 51): a name never escapes its results folder, IPv6
beyond TCP, a streamed run that says how long it will take and when its schedule was not
kept."""

import socket
import subprocess
import sys

import pytest

from hopbench import results as R
from hopbench.core.client import Session
from tests.conftest import ServerThread, small_plan


def _run(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "hopbench", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("name", ["../../escape", "lab/1g", "x" * 300, "..", ""])
def test_a_name_makes_one_folder_inside_the_results_folder(tmp_path, name):
    root = tmp_path / "res"
    folder = R.new_folder(root, name)
    assert folder.parent == root and "/" not in folder.name and len(folder.name) < 120, folder
    assert not folder.name.split("-", 1)[1].startswith(".")


def test_a_run_named_to_escape_writes_inside_its_results_folder(server, tmp_path):
    out = _run("run", "--peer", f"{server.host}:{server.port}", "--tokens", "1", "--cycles", "5", "--warmup", "1",
               "--no-floor", "--results-dir", str(tmp_path / "res"), "--name", "../../escape")
    assert out.returncode == 0, out.stderr
    assert [p.parent for p in (tmp_path / "res").iterdir()] == [tmp_path / "res"]
    assert not (tmp_path / "escape").exists() and not (tmp_path.parent / "escape").exists()


def _ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6(), reason="no IPv6 loopback here")
@pytest.mark.parametrize("transport", ["tcp", pytest.param("zmq", marks=pytest.mark.zmq)])
def test_tcp_and_zmq_run_over_ipv6(transport):
    from tests.test_protocol_contract import _need

    _need(transport)
    st = ServerThread(host="::1")
    try:
        with Session("::1", st.port) as s:
            m = s.measure(small_plan(transport, cycles=20))
            s.bye()
        assert m.completed == m.plan.total
    finally:
        st.stop()


@pytest.mark.skipif(not _ipv6(), reason="no IPv6 loopback here")
@pytest.mark.ucx
def test_ucx_over_ipv6_is_refused_in_one_line_naming_why():
    from tests.test_protocol_contract import _need

    _need("ucx")
    st = ServerThread(host="::1")
    try:
        out = _run("run", "--peer", f"[::1]:{st.port}", "--transport", "ucx", "--tokens", "1", "--cycles", "5",
                   "--no-floor", "--results-dir", "/tmp/hopbench-ipv6-test")
        assert out.returncode != 0 and "binds IPv4 only" in out.stderr and "Traceback" not in out.stderr, out.stderr
    finally:
        st.stop()


def test_a_streamed_run_says_how_long_and_when_its_schedule_was_not_kept(server, tmp_path):
    peer = f"{server.host}:{server.port}"
    out = _run("run", "--peer", peer, "--stream", "layers", "--forward-ms", "0.001", "--cycles", "30", "--no-floor",
               "--results-dir", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "the schedule could not be kept" in out.stderr, out.stdout + out.stderr
    from hopbench.orchestration.runjob import RunRequest, plan, scheduled_s

    loads, cfg = plan(RunRequest(host="h", port=1, transport="tcp", stream="layers", forward_ms=100000.0, cycles=2))
    assert scheduled_s(loads, cfg) > 30 * 60  # 2 streamed payloads x 13 cycles x 100 s


@pytest.mark.parametrize("sent, says", [
    # the end message before the last chunk: read as chunk 1, its counter the end's seq
    (lambda P: P.SEQ.pack(0) + bytes(56) + P.STREAM_END.pack(0, 0, 0) + bytes(48),
     "chunk 1 of cycle 0 carries counter 0, expected 1"),
    # one chunk too many: read as the end message, its seq the chunk's counter
    (lambda P: P.SEQ.pack(0) + bytes(56) + P.SEQ.pack(1) + bytes(56) + P.SEQ.pack(2) + bytes(56),
     "the end message of cycle 0 carries seq 2"),
])
def test_a_streamed_plans_faults_are_answered_as_protocol_md_says(server, sent, says):
    """docs/PROTOCOL.md "Streamed plans": the table of what the drafter answers, on tcp."""
    from hopbench.core import protocol as P
    from tests.specpeer import SpecClient

    c = SpecClient(server.host, server.port)
    c.handshake()
    c.send_frame(P.PLAN, P.Plan("tcp", 2 * 64, 8, 2, 4, 5, 1, stream=P.StreamPlan(2, 64)).to_wire())
    assert c.recv_frame()[0] == P.ACCEPT
    c.sock.sendall(sent(P))
    assert c.read_abort(c.recv_exact(8), 8) == says
    with Session(server.host, server.port) as s:  # and the next client is served
        m = s.measure(small_plan(cycles=5))
        assert m.completed == m.plan.total


def test_a_long_plan_reports_its_cycles_as_they_complete(server, tmp_path, monkeypatch):
    from hopbench.orchestration import runner
    from hopbench.orchestration.runjob import RunRequest, plan

    monkeypatch.setattr(runner, "PROGRESS_EVERY_S", 0.05)
    loads, cfg = plan(RunRequest(host=server.host, port=server.port, transport="tcp", tokens="1", cycles=40,
                                 warmup=2, gap_ms=10.0, floor=False))
    seen = []
    runner.run_session(server.host, server.port, loads[:1], cfg, folder=tmp_path,
                       hooks=runner.SessionHooks(on_progress=lambda *a: seen.append(a)))
    assert seen, "a 0.4 s plan reported nothing at 0.05 s intervals"
    total = 40 + 2 + 1
    assert all(label == loads[0].label and t == total and 0 <= d <= total for label, d, t, _ in seen)
    assert [d for _, d, _, _ in seen] == sorted(d for _, d, _, _ in seen) and seen[-1][1] > 0
    line = runner.progress_line(*seen[-1])
    assert f"{seen[-1][1]}/{total} cycles" in line and ("left" in line or seen[-1][1] == 0)
