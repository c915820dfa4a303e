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
        assert c.done() == 1 + 3 + 20  # DONE: the server served every cycle
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
        if secret:  # nothing about the client before the server's proof: AUTH has no env, ENV follows it
            assert [t for t, _ in spec.seen[:3]] == [P.HELLO, P.AUTH, P.ENV] and set(spec.seen[1][1]) == {"nonce", "mac"}


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
    with pytest.raises(PeerError, match="out of draft slots"):
        s.measure(small_plan(cycles=20))
    assert s.measured.completed == 5  # the 5 round trips before the abort are kept (Session.measured)
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


class Relay:
    """A man in the middle without the secret: passes bytes both ways until the client's
    ENV has gone through, then cuts the server off and answers as `mode` says:
    "control" answers the PLAN itself (ACCEPT, then the tcp cycles); "cycles" passes the
    control frames on but answers the tcp cycles itself."""

    def __init__(self, upstream: tuple[str, int], mode: str):
        import threading

        self.upstream, self.mode = upstream, mode
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._run, daemon=True).start()

    def _frame(self, sock) -> bytes:
        head = _exact(sock, 16)
        _, _, t, n, _ = P.HEADER.unpack(head)
        return head + _exact(sock, n + P.TAG_BYTES)  # past AUTH every frame carries its tag

    def _run(self) -> None:
        import struct

        client, _ = self.listener.accept()
        server = socket.create_connection(self.upstream)
        try:
            for src, dst in ((client, server), (server, client), (client, server), (server, client)):
                head = _exact(src, 16)  # HELLO, HELLO, AUTH, AUTH (untagged), relayed
                dst.sendall(head + _exact(src, P.HEADER.unpack(head)[3]))
            server.sendall(self._frame(client))  # ENV, relayed
            plan_frame = self._frame(client)
            plan = json.loads(plan_frame[16:-P.TAG_BYTES])
            if self.mode == "control":  # answers the plan itself, with no valid tag
                body = json.dumps({"data_port": None, "transport_info": {}}).encode()
                client.sendall(P.pack_header(P.ACCEPT, len(body)) + body + bytes(P.TAG_BYTES))
            else:
                server.sendall(plan_frame)
                client.sendall(self._frame(server))  # the real, tagged ACCEPT
            k = plan["k"]
            for _ in range(1 + plan["warmup"] + plan["cycles"]):  # the cycles, answered here
                req = _exact(client, plan["request_bytes"])
                reply = bytearray(plan["reply_bytes"])
                struct.pack_into(f"<{k}I", reply, 0, *((struct.unpack_from("<Q", req)[0] * k + i) for i in range(k)))
                client.sendall(reply)
            _exact(client, 1)
        except (OSError, EOFError):
            pass
        finally:
            client.close()
            server.close()


