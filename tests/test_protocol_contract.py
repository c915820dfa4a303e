"""The protocol as a contract (docs/PROTOCOL.md): peers written only from the document
(tests/specpeer.py) against the real ones, impostors refused, every malformed or
out-of-state frame answered with one ERROR/REFUSE and one log line, aborts on the data
stream carrying their reason on every transport."""

import json
import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hopbench.core import protocol as P
from hopbench.core.client import Session
from hopbench.core.transport import TransportOptions, get_transport
from hopbench.errors import PeerError, ProtocolError, Refused
from tests.conftest import small_plan
from tests.specpeer import SpecClient, SpecServer

SECRET = "correct horse"


def test_spec_client_against_the_real_server(server_factory):
    for secret in (None, SECRET):
        srv = server_factory(secret=secret)
        c = SpecClient(srv.host, srv.port)
        hello = c.handshake(secret)
        assert hello["protocol"] == P.VERSION and ("env" in hello) == (secret is None)
        t, accept = c.plan()
        assert t == P.ACCEPT and accept["data_port"] is None
        c.cycles(184320, 8, 2, 4, 1 + 3 + 20)
        c.send_frame(P.BYE)
        assert c.closed(), "the server closes after BYE"


def test_real_client_against_the_spec_server():
    for secret in (None, SECRET):
        spec = SpecServer(secret=secret)
        s = Session("127.0.0.1", spec.port, secret=secret)
        m = s.measure(small_plan(cycles=20))
        assert m.completed == m.plan.total
        s.bye()
        spec.close()
        hello = spec.seen[0][1]
        assert ("env" in hello) == (secret is None)  # a secret holder sends only a minimal HELLO


def test_an_impostor_server_is_refused_before_anything_crosses():
    spec = SpecServer(mode="impostor", secret=SECRET)
    with pytest.raises(Refused, match="does not authenticate"):
        Session("127.0.0.1", spec.port, secret=SECRET)
    spec.close()
    t, hello = spec.seen[0]
    assert t == P.HELLO and set(hello) == {"protocol", "role", "software"}  # no environment before auth
    assert [t for t, _ in spec.seen] == [P.HELLO]  # nothing after: no PLAN was measured


def test_an_impostor_client_is_refused(server_factory):
    srv = server_factory(secret=SECRET)
    c = SpecClient(srv.host, srv.port)
    c.send_frame(P.HELLO, {"protocol": P.VERSION, "role": "client", "software": "impostor"})
    t, hello = c.recv_frame()
    assert t == P.HELLO and "env" not in hello and hello["auth"]["challenge"]
    c.send_frame(P.PLAN, {"transport": "tcp", "request_bytes": 64, "reply_bytes": 8, "k": 2, "id_bytes": 4,
                          "cycles": 5, "warmup": 0})
    t, err = c.recv_frame()
    assert t == P.ERROR and "unexpected PLAN in state AWAIT_AUTH" in err["reason"]
    assert c.closed()
    # a forged MAC with non-ASCII text is an ERROR (bad form), not a traceback
    c = SpecClient(srv.host, srv.port)
    c.send_frame(P.HELLO, {"protocol": P.VERSION, "role": "client", "software": "impostor"})
    c.recv_frame()
    c.send_frame(P.AUTH, {"nonce": "é" * 32, "mac": "ü" * 64})
    t, err = c.recv_frame()
    assert t == P.ERROR and "nonce" in err["reason"]
    s = Session(srv.host, srv.port, secret=SECRET)  # and the server serves the next client
    assert s.measure(small_plan(cycles=5)).completed == 11
    s.bye()
    assert not any("internal error" in line for line in srv.lines)


def test_a_server_abort_reaches_the_client_with_its_reason():
    spec = SpecServer(mode="abort")
    s = Session("127.0.0.1", spec.port)
    with pytest.raises(PeerError, match="out of draft slots") as info:
        s.measure(small_plan(cycles=20))
    assert info.value.measurement.completed == 5  # the 5 round trips before the abort are kept
    s.close()
    spec.close()


@pytest.mark.parametrize("mode,match", [("tail", "non-zero bytes after the 2 ids"), ("linger", "sent data after BYE")])
def test_the_client_reports_what_a_server_must_not_do(mode, match):
    spec = SpecServer(mode=mode)
    s = Session("127.0.0.1", spec.port)
    with pytest.raises(ProtocolError, match=match):
        s.measure(small_plan(cycles=5, reply_bytes=16))
        s.bye()
    s.close()
    spec.close()


