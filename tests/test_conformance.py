"""One conformance suite for every transport (trio's check_two_way_stream spirit):
byte-exact messages from 1 B to > 4 MiB, asymmetric replies, peer close, dead port,
receive timeout. A transport whose library is absent is skipped with the install line."""

import os
import socket
import threading

import pytest

from hopbench.core.transport import TransportOptions, get_transport
from hopbench.errors import ConnectFailed, PeerClosed, Timeout, TransportUnavailable

TRANSPORTS = [
    pytest.param("fake", id="fake"),
    pytest.param("tcp", id="tcp"),
    pytest.param("zmq", id="zmq", marks=pytest.mark.zmq),
    pytest.param("ucx", id="ucx", marks=pytest.mark.ucx),
]
SIZES = [1, 7, 8, 64, 4096, 61440, 65536, 184320, 1 << 20, (4 << 20) + 3]


def transport_or_skip(name):
    try:
        return get_transport(name)
    except TransportUnavailable as exc:
        pytest.skip(str(exc))


def connected(name, timeout_s=5.0):
    t = transport_or_skip(name)
    opts = TransportOptions(timeout_s=timeout_s, connect_timeout_s=5.0)
    listener = t.listen("127.0.0.1", 0, opts)
    box = {}

    def accept():
        try:
            box["chan"] = listener.accept(10.0)
        except Exception as exc:  # surfaced below
            box["error"] = exc

    th = threading.Thread(target=accept)
    th.start()
    try:
        client = t.connect("127.0.0.1", listener.address[1], opts)
    finally:
        th.join(15)
        listener.close()
    if "error" in box:
        raise box["error"]
    return client, box["chan"]


@pytest.fixture(params=TRANSPORTS)
def pair(request):
    client, server = connected(request.param)
    yield client, server
    client.close()
    server.close()


def _serve(chan, sizes_and_replies, errors):
    try:
        for n, r in sizes_and_replies:
            buf = bytearray(n)
            chan.recv_into(buf)
            out = bytearray(r)
            # reply = the first bytes of the request, then its length, so content is checked both ways
            out[: min(r, n)] = buf[: min(r, n)]
            chan.send(out)
    except Exception as exc:
        errors.append(exc)


def exchange(pair, plan):
    client, server = pair
    errors = []
    th = threading.Thread(target=_serve, args=(server, plan, errors))
    th.start()
    try:
        for n, r in plan:
            msg = bytearray(os.urandom(n))
            client.send(msg)
            back = bytearray(r)
            client.recv_into(back)
            k = min(r, n)
            assert back[:k] == msg[:k]
            assert back[k:] == bytes(r - k)
    finally:
        th.join(30)
    assert not errors, errors


def test_byte_exact_sizes(pair):
    exchange(pair, [(n, n) for n in SIZES])


def test_asymmetric_replies(pair):
    exchange(pair, [(184320, 8)] * 20 + [(8, 1 << 20), (61440, 8), (4 << 20, 16)])


def test_channel_records_settings(pair):
    client, server = pair
    assert isinstance(client.info, dict) and client.info.get("transport")
    if client.info["transport"] == "tcp":
        assert client.info["tcp_nodelay"] is True and server.info["tcp_nodelay"] is True


def test_peer_close_is_peer_closed(pair):
    client, server = pair
    exchange(pair, [(64, 8)])
    server.close()
    with pytest.raises(PeerClosed):
        client.recv_into(bytearray(8))


@pytest.mark.parametrize("name", TRANSPORTS)
def test_receive_timeout(name):
    client, server = connected(name, timeout_s=0.3)
    try:
        with pytest.raises(Timeout):
            client.recv_into(bytearray(8))
    finally:
        client.close()
        server.close()


@pytest.mark.parametrize("name", TRANSPORTS)
def test_dead_port_is_connect_failed(name):
    t = transport_or_skip(name)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(ConnectFailed):
        t.connect("127.0.0.1", port, TransportOptions(timeout_s=1.0, connect_timeout_s=1.0))


@pytest.mark.parametrize("name", TRANSPORTS)
def test_port_in_use_is_connect_failed(name):
    t = transport_or_skip(name)
    first = t.listen("127.0.0.1", 0, TransportOptions())
    try:
        with pytest.raises(ConnectFailed, match="in use"):
            t.listen("127.0.0.1", first.address[1], TransportOptions())
    finally:
        first.close()


def test_tcp_watchdog_bounds_a_stuck_send_and_spares_an_idle_channel():
    """The TCP channel has no per-call kernel timeout (it cost 1-3 us per round trip);
    its watchdog must still bound a send the peer never drains, and must not expire a
    channel that merely sits idle between calls for longer than its timeout."""
    import time

    client, server = connected("tcp", timeout_s=0.3)
    try:
        time.sleep(0.8)  # idle, no call in flight: the watchdog must leave it alone
        server.send(b"x" * 8)
        buf = bytearray(8)
        client.recv_into(buf)
        assert buf == bytearray(b"x" * 8)
        t0 = time.monotonic()
        with pytest.raises(Timeout):
            client.send(bytearray(64 << 20))  # the server never reads: the send blocks
        assert 0.25 < time.monotonic() - t0 < 5
    finally:
        client.close()
        server.close()
