"""One conformance suite for every transport (hopbench.testing.conformance, trio's
check_two_way_stream spirit). A transport whose library is absent is skipped with the
install line; a check that does not apply says why."""

import pytest

from hopbench.core.transport import get_transport, registry
from hopbench.errors import TransportUnavailable
from hopbench.testing import conformance as C
from hopbench.testing import register_fake

# every transport the registry knows (entry points), plus the tests' in-memory fake
TRANSPORTS = sorted(set(registry()) | {register_fake()})


def transport_or_skip(name):
    try:
        return get_transport(name)
    except TransportUnavailable as exc:
        pytest.skip(str(exc))


connected = C.connected
exchange = C.exchange


@pytest.mark.parametrize("check", C.CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
@pytest.mark.parametrize("name", TRANSPORTS)
def test_conformance(name, check):
    transport_or_skip(name)
    try:
        check(C.maker_for(name))
    except C.NotApplicable as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("name", ["zmq", "ucx"])
def test_registry_knows_each_transports_settings(name):
    """--opt keys are routed by the registry without importing the library; the
    transport's own list must agree."""
    t = transport_or_skip(name)
    reg = registry()[name]
    if reg.settings:
        assert reg.settings == t.known_settings
    else:
        t.check_settings({f"{reg.settings_prefix}TLS": "tcp"})


def test_every_ucxx_exception_is_mapped_by_type():
    pytest.importorskip("ucxx")
    import ucxx
    from hopbench.transports.ucx import exception_map

    exported = {getattr(ucxx.exceptions, n) for n in dir(ucxx.exceptions) if n.startswith("UCX")}
    exported = {c for c in exported if isinstance(c, type) and issubclass(c, BaseException)}
    assert exported and exported <= set(exception_map()), sorted(c.__name__ for c in exported - set(exception_map()))


def test_tcp_watchdog_bounds_a_stuck_send_and_spares_an_idle_channel():
    """The TCP channel has no per-call kernel timeout (it cost 1-3 us per round trip);
    its watchdog must still bound a send the peer never drains, and must not expire a
    channel that merely sits idle between calls for longer than its timeout."""
    import time

    client, server = connected("tcp", timeout_s=0.3)
    try:
        time.sleep(0.8)  # idle, no call in flight: the watchdog must leave it alone (not synchronisation)
        server.send(b"x" * 8)
        buf = bytearray(8)
        client.recv_into(buf)
        assert buf == bytearray(b"x" * 8)
        t0 = time.monotonic()
        with pytest.raises(C.Timeout):
            client.send(bytearray(64 << 20))  # the server never reads: the send blocks
        assert 0.25 < time.monotonic() - t0 < 5
    finally:
        client.close()
        server.close()


def test_the_suite_takes_any_maker():
    """A Maker is a transport and a pair factory: the suite checks channels that come from
    anywhere (here tcp channels made by hand), and it fails a channel that breaks the contract."""
    from hopbench.testing.fakes import fake_pair

    tcp = get_transport("tcp")
    C.check_byte_exact_sizes(C.Maker(tcp, lambda timeout_s: C.connected_with(tcp, timeout_s)))

    class Corrupting:  # must fail the byte-exact check
        def __init__(self, inner):
            self.inner, self.info = inner, inner.info

        def send(self, buf):  # the last byte flipped: the peer gets other bytes than were sent
            mv = memoryview(buf).cast("B")
            self.inner.send(bytes(mv[:-1]) + bytes([mv[-1] ^ 0xFF]) if len(mv) else buf)

        def __getattr__(self, attr):
            return getattr(self.inner, attr)

    def broken(timeout_s):
        c, s = fake_pair()
        return Corrupting(c), s

    with pytest.raises(AssertionError):
        C.check_byte_exact_sizes(C.Maker(tcp, broken))
