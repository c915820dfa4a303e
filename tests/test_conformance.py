"""One conformance suite for every transport (hopbench.testing.conformance, trio's
check_two_way_stream spirit). A transport whose library is absent is skipped with the
install line; a check that does not apply says why."""

import pytest

from hopbench.core.transport import get_transport, registry
from hopbench.errors import ConfigError
from hopbench.testing import conformance as C
from hopbench.testing import register_fake, transport_or_skip

# every transport the registry knows (entry points), plus the tests' in-memory fake
TRANSPORTS = sorted(set(registry()) | {register_fake()})


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


@pytest.mark.parametrize("name", sorted(registry()))
def test_registry_knows_each_transports_settings(name):
    """--opt keys are routed by the registry without importing the library; the
    transport's own list must agree."""
    t = transport_or_skip(name)
    reg = registry()[name]
    if reg.settings:
        assert reg.settings == t.known_settings
    elif reg.settings_prefix:  # a UCX variable, routed to the transport by its prefix, is taken
        key, value = next(o.example for o in reg.options if o.example).split("=", 1)  # the record's own example
        assert reg.owns(key) and key.startswith(reg.settings_prefix)
        t.check_settings({key: value})
    else:  # a transport that owns no setting refuses any
        with pytest.raises(ConfigError):
            t.check_settings({"sndbuf": "1"})


def test_every_ucxx_exception_is_mapped_by_type():
    pytest.importorskip("ucxx")
    import ucxx
    from hopbench.transports.ucx import exception_map

    exported = {getattr(ucxx.exceptions, n) for n in dir(ucxx.exceptions) if n.startswith("UCX")}
    exported = {c for c in exported if isinstance(c, type) and issubclass(c, BaseException)}
    assert exported and exported <= set(exception_map()), sorted(c.__name__ for c in exported - set(exception_map()))


def test_every_nixl_exception_and_status_is_mapped_by_type():
    pytest.importorskip("nixl_cu12")
    import nixl_cu12._bindings as nb
    from hopbench.transports.nixl import exception_map, status_map

    from hopbench.errors import HopbenchError

    exported = {c for c in (getattr(nb, n) for n in dir(nb)) if isinstance(c, type) and issubclass(c, BaseException)}
    assert exported and exported <= set(exception_map()), sorted(c.__name__ for c in exported - set(exception_map()))
    assert all(issubclass(t, HopbenchError) for t in exception_map().values())
    statuses = set(nb.nixl_status_t.__members__.values())
    assert statuses == set(status_map()), statuses ^ set(status_map())
    assert [s.name for s, t in status_map().items() if t is None] == ["NIXL_SUCCESS", "NIXL_IN_PROG"]


NIXL_ECHO_SERVER = """
import sys
from hopbench.core.transport import TransportOptions, get_transport
listener = get_transport("nixl").listen("127.0.0.1", 0, TransportOptions(timeout_s=10))
print(listener.address[1], flush=True)
chan = listener.accept(10)
sys.stdin.readline()  # the client's first message is sent: only now the first receive
req, rep = chan.alloc(64), chan.alloc(8)
for _ in range(31):
    chan.recv_into(req)
    rep[:] = req[:8]
    chan.send(rep)
chan.close()
"""