def _data_channel(srv, transport: str, plan: P.Plan):
    """A real session's control connection plus the plan's data channel, driven by hand."""
    s = Session(srv.host, srv.port)
    P.send_msg(s.control, P.PLAN, plan.to_wire())
    _, accept = P.recv_msg(s.control, P.ACCEPT)
    if transport == "tcp":
        return s, s.control
    t = get_transport(transport)
    return s, t.connect(srv.host, accept["data_port"], TransportOptions(timeout_s=10))


TRANSPORTS = ["tcp", pytest.param("zmq", marks=pytest.mark.zmq), pytest.param("ucx", marks=pytest.mark.ucx)]


def _need(transport):
    try:
        get_transport(transport)
    except Exception as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_server_aborts_a_bad_request_on_the_data_stream(server, transport):
    _need(transport)
    plan = small_plan(transport=transport, request_bytes=64, reply_bytes=8, cycles=10)
    s, data = _data_channel(server, transport, plan)
    req = bytearray(64)
    P.SEQ.pack_into(req, 0, 7)  # the server expects seq 0
    data.send(req)
    reply = bytearray(8)
    data.recv_into(reply)
    assert P.is_abort(reply)
    assert P.read_abort(data, reply) == "request carries seq 7, expected 0"
    if data is not s.control:
        data.close()
    s.close()
    s2 = Session(server.host, server.port)  # served on
    assert s2.measure(small_plan(transport=transport, cycles=5)).completed == 11
    s2.bye()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_client_abort_ends_the_plan_cleanly(server, transport):
    _need(transport)
    plan = small_plan(transport=transport, request_bytes=64, reply_bytes=8, cycles=10)
    s, data = _data_channel(server, transport, plan)
    P.send_abort(data, "the target stopped decoding", 64)
    # the session goes on: the next plan on the same control connection is measured
    if data is not s.control:
        data.close()
    m = s.measure(small_plan(transport=transport, cycles=5))
    assert m.completed == 11
    s.bye()
    assert any("client aborted plan at seq 0: the target stopped decoding" in line for line in server.lines)


# ---- the state machine and malformed bodies: one ERROR/REFUSE each, never a traceback ----

HELLO_OK = {"protocol": P.VERSION, "role": "client", "software": "t"}
PLAN_OK = {"transport": "tcp", "request_bytes": 64, "reply_bytes": 8, "k": 2, "id_bytes": 4, "cycles": 5, "warmup": 0}


def _exchange(srv, frames, secret=None):
    """Send frames (type, body-object-or-raw-bytes) in order, reading the server's answer
    after each HELLO; returns the last frame the server sent and whether it then closed."""
    c = SpecClient(srv.host, srv.port)
    last = None
    for i, (t, body) in enumerate(frames):
        if isinstance(body, bytes):
            c.send_frame(t, raw=body)
        else:
            c.send_frame(t, body)
        if i == 0 and len(frames) > 1:  # the server's HELLO
            assert c.recv_frame()[0] == P.HELLO
    last = c.recv_frame()
    return last, c.closed()