def _exact(sock, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


@pytest.mark.parametrize("mode,match", [("control", "ACCEPT failed the session's tag"),
                                        ("cycles", "did not confirm the plan .* [(]a relay between the ends[)]")])
def test_a_relay_without_the_secret_is_refused(server_factory, mode, match):
    """Issue 30: a relay that passes HELLO/AUTH through to the real server cannot then answer
    for it: its ACCEPT fails the session's tag, or (answering only the cycles) the server's
    tagged DONE never comes; either way one line, and no complete measurement."""
    srv = server_factory(secret=SECRET)
    relay = Relay((srv.host, srv.port), mode)
    s = Session("127.0.0.1", relay.port, secret=SECRET, timeout_s=2.0)
    try:
        with pytest.raises(ProtocolError, match=match) as info:
            s.measure(small_plan(cycles=10))
        assert "\n" not in str(info.value)
    finally:
        s.close()
    relay.listener.close()


def test_the_document_and_the_code_agree_on_errors(server):
    """What the document says is an ERROR is one: a HELLO whose env is no object, a protocol
    number that is no JSON integer in range, duplicate keys, nesting beyond 32, out-of-range
    plan values; a well-formed HELLO of another version is a REFUSE; the absent spec is not
    sent; the test-only transport is refused by a real server."""
    def answer(hello, plan=None):
        c = SpecClient(server.host, server.port)
        if isinstance(hello, bytes):
            c.send_frame(P.HELLO, raw=hello)
        else:
            c.send_frame(P.HELLO, hello)
        t, obj = c.recv_frame()
        if plan is not None and t == P.HELLO:
            c.send_frame(P.PLAN, plan)
            t, obj = c.recv_frame()
        return t, obj.get("reason", "")

    base = {"protocol": P.VERSION, "role": "client", "software": "x"}
    assert answer({**base, "env": []})[0] == P.ERROR
    assert answer({**base, "protocol": -1})[0] == P.ERROR
    assert answer({**base, "protocol": 99})[0] == P.REFUSE
    assert answer(b'{"protocol": 3, "protocol": 3, "role": "client", "software": "x"}') == \
        (P.ERROR, "control body is not valid JSON (duplicate key 'protocol')")
    deep = b'{"protocol": 3, "role": "client", "software": "x", "env": ' + b'{"a": ' * 40 + b"1" + b"}" * 41
    assert answer(deep) == (P.ERROR, "control body nests deeper than 32 levels")
    plan = {"transport": "tcp", "request_bytes": 64, "reply_bytes": 8, "k": 2, "id_bytes": 3, "cycles": 5, "warmup": 0}
    assert answer(base, plan) == (P.ERROR, "PLAN: id_bytes must be one of [2, 4, 8]")
    assert answer(base, {**plan, "id_bytes": 4, "k": 0}) == (P.ERROR, "PLAN: k must be between 1 and 64")
    assert answer(base, {**plan, "id_bytes": 4, "request_bytes": 1 << 40})[0] == P.REFUSE  # over a cap
    assert "spec" not in small_plan().to_wire()


def test_a_slow_but_steady_sender_is_not_dropped(server_factory):
    """Issue 30: the idle timeout is on progress, not on the whole request. A client that
    trickles a 2 MiB request over ~2.5 s (far slower than the 1 s timeout allows for the
    whole message, each chunk well within it: a slow link, emulated) is served; one that
    goes silent is dropped after the timeout."""
    import time

    srv = server_factory(idle_timeout_s=1.0)
    c = SpecClient(srv.host, srv.port)
    c.handshake()
    n = 2 << 20
    t, _ = c.plan(request_bytes=n, reply_bytes=8, cycles=1, warmup=0)
    assert t == P.ACCEPT
    req = bytearray(n)
    t0 = time.monotonic()
    for seq in range(2):
        P.SEQ.pack_into(req, 0, seq)
        for i in range(0, n, n // 25):  # 25 chunks, 0.1 s apart: the pace of a ~6 Mbit/s link
            c.sock.sendall(req[i:i + n // 25])
            time.sleep(0.05)
        assert len(c.recv_exact(8)) == 8
    assert time.monotonic() - t0 > 2.0  # each request took longer than the timeout
    assert c.done() == 2
    c.send_frame(P.BYE)
    assert c.closed()
    c = SpecClient(srv.host, srv.port)  # silent mid-request: dropped
    c.handshake()
    c.plan(request_bytes=n, reply_bytes=8, cycles=1, warmup=0)
    c.sock.sendall(req[:1000])
    t0 = time.monotonic()
    assert c.closed(timeout=10)
    assert time.monotonic() - t0 >= 0.9  # dropped for its silence, after the timeout


def test_a_real_server_refuses_the_test_only_transport():
    import subprocess
    import sys

    from hopbench.orchestration.serverproc import ready_port

    proc = subprocess.Popen([sys.executable, "-m", "hopbench", "serve", "--bind", "127.0.0.1:0", "--once"],
                            stdout=subprocess.PIPE, text=True)
    try:
        c = SpecClient("127.0.0.1", ready_port(proc))
        c.handshake()
        c.send_frame(P.PLAN, {"transport": "fake", "request_bytes": 64, "reply_bytes": 8, "k": 2, "id_bytes": 4,
                              "cycles": 5, "warmup": 0})
        t, obj = c.recv_frame()
        assert t == P.REFUSE and "server cannot serve transport 'fake'" in obj["reason"]
    finally:
        proc.terminate()
        proc.wait(10)


# ---- issue 41: what an independent peer could not predict, each from the document ---------

def _spec_plan(c: SpecClient, transport: str, **extra) -> tuple[int, dict]:
    c.send_frame(P.PLAN, {"transport": transport, "request_bytes": 64, "reply_bytes": 8, "k": 2, "id_bytes": 4,
                          "cycles": 5, "warmup": 1, **extra})
    return c.recv_frame()


@pytest.mark.parametrize("transport", [pytest.param("zmq", marks=pytest.mark.zmq),
                                       pytest.param("ucx", marks=pytest.mark.ucx)])
def test_a_data_channel_opened_from_the_document_is_served(server, transport):
    """docs/PROTOCOL.md "Data channels": zmq's PAIR socket and "HOPBZMQ1" each way, ucx's tag
    messages (1 to the server, 2 back) and "HOPBUCX1" each way; then one message per request
    and reply, DONE on the control connection."""
    from tests.specpeer import UcxData, ZmqData, check_reply, request

    _need(transport)
    c = SpecClient(server.host, server.port)
    c.handshake()
    t, accept = _spec_plan(c, transport)
    assert t == P.ACCEPT and isinstance(accept["data_port"], int), accept
    data = (ZmqData if transport == "zmq" else UcxData)(server.host, accept["data_port"])
    assert data.answer == data.HELLO  # the server's first bytes, byte by byte
    for seq in range(1 + 1 + 5):
        data.send(request(seq, 64))
        reply = data.recv() if transport == "zmq" else data.recv(8)
        assert len(reply) == 8
        check_reply(reply, seq, 2, 4)
    assert c.done() == 7
    c.send_frame(P.BYE)
    data.close()
    assert c.closed()


@pytest.mark.nixl
def test_nixls_setup_bytes_are_the_documents(server):
    """nixl's data port: a block (u32 big-endian length) of "HOPBNIX1", the channel id and the
    agent's metadata, client first; the server's block echoes the id and carries its own."""
    from tests.specpeer import nixl_setup

    _need("nixl")
    c = SpecClient(server.host, server.port)
    c.handshake()
    t, accept = _spec_plan(c, "nixl")
    assert t == P.ACCEPT, accept
    got = nixl_setup(server.host, accept["data_port"], 0x1234, b"not an agent's metadata")
    assert got[:8] == b"HOPBNIX1" and got[8:12] == (0x1234).to_bytes(4, "big") and len(got) > 12
    t, obj = c.recv_frame()  # our metadata is no NIXL agent's: the plan ends with one line
    assert t == P.ERROR and obj["reason"], obj


@pytest.mark.parametrize("how", ["counter", "direction", "key", "tampered"])
def test_a_frame_failing_its_tag_gets_a_tagged_error_then_the_close(server_factory, how):
    """docs/PROTOCOL.md "Session binding": the server answers a frame whose tag fails with
    ERROR, tagged with its own next counter, naming the frame; then closes."""
    import hashlib
    import hmac

    srv = server_factory(secret=SECRET)
    c = SpecClient(srv.host, srv.port)
    c.handshake(SECRET)
    body = json.dumps({"transport": "tcp", "request_bytes": 64, "reply_bytes": 8, "k": 2, "id_bytes": 4,
                       "cycles": 5, "warmup": 1}).encode()
    frame = P.HEADER.pack(b"HOPB", P.VERSION, P.PLAN, len(body), 0) + body
    key, direction, counter = c.key, b"c", c.sent
    if how == "counter":
        counter += 1
    elif how == "direction":
        direction = b"s"
    elif how == "key":
        key = hashlib.sha256(b"another key").digest()
    tag = hmac.new(key, direction + counter.to_bytes(8, "little") + frame, hashlib.sha256).digest()
    if how == "tampered":
        frame = frame[:-1] + b" "
    c.sock.sendall(frame + tag)
    t, obj = c.recv_frame()  # checks the server's tag with its counter 0: it is tagged
    assert t == P.ERROR and "PLAN failed the session's tag" in obj["reason"], obj
    assert c.closed()


@pytest.mark.parametrize("spec", [None, {}, {"mode": "sync"}, []])
def test_a_spec_that_is_not_a_whole_object_is_an_error(server, spec):
    c = SpecClient(server.host, server.port)
    c.handshake()
    t, obj = _spec_plan(c, "tcp", spec=spec)
    assert t == P.ERROR and "spec" in obj["reason"], obj


def test_codec_group_alone_is_an_error_and_a_none_frame_is_the_body(server):
    c = SpecClient(server.host, server.port)
    c.handshake()
    t, obj = _spec_plan(c, "tcp", codec_group=6144)
    assert t == P.ERROR and "'codec_group' without 'codec'" in obj["reason"], obj
    c = SpecClient(server.host, server.port)  # codec none: a frame header, then the body as it is
    c.handshake()
    t, _ = _spec_plan(c, "tcp", codec="none", codec_group=28)
    assert t == P.ACCEPT
    import struct

    for seq in range(7):
        c.sock.sendall(struct.pack("<QII", seq, 56, 0) + bytes(56))
        reply = c.recv_exact(8)
        assert struct.unpack("<2I", reply) == (seq * 2, seq * 2 + 1)
    assert len(c.recv_exact(7 * 8)) == 56  # the decode times
    assert c.done() == 7
    c = SpecClient(server.host, server.port)  # a plain request under none: aborted with a reason a peer reads
    c.handshake()
    _spec_plan(c, "tcp", codec="none", codec_group=28)
    c.sock.sendall(bytes(64))
    reason = c.read_abort(c.recv_exact(8), 8)
    assert "a none frame carries 0 B; the body is 56 B" in reason, reason


@pytest.mark.parametrize("env", [[1], None, "x"])
def test_a_hello_whose_env_is_no_object_is_an_error(server, env):
    c = SpecClient(server.host, server.port)
    c.send_frame(P.HELLO, {"protocol": P.VERSION, "role": "client", "software": "spec", "env": env})
    t, obj = c.recv_frame()
    assert t == P.ERROR and "'env' must be an object" in obj["reason"], obj


def test_busy_under_one_session_at_a_time_waits_its_grace_then_refuses_or_serves(server_factory):
    """docs/PROTOCOL.md "Busy": with --max-sessions 1 a second HELLO is answered 2 s after its
    connection while the first session still runs (REFUSE busy); when that session ends
    within the 2 s, the waiting client is served instead."""
    import time

    srv = server_factory(max_sessions=1)
    a = SpecClient(srv.host, srv.port)
    a.handshake()
    b = SpecClient(srv.host, srv.port)
    t0 = time.monotonic()
    b.send_frame(P.HELLO, {"protocol": P.VERSION, "role": "client", "software": "spec"})
    t, obj = b.recv_frame()
    assert t == P.REFUSE and obj["reason"].startswith("busy: serving another client"), obj
    assert time.monotonic() - t0 >= 1.9  # the grace, not "at once"
    c = SpecClient(srv.host, srv.port)
    c.send_frame(P.HELLO, {"protocol": P.VERSION, "role": "client", "software": "spec"})
    a.send_frame(P.BYE)  # the session ends within c's grace: c is served
    assert a.closed()
    t, hello = c.recv_frame()
    assert t == P.HELLO and hello["role"] == "server", hello


# ---- issue 62: the independent peer's failures, each from the document ---------------------

@pytest.mark.parametrize("frame_type", [P.BYE, P.PLAN])
def test_a_non_error_frame_in_a_data_message_is_answered_with_a_padded_abort(server, frame_type):
    """docs/PROTOCOL.md "Aborting a plan": only ERROR may abort; another frame in place of a
    request is a protocol fault, answered by an ERROR in whole reply-sized messages (8 B here)
    that a peer reads as the document says, then the close."""
    c = SpecClient(server.host, server.port)
    c.handshake()
    t, _ = _spec_plan(c, "tcp")
    assert t == P.ACCEPT
    frame = P.HEADER.pack(b"HOPB", P.VERSION, frame_type, 0, 0)
    c.sock.sendall(frame + bytes(64 - len(frame)))
    reason = c.read_abort(c.recv_exact(8), 8)
    assert "only ERROR may abort a plan" in reason, reason
    assert c.closed()  # nothing after the padded frame: no stray bytes, the session ends


@pytest.mark.parametrize("codec", ["zstd:", "fp8 ", " lz4", "fp8:", "zstd:1 ", "ZSTD"])
def test_codec_strings_outside_the_grammar_are_refused(server, codec):
    """docs/CODECS.md: exactly the grammar; "Anything else is refused"."""
    c = SpecClient(server.host, server.port)
    c.handshake()
    t, obj = _spec_plan(c, "tcp", codec=codec, codec_group=28)
    assert t == P.REFUSE and "docs/CODECS.md" in obj["reason"], obj


@pytest.mark.parametrize("codec", ["zstd", "zstd:01", "blosc2", "blosc2:", "blosc2::3", "blosc2:bitshuffle+lz4:1"])
def test_codec_strings_inside_the_grammar_are_served(server, codec):
    pytest.importorskip("zstandard")
    pytest.importorskip("blosc2")
    c = SpecClient(server.host, server.port)
    c.handshake()
    t, obj = _spec_plan(c, "tcp", codec=codec, codec_group=28)
    assert t == P.ACCEPT, obj


def test_a_drafter_refuse_ends_the_session_at_both_ends(server):
    """docs/PROTOCOL.md: every REFUSE closes the session, a drafter plan's too. The server
    closes after its REFUSE; the client's Session says so for the next plan instead of
    writing into a closed connection."""
    c = SpecClient(server.host, server.port)
    c.handshake()
    t, obj = _spec_plan(c, "tcp", request_bytes=640, drafter={})
    assert t == P.REFUSE and "runs no drafter model" in obj["reason"], obj
    assert c.closed()
    s = Session(server.host, server.port)
    with pytest.raises(Refused, match="runs no drafter model"):
        s.measure(small_plan(request_bytes=640, drafter=P.DrafterPlan()))
    with pytest.raises(Refused, match="this session ended when the server refused a plan"):
        s.measure(small_plan(cycles=5))
    s.close()
    with Session(server.host, server.port) as s:  # and the server serves the next session
        assert s.measure(small_plan(cycles=5)).completed == 11


@pytest.mark.parametrize("sub,body", [("spec", {"mode": "sync", "bytes_per_token": 16, "draft": "sleep:0", "x": 1}),
                                      ("stream", {"chunks": 2, "chunk_bytes": 32, "x": 1}),
                                      ("group", {"id": "g", "size": 1, "x": 1}),
                                      ("drafter", {"early": "off", "x": 1})])
def test_an_unknown_key_inside_a_plans_block_is_an_error(server, sub, body):
    c = SpecClient(server.host, server.port)
    c.handshake()
    t, obj = _spec_plan(c, "tcp", **{sub: body})
    assert t == P.ERROR and "unknown key 'x'" in obj["reason"], obj


def test_a_streamed_spec_without_chunks_is_refused_not_an_error(server):
    """docs/PROTOCOL.md's Plans table: the body is whole; what mode stream needs is a REFUSE."""
    c = SpecClient(server.host, server.port)
    c.handshake()
    t, obj = _spec_plan(c, "tcp", request_bytes=48, reply_bytes=24,
                        spec={"mode": "stream", "bytes_per_token": 16, "draft": "sleep:0"})
    assert t == P.REFUSE and "chunks" in obj["reason"], obj
