"""The fifth transport, Mooncake's Transfer Engine (issue 49): what the conformance suite
cannot say about it. Its settings and the host check, the ring's rules (a message over a
quarter of the peer's ring refused and the channel going on; a stream of sends wrapping the
ring, acknowledged), every plan kind through a real server, and a process that loaded both
Mooncake and NIXL ending with its own status."""

import subprocess
import sys
import threading

import numpy as np
import pytest

from hopbench.core import protocol as P
from hopbench.core.client import Session
from hopbench.errors import ConfigError, ProtocolError
from hopbench.testing import conformance as C
from hopbench.testing import transport_or_skip
from hopbench.workload import hidden as H
from hopbench.workload import stream as ST


@pytest.fixture
def mooncake():
    return transport_or_skip("mooncake")


def test_settings_are_checked_and_rdma_needs_a_device_here(mooncake, monkeypatch):
    mooncake.check_settings({"MOONCAKE_protocol": "tcp", "MOONCAKE_ring_mib": "8", "MOONCAKE_device": ""})
    for bad, says in (({"MOONCAKE_protocol": "udp"}, "expected one of tcp, rdma"),
                      ({"MOONCAKE_ring_mib": "0"}, "expected 1.."), ({"MOONCAKE_ring_mib": "x"}, "expected an integer"),
                      ({"MOONCAKE_flavour": "1"}, "not a Mooncake setting")):
        with pytest.raises(ConfigError, match=says):
            mooncake.check_settings(bad)
    from hopbench.transports.mooncake import engine

    monkeypatch.setattr(engine, "RDMA_DEVICES", "/nonexistent/infiniband")
    from hopbench.transports.mooncake import transport

    monkeypatch.setattr(transport, "rdma_devices", engine.rdma_devices)
    with pytest.raises(ConfigError, match="no RDMA device.*MOONCAKE_protocol=tcp"):
        mooncake.check_here({"MOONCAKE_protocol": "rdma"})
    mooncake.check_here({"MOONCAKE_protocol": "tcp"})


def _pair(mooncake, ring_mib=1):
    return C.connected_with(mooncake, 10.0, settings={"MOONCAKE_ring_mib": str(ring_mib)}, poll="block")


def test_round_trips_reuse_the_head_of_the_ring(mooncake):
    """A message sent once the peer has read everything before it starts at the ring's head,
    in memory the last ones warmed: 60 round trips of 61,440 B (3.5 MiB) through a 1 MiB
    ring never reach past the first message's end, either way."""
    c, s = _pair(mooncake)
    try:
        C.exchange((c, s), [(61440, 8)] * 60)
        assert c.info["peer_ring_reach"] == 61440 and s.info["peer_ring_reach"] == 8, (c.info, s.info)
        assert c.info["acks_sent"] == s.info["acks_sent"] == 0  # every reply said how far its request was read
    finally:
        c.close()
        s.close()


def test_a_message_over_a_quarter_of_the_ring_is_refused_and_the_channel_goes_on(mooncake):
    c, s = _pair(mooncake)
    try:
        with pytest.raises(ProtocolError, match="over a quarter of the peer's 1048576 B ring.*MOONCAKE_ring_mib"):
            c.send(c.alloc((1 << 18) + 1))
        C.exchange((c, s), [(1 << 18, 8), (64, 8)])
        out = c.alloc(100)
        c.send(out)
        with pytest.raises(ProtocolError, match="message of 100 B where 99 B were expected"):
            s.recv_into(s.alloc(99))
        C.exchange((c, s), [(4096, 8)])  # the refused receive freed its place: the channel goes on
    finally:
        c.close()
        s.close()


def test_a_stream_of_sends_wraps_the_ring_and_is_acknowledged(mooncake):
    """160 messages of 100,000 B through a 1 MiB ring, sent back to back while the peer
    reads: the sender waits for room, the reader says what it has read, every byte lands."""
    c, s = _pair(mooncake)
    n, count = 100_000, 160
    rng = np.random.default_rng(1)
    msgs = [rng.integers(0, 256, n, dtype=np.uint8) for _ in range(count)]
    got, errors = [], []

    def read():
        try:
            for _ in range(count):
                buf = s.alloc(n)
                s.recv_into(buf)
                got.append(buf.copy())
        except Exception as exc:
            errors.append(exc)

    th = threading.Thread(target=read)
    th.start()
    try:
        for m in msgs:
            c.send(m)  # not from alloc'd memory: through the registered stage
        th.join(30)
        assert not errors, errors
        assert len(got) == count and all((a == b).all() for a, b in zip(got, msgs))
        assert s.info["acks_sent"] >= count * n // (1 << 20)  # a quarter read and unsaid: said
    finally:
        c.close()
        s.close()


def test_every_plan_kind_runs_through_a_real_server(server, mooncake):
    """Host, codec, streamed and two targets at once, over mooncake, through the kind table."""
    W = 6144
    sched = ST.schedule((8, 23, 39, 55, 70), 4.0, 78)
    with Session(server.host, server.port) as s:
        host = s.measure(P.Plan("mooncake", 61440, 8, 2, 4, 30, 3, verify=True))
        codec = s.measure(P.Plan("mooncake", 8 + 3 * W * 10, 8, 2, 4, 20, 3, verify=True, codec="zstd:1", codec_group=W),
                          source=H.synthetic(5, W))
        streamed = s.measure(P.Plan("mooncake", 5 * 4096, 8, 2, 4, 12, 2, stream=P.StreamPlan(5, 4096)), stream=sched)
        s.bye()
    for m in (host, codec, streamed):
        assert m.completed == m.plan.total and m.error is None, m.error
        assert m.data_info["transport"] == "mooncake"
    assert (codec.stages["decode_ns"][4:] > 0).all() and (streamed.stages["server_hold_ns"] > 0).all()
    results = []

    def target():
        with Session(server.host, server.port) as t:
            results.append(t.measure(P.Plan("mooncake", 61440, 8, 2, 4, 50, 5)))
            t.bye()

    ths = [threading.Thread(target=target) for _ in range(2)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(60)
    assert len(results) == 2 and all(m.completed == m.plan.total for m in results)


BOTH_EXIT = """
import sys
from hopbench.core.transport import TransportOptions, get_transport
a = get_transport("nixl").listen("127.0.0.1", 0, TransportOptions(timeout_s=10))
b = get_transport("mooncake").listen("127.0.0.1", 0, TransportOptions(timeout_s=10))
from hopbench.transports.mooncake.engine import Engine, Settings
Engine.get("127.0.0.1", Settings())
print("both loaded", flush=True)
a.close(); b.close()
sys.exit(3)
"""


def test_a_process_that_loaded_mooncake_and_nixl_ends_with_its_status(mooncake):
    transport_or_skip("nixl")
    done = subprocess.run([sys.executable, "-c", BOTH_EXIT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3 and "both loaded" in done.stdout, (done.returncode, done.stderr[-2000:])
