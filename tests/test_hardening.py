"""Authentication, interrupted runs, and property tests over every parser of bytes that
come from the network; a run's name never escapes its results folder."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hopbench import results as R
from hopbench.core import auth
from hopbench.core import protocol as P
from hopbench.core.client import Session
from hopbench.errors import HopbenchError, ProtocolError, Refused
from hopbench.orchestration.runner import SessionHooks, run_session
from hopbench.records import Payload, RunConfig
from hopbench.testing import fake_transport as fake
from tests.conftest import ServerThread, cli, serve_process, small_plan


def test_secret_accepted_refused_and_missing(server_factory):
    srv = server_factory(secret="s3cret")
    s = Session(srv.host, srv.port, secret="s3cret")
    assert s.server_env.get("kernel")  # the full environment only after authentication
    assert s.measure(small_plan(cycles=5)).completed == 11
    s.close()
    with pytest.raises(Refused, match="authentication failed"):
        Session(srv.host, srv.port, secret="wrong")
    with pytest.raises(Refused, match="requires a secret"):
        Session(srv.host, srv.port)
    s = Session(srv.host, srv.port, secret="s3cret")  # still serving
    s.close()
    assert any("authentication failed" in line for line in srv.lines)


def test_secret_never_crosses_the_wire():
    a, b = fake.pair()
    P.send_msg(a, P.AUTH, {"nonce": "ab", "mac": auth.auth_mac("topsecret", "client", "cd", "ab")})
    header = bytearray(16)
    b.recv_into(header)
    body = bytearray(P.unpack_header(bytes(header))[1])
    b.recv_into(body)
    assert b"topsecret" not in bytes(body)


def test_ctrl_c_mid_payload_keeps_samples():
    st_ = ServerThread()
    try:
        s = Session(st_.host, st_.port)
        calls = {"n": 0}

        def clock():
            calls["n"] += 1
            if calls["n"] > 40:  # 20 cycles in, the user hits Ctrl-C
                raise KeyboardInterrupt
            return calls["n"]

        with pytest.raises(KeyboardInterrupt):
            s.measure(small_plan(cycles=100, warmup=0), clock=clock)
        m = s.measured  # the typed carrier of what was measured before the interrupt
        assert m.completed == 20 and (m.samples_ns[:20] == 1).all() and m.error
        s.control.close()
    finally:
        st_.stop()


def test_run_interrupted_between_payloads_is_marked_incomplete(server, tmp_path):
    out = tmp_path / "r"
    out.mkdir()

    def interrupt(summary):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_session(server.host, server.port, [Payload("T1", 1, 61440, 8), Payload("T2", 2, 122880, 8)],
                    RunConfig("tcp", k=2, id_bytes=4, cycles=20, warmup=2), folder=out, hooks=SessionHooks(on_payload=interrupt))
    rep = json.loads((out / "report.json").read_text())
    assert rep["status"] == "incomplete" and len(rep["payloads"]) == 1


def test_a_disk_that_fills_mid_run_is_one_error_and_keeps_what_was_written(server, tmp_path, monkeypatch):
    """Issue 62: a full disk was a 71-line double traceback and report.json left "running".
    Now the write that fails is one DiskFull naming the file; report.json (the last one written
    whole, its payloads those of the CSVs beside it) says error with the reason."""
    import errno

    out = tmp_path / "r"
    out.mkdir()
    from hopbench import files

    real, writes = files._write_replacing, []

    def filling(path, data, mode):  # the second payload's samples.csv finds the disk full
        writes.append(path.name)
        if writes.count("samples.csv") == 2 and path.name == "samples.csv":
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data, mode)

    monkeypatch.setattr(files, "_write_replacing", filling)
    with pytest.raises(R.DiskFull, match=r"samples.csv: not written, no space left on device") as got:
        run_session(server.host, server.port, [Payload("T1", 1, 61440, 8), Payload("T2", 2, 122880, 8)],
                    RunConfig("tcp", k=2, id_bytes=4, cycles=20, warmup=2), folder=out)
    assert "\n" not in str(got.value)
    rep = json.loads((out / "report.json").read_text())
    assert rep["status"] == "error" and "no space left" in rep["error"] and len(rep["payloads"]) == 1
    rows = (out / "samples.csv").read_text().splitlines()
    assert len(rows) == 1 + 1 + 2 + 20 and all(r.startswith("T1,") for r in rows[1:])  # T1's, whole
    assert writes.count("samples.csv") == 2  # nothing written again after the disk filled


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=16, max_size=16))
def test_header_parser_never_crashes(data):
    try:
        t, n = P.unpack_header(data)
        assert t in P.TYPE_NAMES and 0 <= n <= P.MAX_BODY
    except ProtocolError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_body_parser_never_crashes(data):
    try:
        assert isinstance(P.decode_body(data), dict)
    except ProtocolError:
        pass


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                           max_leaves=8)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["transport", "request_bytes", "reply_bytes", "k", "id_bytes", "cycles", "warmup",
                                        "verify", "payload_crc32", "gap_ms", "transport_settings", "x"]), json_values))
def test_plan_parser_validates_or_raises(obj):
    try:
        plan = P.Plan.from_wire(obj)
    except ProtocolError:
        return
    caps = P.Caps()
    reason = caps.check(plan)  # a parsed plan is always safe to check, and accepted exactly when sane
    sane = (plan.request_bytes >= P.SEQ_BYTES and plan.request_bytes <= caps.max_request_bytes
            and plan.id_bytes in P.ID_CODES and 1 <= plan.k <= 64 and plan.reply_bytes >= plan.k * plan.id_bytes
            and plan.reply_bytes <= caps.max_reply_bytes and plan.cycles >= 1 and plan.total <= caps.max_cycles)
    assert (reason is None) == sane, (plan, reason)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_recv_msg_on_arbitrary_stream(data):
    """Feed arbitrary bytes as a control stream: a clean frame, or a HopbenchError."""
    a, b = fake.pair(timeout_s=0.05)
    # the fake transport keeps message boundaries; split like the protocol would
    a.send(data[:16].ljust(16, b"\0"))
    if len(data) > 16:
        a.send(data[16:])
    try:
        P.recv_msg(b, *P.TYPE_NAMES)
    except HopbenchError:
        pass


def test_export_killed_mid_write_leaves_previous_file_intact(tmp_path):
    """SIGKILL the exporting process after it wrote (and fsynced) the new temporary file
    but before the rename: the previous file must be intact and valid."""

    path = tmp_path / "case-studies.json"
    original = {"runs": [{"id": "keep", "p50_ms": 1.0}], "other": {"nested": [1, 2, 3]}}
    path.write_text(json.dumps(original))
    script = f"""