@pytest.mark.parametrize("frames,want,reason", [
    ([(P.PLAN, PLAN_OK)], P.ERROR, "unexpected PLAN in state AWAIT_HELLO"),
    ([(P.AUTH, {"nonce": "0" * 32, "mac": "0" * 64})], P.ERROR, "unexpected AUTH in state AWAIT_HELLO"),
    ([(P.HELLO, HELLO_OK), (P.HELLO, HELLO_OK)], P.ERROR, "unexpected HELLO in state READY"),
    ([(P.HELLO, HELLO_OK), (P.ACCEPT, {"data_port": None, "transport_info": {}})], P.ERROR, "unexpected ACCEPT"),
    ([(P.HELLO, HELLO_OK), (P.REFUSE, {"reason": "x"})], P.ERROR, "unexpected REFUSE"),
    ([(P.HELLO, HELLO_OK), (P.PLAN, {**PLAN_OK, "request_bytes": 10**30})], P.ERROR, "request_bytes"),
    ([(P.HELLO, HELLO_OK), (P.PLAN, {**PLAN_OK, "request_bytes": 1 << 40})], P.REFUSE, "exceeds the server cap"),
    ([(P.HELLO, HELLO_OK), (P.PLAN, {**PLAN_OK, "verify": True})], P.ERROR, "payload_crc32"),
    ([(P.HELLO, HELLO_OK), (P.PLAN, {**PLAN_OK, "extra": 1})], P.ERROR, "unknown key 'extra'"),
    ([(P.HELLO, HELLO_OK), (P.PLAN, {k: v for k, v in PLAN_OK.items() if k != "k"})], P.ERROR, "missing key 'k'"),
    ([(P.HELLO, HELLO_OK), (P.PLAN, b"[1, 2]")], P.ERROR, "not an object"),
    ([(P.HELLO, HELLO_OK), (P.PLAN, b'{"a":' * 5000)], P.ERROR, "nests too deeply"),
    ([(P.HELLO, HELLO_OK), (P.PLAN, b'{"k": ' + b"9" * 5000 + b"}")], P.ERROR, "not valid JSON"),
    ([(P.HELLO, HELLO_OK), (P.PLAN, b'{"k": NaN}')], P.ERROR, "not valid JSON"),
    ([(P.HELLO, HELLO_OK), (P.PLAN, b"\xff\xfe")], P.ERROR, "not UTF-8"),
    ([(P.HELLO, HELLO_OK), (P.BYE, {"x": 1})], P.ERROR, "BYE must have an empty body"),
    ([(P.HELLO, {**HELLO_OK, "protocol": 1})], P.REFUSE, "protocol version 1 not supported"),
    ([(P.HELLO, {**HELLO_OK, "role": "server"})], P.ERROR, "'role' must be one of client"),
])
def test_the_state_machine_answers_every_wrong_frame(server, frames, want, reason):
    (t, body), closed = _exchange(server, frames)
    assert t == want and reason in body["reason"], body
    assert closed
    assert not any("internal error" in line for line in server.lines)


json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
json_any = st.recursive(json_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=4),
                        max_leaves=10)
plan_like = st.dictionaries(st.sampled_from(sorted(P.SCHEMAS["PLAN"]) + ["x", ""]), json_any, max_size=12)
bodies = st.one_of(
    st.binary(max_size=64),
    plan_like.map(lambda d: json.dumps(d).encode()),
    json_any.map(lambda v: json.dumps(v).encode()),
    st.integers(1, 3000).map(lambda n: b"[" * n),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(state=st.sampled_from(["AWAIT_HELLO", "AWAIT_AUTH", "READY"]), t=st.sampled_from(sorted(P.TYPE_NAMES)),
       body=bodies)
def test_malformed_bodies_get_one_answer_each(server_factory, state, t, body):
    srv = _servers.setdefault(state, server_factory(secret=SECRET if state == "AWAIT_AUTH" else None))
    c = SpecClient(srv.host, srv.port)
    if state != "AWAIT_HELLO":
        c.send_frame(P.HELLO, HELLO_OK)
        c.recv_frame()
    c.send_frame(t, raw=body)
    answers = []
    c.sock.settimeout(5)
    try:
        while True:
            answers.append(c.recv_frame())
    except (EOFError, ConnectionResetError, socket.timeout):
        pass
    # one ERROR or REFUSE and a close; a well-formed PLAN may be accepted (or a HELLO
    # answered); a client's own well-formed ERROR ends the session without an answer
    kinds = [a[0] for a in answers]
    assert (kinds in ([P.ERROR], [P.REFUSE], [P.ACCEPT])
            or (state == "AWAIT_HELLO" and t == P.HELLO and kinds[:1] == [P.HELLO])
            or (t == P.ERROR and kinds == [])
            or (state == "READY" and t == P.BYE and body == b"" and kinds == [])), (kinds, answers)
    assert not any("internal error" in line for line in srv.lines)


_servers: dict = {}


@pytest.fixture(autouse=True)
def _fresh_servers():
    _servers.clear()
    yield
    _servers.clear()


@pytest.mark.slow
def test_barrage_of_malformed_frames_against_a_real_server():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, str(root / "benchmarks" / "protocol_barrage.py"), "600"],
                       capture_output=True, text=True, timeout=300, cwd=root)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tracebacks in the server's stderr: 0" in r.stdout
