"""The transport conformance suite: what every transport must do (hopbench.core.transport
is the contract). Each check takes a registered transport's name and raises
AssertionError (or the unexpected error) when the transport breaks the contract, or
`NotApplicable` when a check does not apply to it (a byte stream has no message length
to mismatch). A transport whose library is absent raises TransportUnavailable with its
install line. tests/test_conformance.py runs every check on every transport."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any, Callable

from hopbench.core.transport import TransportOptions, get_transport
from hopbench.errors import ConnectFailed, HopbenchError, PeerClosed, ProtocolError, Timeout

SIZES = [1, 7, 8, 64, 4096, 61440, 65536, 184320, 1 << 20, (4 << 20) + 3]


class NotApplicable(Exception):
    """The check does not apply to this transport (the reason is the message)."""


def connected(name: str, timeout_s: float = 5.0, settings: dict | None = None) -> tuple[Any, Any]:
    """A connected (client, server) channel pair of transport `name` on loopback."""
    t = get_transport(name)
    opts = TransportOptions(timeout_s=timeout_s, connect_timeout_s=5.0, settings=settings or {})
    listener = t.listen("127.0.0.1", 0, opts)
    box: dict[str, Any] = {}

    def accept() -> None:
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


def _serve(chan: Any, plan: list[tuple[int, int]], errors: list) -> None:
    try:
        for n, r in plan:
            buf = chan.alloc(n)
            chan.recv_into(buf)
            out = chan.alloc(r)
            # reply = the first bytes of the request, then zeros: content is checked both ways
            k = min(r, n)
            memoryview(out).cast("B")[:k] = memoryview(buf).cast("B")[:k]
            chan.send(out)
    except Exception as exc:
        errors.append(exc)


def exchange(pair: tuple[Any, Any], plan: list[tuple[int, int]]) -> None:
    """Client sends n random bytes, server answers r bytes (n's first bytes, then zeros)."""
    client, server = pair
    errors: list = []
    th = threading.Thread(target=_serve, args=(server, plan, errors))
    th.start()
    try:
        for n, r in plan:
            msg = bytearray(os.urandom(n))
            client.send(msg)
            back = bytearray(r)
            client.recv_into(back)
            k = min(r, n)
            assert back[:k] == msg[:k], f"reply of {r} B to {n} B differs"
            assert back[k:] == bytes(r - k)
    finally:
        th.join(30)
    assert not errors, errors


def _with_pair(name: str, fn: Callable[[Any, Any], None], timeout_s: float = 5.0) -> None:
    client, server = connected(name, timeout_s)
    try:
        fn(client, server)
    finally:
        client.close()
        server.close()


def check_byte_exact_sizes(name: str) -> None:
    _with_pair(name, lambda c, s: exchange((c, s), [(n, n) for n in SIZES]))


def check_asymmetric_replies(name: str) -> None:
    _with_pair(name, lambda c, s: exchange((c, s), [(184320, 8)] * 20 + [(8, 1 << 20), (61440, 8), (4 << 20, 16)]))


def check_info_and_alloc(name: str) -> None:
    def run(client: Any, server: Any) -> None:
        assert isinstance(client.info, dict) and client.info.get("transport") == name
        if name == "tcp":
            assert client.info["tcp_nodelay"] is True and server.info["tcp_nodelay"] is True
        buf = client.alloc(100)
        assert len(memoryview(buf).cast("B")) == 100 and not memoryview(buf).readonly

    _with_pair(name, run)


def check_peer_close_is_peer_closed(name: str) -> None:
    def run(client: Any, server: Any) -> None:
        exchange((client, server), [(64, 8)])
        server.close()
        try:
            client.recv_into(bytearray(8))
        except PeerClosed:
            return
        raise AssertionError("a receive after the peer closed did not raise PeerClosed")

    _with_pair(name, run)


def check_close_is_idempotent(name: str) -> None:
    client, server = connected(name)
    client.close()
    client.close()  # never raises
    server.close()
    server.close()


def check_send_after_close_raises(name: str) -> None:
    client, server = connected(name)
    client.close()
    try:
        client.send(bytearray(8))
    except HopbenchError:
        return
    finally:
        server.close()
    raise AssertionError("send on a closed channel did not raise a HopbenchError")


def check_length_mismatch_is_protocol_error(name: str) -> None:
    if not getattr(get_transport(name), "message_framed", True):
        raise NotApplicable(f"{name} is a byte stream: a message has no length of its own")

    def run(client: Any, server: Any) -> None:
        server.send(bytearray(16))
        try:
            client.recv_into(bytearray(8))
        except ProtocolError:
            return
        raise AssertionError("a 16-byte message received into 8 bytes did not raise ProtocolError")

    _with_pair(name, run)


def check_receive_timeout(name: str) -> None:
    def run(client: Any, server: Any) -> None:
        t0 = time.monotonic()
        try:
            client.recv_into(bytearray(8))
        except Timeout:
            assert time.monotonic() - t0 < 10
            return
        raise AssertionError("a receive nothing answers did not time out")

    _with_pair(name, run, timeout_s=0.3)


def check_send_timeout(name: str) -> None:
    if not getattr(get_transport(name), "bounded_send", True):
        raise NotApplicable(f"{name} queues every send without bound (in memory)")

    def run(client: Any, server: Any) -> None:
        # The server never reads. Large messages fill socket buffers (tcp) or wait for the
        # receiver (UCX rendezvous); many small ones fill a message queue (ZeroMQ's
        # high-water mark, 1000 by default): one way or the other a send must block, and
        # then time out.
        t0 = time.monotonic()
        try:
            big = client.alloc(4 << 20)
            for _ in range(16):
                client.send(big)
            small = client.alloc(4096)
            for _ in range(5000):
                client.send(small)
        except Timeout:
            assert time.monotonic() - t0 < 60
            return
        raise AssertionError("64 MiB + 5000 messages nobody reads did not time out")

    _with_pair(name, run, timeout_s=0.5)


def check_dead_port_is_connect_failed(name: str) -> None:
    t = get_transport(name)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    try:
        t.connect("127.0.0.1", port, TransportOptions(timeout_s=1.0, connect_timeout_s=1.0))
    except ConnectFailed:
        return
    raise AssertionError("connecting to a dead port did not raise ConnectFailed")


def check_port_in_use_is_connect_failed(name: str) -> None:
    t = get_transport(name)
    first = t.listen("127.0.0.1", 0, TransportOptions())
    try:
        t.listen("127.0.0.1", first.address[1], TransportOptions())
    except ConnectFailed as exc:
        assert "in use" in str(exc), exc
        return
    finally:
        first.close()
    raise AssertionError("listening on a port in use did not raise ConnectFailed")


def check_unknown_setting_is_refused(name: str) -> None:
    from hopbench.errors import ConfigError

    try:
        get_transport(name).check_settings({"NO_SUCH_SETTING_X": "1"})
    except ConfigError:
        return
    raise AssertionError("an unknown setting was accepted")


CHECKS: list[Callable[[str], None]] = [
    check_byte_exact_sizes, check_asymmetric_replies, check_info_and_alloc, check_peer_close_is_peer_closed,
    check_close_is_idempotent, check_send_after_close_raises, check_length_mismatch_is_protocol_error,
    check_receive_timeout, check_send_timeout, check_dead_port_is_connect_failed,
    check_port_in_use_is_connect_failed, check_unknown_setting_is_refused,
]