import os, signal, sys
sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
import hopbench.results as R
from hopbench.analysis import export as E
real_replace = os.replace
def die(*a):
    os.kill(os.getpid(), signal.SIGKILL)
R.os.replace = die
E.upsert({str(path)!r}, [{{"id": "new-%d" % i, "p50_ms": i}} for i in range(50000)])
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert r.returncode == -9
    assert json.loads(path.read_text()) == original
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != path.name]
    assert all(n.startswith(".case-studies.json.") for n in leftovers)  # only a stray temp file, never the target


def test_atomic_write_keeps_or_sets_a_normal_mode(tmp_path):
    import stat

    from hopbench.results import atomic_write

    new = tmp_path / "new.json"
    atomic_write(new, "{}")
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~_umask()
    old = tmp_path / "old.json"
    old.write_text("{}")
    os.chmod(old, 0o640)
    atomic_write(old, '{"a": 1}')
    assert stat.S_IMODE(old.stat().st_mode) == 0o640 and json.loads(old.read_text()) == {"a": 1}


def _umask():
    u = os.umask(0)
    os.umask(u)
    return u


def test_secret_from_the_environment_covers_the_floor_too(tmp_path):
    srv, port = serve_process(env={"HOPBENCH_SECRET": "s3"})
    try:
        r = cli("run", "--peer", f"127.0.0.1:{port}", "--tokens", "1", "--cycles", "20", "--warmup", "2",
               "--out", str(tmp_path / "r"), env={"HOPBENCH_SECRET": "s3"})
    finally:
        srv.terminate()
        srv.wait(10)
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert rep["status"] == "complete" and rep["floor"]["n"] == 20


@pytest.mark.parametrize("name", ["../../escape", "lab/1g", "x" * 300, "..", ""])
def test_a_name_makes_one_folder_inside_the_results_folder(tmp_path, name):
    root = tmp_path / "res"
    folder = R.new_folder(root, name)
    assert folder.parent == root and "/" not in folder.name and len(folder.name) < 120, folder
    assert not folder.name.split("-", 1)[1].startswith(".")


def test_a_run_named_to_escape_writes_inside_its_results_folder(server, tmp_path):
    out = cli("run", "--peer", f"{server.host}:{server.port}", "--tokens", "1", "--cycles", "5", "--warmup", "1",
               "--no-floor", "--results-dir", str(tmp_path / "res"), "--name", "../../escape")
    assert out.returncode == 0, out.stderr
    assert [p.parent for p in (tmp_path / "res").iterdir()] == [tmp_path / "res"]
    assert not (tmp_path / "escape").exists() and not (tmp_path.parent / "escape").exists()