def test_nixl_a_send_before_the_peer_receives_goes_eager_and_the_writes_follow():
    """Two processes (one agent each). The first message is sent before the server posts
    any receive: it travels in its notification (eager); the server's credit for it
    arrives late, carrying its buffer's registration, which the WRITEs of the next
    messages need (a regression: they failed with NIXL_ERR_NOT_FOUND, "no available
    backends", when that late credit was dropped unread)."""
    import subprocess
    import sys

    from hopbench.core.transport import TransportOptions

    t = transport_or_skip("nixl")
    srv = subprocess.Popen([sys.executable, "-c", NIXL_ECHO_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True)
    try:
        port = int(srv.stdout.readline())
        client = t.connect("127.0.0.1", port, TransportOptions(timeout_s=10))
        msg, back = client.alloc(64), client.alloc(8)
        msg[:] = 7
        client.send(msg)  # no receive posted yet: after 10 ms it goes eager
        srv.stdin.write("go\n")
        srv.stdin.flush()
        client.recv_into(back)
        assert bytes(back) == bytes([7]) * 8 and client.info["eager_sends"] == 1
        for i in range(30):
            msg[:] = i
            client.send(msg)
            client.recv_into(back)
            assert bytes(back) == bytes([i]) * 8
        assert client.info["eager_sends"] == 1, client.info
        client.close()
        assert srv.wait(30) == 0
    finally:
        srv.kill()
        srv.wait()
        srv.stdin.close()
        srv.stdout.close()


NIXL_FORK = """
import gc, subprocess, sys
from hopbench.testing import conformance as C
c, s = C.connected("nixl")
C.exchange((c, s), [(64, 8)] * 3)
c.close(); s.close(); del c, s; gc.collect()  # the process's agent stays cached, unused
r = subprocess.run([sys.executable, "-c", "print('child ok')"], preexec_fn=lambda: None, capture_output=True, text=True)
print(r.returncode, r.stdout.strip(), r.stderr.strip()[-200:])
"""


def test_nixl_a_forked_child_leaves_the_parents_agent_alone():
    """subprocess with a preexec_fn forks and runs the at-fork hooks in the child: the nixl
    transport's hook once dropped the cached agents there, and their destructors acted on
    the parent's UCX endpoints (UCX "Fatal: unable to modify event set", a segfault that
    aborted make test)."""
    import subprocess
    import sys

    transport_or_skip("nixl")
    r = subprocess.run([sys.executable, "-c", NIXL_FORK], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Fatal" not in r.stderr + r.stdout and r.stdout.startswith("0 child ok"), \
        (r.stdout[-500:], r.stderr[-500:])


def test_nixl_refuses_unknown_settings_and_names_its_install_line():
    from hopbench.core.transport import registry
    from hopbench.errors import ConfigError

    reg = registry()["nixl"]
    assert reg.install_line() == "pip install --no-deps 'nixl-cu12>=1.5'"  # its wheel declares torch
    assert reg.owns("NIXL_UCX_TLS") and not reg.owns("UCX_TLS")
    t = transport_or_skip("nixl")
    t.check_settings({"NIXL_UCX_TLS": "tcp", "NIXL_num_workers": "2", "NIXL_progress_delay_us": "10"})
    for bad in ({"NIXL_nope": "1"}, {"NIXL_progress_delay_us": "-1"}, {"NIXL_UCX_": "x"}):
        with pytest.raises(ConfigError):
            t.check_settings(bad)


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
    C.check_byte_exact_sizes(C.Maker(tcp, lambda timeout_s, poll: C.connected_with(tcp, timeout_s, poll=poll)))

    class Corrupting:  # must fail the byte-exact check
        def __init__(self, inner):
            self.inner, self.info = inner, inner.info

        def send(self, buf):  # the last byte flipped: the peer gets other bytes than were sent
            mv = memoryview(buf).cast("B")
            self.inner.send(bytes(mv[:-1]) + bytes([mv[-1] ^ 0xFF]) if len(mv) else buf)

        def __getattr__(self, attr):
            return getattr(self.inner, attr)

    def broken(timeout_s, poll):  # in-process: its peer's wait for bytes that never come ends in 0.5 s
        c, s = fake_pair(0.5)
        return Corrupting(c), s

    with pytest.raises(AssertionError):
        C.check_byte_exact_sizes(C.Maker(tcp, broken))


NIXL_EXITS = """
import ctypes, sys
from hopbench.core.transport import TransportOptions, get_transport
listener = get_transport("nixl").listen("127.0.0.1", 0, TransportOptions(timeout_s=10))
maps = open("/proc/self/maps").read()
print("system libnl-route loaded:", "/libnl-route-3.so.200" in maps, flush=True)
ctypes.CDLL(None).printf(b"buffered by C stdio\\n")  # a pipe: block-buffered until exit
listener.close()
sys.exit(3)
"""


def test_a_nixl_process_ends_with_its_status_where_rdma_cores_libnl_is_loaded_too():
    """Issue 42: with rdma-core's libraries on the host (ibverbs-providers: `make test`
    installs it), NIXL's bundled libnl-route and the system's both load and the process
    died at exit with SIGSEGV in rtnl_tc_unregister (returncode -11 here before the fix).
    It must end with the status it exits with and its C stdio output delivered."""
    import subprocess
    import sys

    transport_or_skip("nixl")
    done = subprocess.run([sys.executable, "-c", NIXL_EXITS], capture_output=True, text=True, timeout=120)
    if "loaded: False" in done.stdout:
        pytest.skip("the system's libnl-route did not load here (no rdma-core: apt-get install ibverbs-providers)")
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    assert "loaded: True" in done.stdout and "buffered by C stdio" in done.stdout, done.stdout


def test_the_transports_describe_themselves():
    """REVIEW5 F5 (fio's habit): the records are the description everywhere: --transport's
    and --opt's help, the packages an end reports, the settings a record's options make."""
    from hopbench.core import env
    from hopbench.core.transport import Option, Registered, installed, libraries, options_help, transport_help

    for r in installed():
        assert f"{r.name} ({r.summary})" in transport_help()
        for o in r.options:
            assert o.key in options_help()
    assert "fake" not in transport_help()  # registered in this process only: not described
    assert {"pyzmq", "ucxx-cu12", "libucx-cu12", "nixl-cu12"} <= set(libraries())
    assert set(libraries()) <= set(env.package_versions())
    made = Registered("x", "m:C", None, "xlib", options=(Option("depth", "int", "queue depth"),))
    assert made.settings == frozenset({"depth"}) and made.owns("depth")
