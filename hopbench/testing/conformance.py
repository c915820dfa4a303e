"""The transport conformance suite: what every transport must do (hopbench.core.transport
is the contract). Each check of CHECKS takes a `Maker` (trio's check_two_way_stream(maker):
the transport and a factory of connected channel pairs; `maker_for(name)` builds one from
the registry, a transport under development may hand its own) and raises
AssertionError (or the unexpected error) when the transport breaks the contract, or
`NotApplicable` when a check does not apply to it (a byte stream has no message length
to mismatch). A transport whose library is absent raises TransportUnavailable with its
install line. tests/test_conformance.py runs every check on every transport."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from hopbench.core.native import LoopChoice
from hopbench.core.transport import TransportOptions, get_transport
from hopbench.errors import ConnectFailed, HopbenchError, PeerClosed, ProtocolError, Timeout
from hopbench.testing.fake_transport import PAIR_TIMEOUT_S

SIZES = [1, 7, 8, 64, 4096, 61440, 65536, 184320, 1 << 20, (4 << 20) + 3]


class NotApplicable(Exception):
    """The check does not apply to this transport (the reason is the message)."""


def connected(name: str, timeout_s: float = PAIR_TIMEOUT_S, settings: dict[str, Any] | None = None,
              poll: str = "auto") -> tuple[Any, Any]:
    """A connected (client, server) channel pair of the registered transport `name` on loopback."""
    return connected_with(get_transport(name), timeout_s, settings, poll)


def connected_with(t: Any, timeout_s: float = PAIR_TIMEOUT_S, settings: dict[str, Any] | None = None,
                   poll: str = "auto") -> tuple[Any, Any]:
    """A connected (client, server) channel pair of transport object `t` on loopback."""
    opts = TransportOptions(timeout_s=timeout_s, connect_timeout_s=5.0, settings=settings or {}, poll=poll)
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


@dataclass(frozen=True)
class Maker:
    """What CHECKS run against: a transport (its declared traits, listen/connect for the
    address checks) and `pair(timeout_s)`, a connected (client, server) channel pair."""

    transport: Any
    #: (timeout_s, poll) -> a connected (client, server) pair in that poll mode
    make_pair: Callable[[float, str], tuple[Any, Any]]

    @property
    def name(self) -> str:
        return str(self.transport.name)

    def pair(self, timeout_s: float = PAIR_TIMEOUT_S, poll: str = "auto") -> tuple[Any, Any]:
        return self.make_pair(timeout_s, poll)


def maker_for(name: str) -> Maker:
    """The Maker of a registered transport: loopback pairs from its own listen/connect."""
    t = get_transport(name)
    return Maker(t, lambda timeout_s, poll: connected_with(t, timeout_s, poll=poll))


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


def _with_pair(maker: Maker, fn: Callable[[Any, Any], None], timeout_s: float = PAIR_TIMEOUT_S) -> None:
    client, server = maker.pair(timeout_s)
    try:
        fn(client, server)
    finally:
        client.close()
        server.close()


def check_byte_exact_sizes(maker: Maker) -> None:
    """Channel.send / recv_into: every size from 1 B to 4 MiB + 3 arrives whole and byte-exact, both ways."""
    _with_pair(maker, lambda c, s: exchange((c, s), [(n, n) for n in SIZES]))


def check_asymmetric_replies(maker: Maker) -> None:
    """Channel.send / recv_into: requests and replies of unlike sizes (184,320 B out, 8 B
    back; 8 B out, 1 MiB back) alternate without loss."""
    _with_pair(maker, lambda c, s: exchange((c, s), [(184320, 8)] * 20 + [(8, 1 << 20), (61440, 8), (4 << 20, 16)]))


def check_info_and_alloc(maker: Maker) -> None:
    """Channel.info names the transport (Nagle off where it reports it); Channel.alloc gives
    a writable buffer of exactly nbytes."""
    def run(client: Any, server: Any) -> None:
        assert isinstance(client.info, dict) and client.info.get("transport") == maker.name
        if "tcp_nodelay" in client.info:  # a channel that reports Nagle's switch has it off, both ends
            assert client.info["tcp_nodelay"] is True and server.info["tcp_nodelay"] is True
        buf = client.alloc(100)
        assert len(memoryview(buf).cast("B")) == 100 and not memoryview(buf).readonly

    _with_pair(maker, run)


def check_peer_close_is_peer_closed(maker: Maker) -> None:
    """Channel.recv_into: a peer that closed raises PeerClosed, never a hang or a bare OSError."""
    def run(client: Any, server: Any) -> None:
        exchange((client, server), [(64, 8)])
        server.close()
        try:
            client.recv_into(bytearray(8))
        except PeerClosed:
            return
        raise AssertionError("a receive after the peer closed did not raise PeerClosed")

    _with_pair(maker, run)


def check_close_is_idempotent(maker: Maker) -> None:
    """Channel.close: idempotent and never raises, on either end."""
    client, server = maker.pair()
    client.close()
    client.close()  # never raises
    server.close()
    server.close()


def check_send_after_close_raises(maker: Maker) -> None:
    """Channel.send after close raises a HopbenchError, not a crash or silence."""
    client, server = maker.pair()
    client.close()
    try:
        client.send(bytearray(8))
    except HopbenchError:
        return
    finally:
        server.close()
    raise AssertionError("send on a closed channel did not raise a HopbenchError")


def check_length_mismatch_is_protocol_error(maker: Maker) -> None:
    """Channel.recv_into: a message-framed library's message of another length raises ProtocolError."""
    if not getattr(maker.transport, "message_framed", True):
        raise NotApplicable(f"{maker.name} is a byte stream: a message has no length of its own")

    def run(client: Any, server: Any) -> None:
        server.send(bytearray(16))
        try:
            client.recv_into(bytearray(8))
        except ProtocolError:
            return
        raise AssertionError("a 16-byte message received into 8 bytes did not raise ProtocolError")

    _with_pair(maker, run)


def check_receive_timeout(maker: Maker) -> None:
    """Channel.recv_into: nothing arriving raises Timeout after the channel's timeout."""
    def run(client: Any, server: Any) -> None:
        t0 = time.monotonic()
        try:
            client.recv_into(bytearray(8))
        except Timeout:
            assert time.monotonic() - t0 < 10
            return
        raise AssertionError("a receive nothing answers did not time out")

    _with_pair(maker, run, timeout_s=0.3)


def check_send_timeout(maker: Maker) -> None:
    """Channel.send: a peer that never reads makes a send raise Timeout, not block forever (where sends are bounded)."""
    if not getattr(maker.transport, "bounded_send", True):
        raise NotApplicable(f"{maker.name} queues every send without bound (in memory)")

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

    _with_pair(maker, run, timeout_s=0.5)


def check_dead_port_is_connect_failed(maker: Maker) -> None:
    """Transport.connect: a port nothing listens on raises ConnectFailed."""
    t = maker.transport
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    try:
        t.connect("127.0.0.1", port, TransportOptions(timeout_s=1.0, connect_timeout_s=1.0))
    except ConnectFailed:
        return
    raise AssertionError("connecting to a dead port did not raise ConnectFailed")


def check_port_in_use_is_connect_failed(maker: Maker) -> None:
    """Transport.listen: a port in use raises ConnectFailed saying it is in use."""
    t = maker.transport
    first = t.listen("127.0.0.1", 0, TransportOptions())
    try:
        t.listen("127.0.0.1", first.address[1], TransportOptions())
    except ConnectFailed as exc:
        assert "in use" in str(exc), exc
        return
    finally:
        first.close()
    raise AssertionError("listening on a port in use did not raise ConnectFailed")


def check_unknown_setting_is_refused(maker: Maker) -> None:
    """Transport.check_settings: a setting the library does not know raises ConfigError."""
    from hopbench.errors import ConfigError

    try:
        maker.transport.check_settings({"NO_SUCH_SETTING_X": "1"})
    except ConfigError:
        return
    raise AssertionError("an unknown setting was accepted")


CHECKS: list[Callable[[Maker], None]] = [
    check_byte_exact_sizes, check_asymmetric_replies, check_info_and_alloc, check_peer_close_is_peer_closed,
    check_close_is_idempotent, check_send_after_close_raises, check_length_mismatch_is_protocol_error,
    check_receive_timeout, check_send_timeout, check_dead_port_is_connect_failed,
    check_port_in_use_is_connect_failed, check_unknown_setting_is_refused,
]


# ------------------------------------------------------------------------------------------
# The loops: hopbench.core.timing's run_cycles/echo_cycles, whichever loop runs them (the
# Python reference or the compiled one, hopbench.core.native). Each check takes a
# transport name, a poll mode and a loop ("python" or "native") and holds both loops to
# one behaviour: the same samples, the same bytes on the wire, the same exceptions with the
# same count of completed round trips (timing.Progress).

K, ID_BYTES = 2, 4


@contextlib.contextmanager
def _loop_pair(maker: Maker, poll: str, timeout_s: float = PAIR_TIMEOUT_S) -> Iterator[tuple[Any, Any]]:
    """A connected (client, server) pair in this poll mode, both closed on the way out."""
    client, server = maker.pair(timeout_s, poll)
    try:
        yield client, server
    finally:
        client.close()
        server.close()


def _thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # surfaced by the caller
            box["error"] = exc

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, box


def _codec() -> Any:
    from hopbench.core.protocol import ReplyIds

    return ReplyIds(K, ID_BYTES)


def loop_round_trips(maker: Maker | str, poll: str, loop: str, request_bytes: int, n: int, reply_bytes: int = K * ID_BYTES,
                     crc: bool = False) -> tuple[Any, dict, bytes, bytes]:
    """n cycles through run_cycles against echo_cycles, both with `loop`. Returns (samples,
    loop info of both ends, the last request and the last reply as bytes)."""
    import zlib

    import numpy as np

    from hopbench.core.timing import LoopPolicy, echo_cycles, run_cycles

    with _loop_pair(maker if isinstance(maker, Maker) else maker_for(maker), poll) as (client, server):
        codec = _codec()
        sreq, srep = server.alloc(request_bytes), server.alloc(reply_bytes)
        creq, crep = client.alloc(request_bytes), client.alloc(reply_bytes)
        body = bytes((i * 7 + 3) & 0xFF for i in range(request_bytes - 8))
        memoryview(creq).cast("B")[8:] = body
        info_s: dict = {}
        info_c: dict = {}
        th, box = _thread(lambda: echo_cycles(server, sreq, srep, codec, n, crc=zlib.crc32(body) if crc else None,
                                              on_bad_seq=lambda seq: None, loop=LoopPolicy(loop, info=info_s)))
        samples = np.zeros(n, dtype=np.int64)
        done = run_cycles(client, creq, crep, codec, samples, loop=LoopPolicy(loop, info=info_c))
        th.join(30)
        assert "error" not in box, box.get("error")
        assert done == n and box["result"] == n, (done, box)
        return samples, {"client": info_c["loop"], "server": info_s["loop"]}, bytes(memoryview(creq).cast("B")), \
            bytes(memoryview(crep).cast("B"))


def check_loop_runs_and_records(maker: Maker, poll: str, loop: str) -> None:
    """The loops over Channel.send / recv_into: each size's cycles are timed, run in the loop
    asked for, and carry the last seq and ids."""
    for size in (8, 64, 4096, 61440, 184320):
        samples, which, req, rep = loop_round_trips(maker, poll, loop, size, 40)
        assert (samples > 0).all(), samples
        assert {LoopChoice.parse(which[end]).kind for end in ("client", "server")} == {loop}, which
        assert req[:8] == (39).to_bytes(8, "little")  # the last seq stamped
        assert rep == b"".join(((39 * K + j).to_bytes(ID_BYTES, "little")) for j in range(K))


def check_loop_bytes_identical_to_python(maker: Maker, poll: str, loop: str) -> None:
    """What each loop puts on the wire, seen by a recording peer: identical to the Python loop's."""
    def record(run_loop: str) -> tuple[list[bytes], list[bytes]]:
        import numpy as np

        from hopbench.core.timing import echo_cycles, run_cycles

        codec = _codec()
        # the client loop against a recording Python echo
        with _loop_pair(maker, poll) as (client, server):
            seen: list[bytes] = []

            def echo() -> None:
                buf, out = server.alloc(100), server.alloc(K * ID_BYTES)
                for seq in range(12):
                    server.recv_into(buf)
                    seen.append(bytes(memoryview(buf).cast("B")))
                    codec.pack(out, seq)
                    server.send(out)

            th, box = _thread(echo)
            req = client.alloc(100)
            memoryview(req).cast("B")[8:] = bytes(range(92))
            run_cycles(client, req, client.alloc(K * ID_BYTES), codec, np.zeros(12, dtype=np.int64), loop=run_loop)
            th.join(30)
            assert "error" not in box, box.get("error")
        # the echo loop against a recording Python client
        with _loop_pair(maker, poll) as (client, server):
            got: list[bytes] = []
            th, box = _thread(lambda: echo_cycles(server, server.alloc(100), server.alloc(K * ID_BYTES), codec, 12,
                                                  on_bad_seq=lambda seq: None, loop=run_loop))
            req, rep = client.alloc(100), client.alloc(K * ID_BYTES)
            for seq in range(12):
                memoryview(req).cast("B")[:8] = seq.to_bytes(8, "little")
                client.send(req)
                client.recv_into(rep)
                got.append(bytes(memoryview(rep).cast("B")))
            th.join(30)
            assert "error" not in box and box["result"] == 12, box
        return seen, got

    assert record(loop) == record("python")


def check_loop_wrong_reply_is_verify_error(maker: Maker, poll: str, loop: str) -> None:
    """The loops' reply check: a stale reply's ids raise VerifyError at its seq; completed cycles keep their samples."""
    import numpy as np

    from hopbench.core.timing import Progress, run_cycles
    from hopbench.errors import VerifyError

    codec = _codec()
    with _loop_pair(maker, poll) as (client, server):
        def echo() -> None:
            buf, out = server.alloc(64), server.alloc(K * ID_BYTES)
            for seq in range(4):
                server.recv_into(buf)
                codec.pack(out, seq if seq < 3 else seq - 1)  # cycle 3 gets cycle 2's ids: stale
                server.send(out)

        th, box = _thread(echo)
        samples = np.zeros(10, dtype=np.int64)
        progress = Progress()
        try:
            run_cycles(client, client.alloc(64), client.alloc(K * ID_BYTES), codec, samples, loop=loop,
                       progress=progress)
        except VerifyError as exc:
            assert progress.done == 3, (progress, exc)
            assert str(exc) == f"reply to seq 3 carries ids {list(codec.expected(2))}, expected " \
                               f"{list(codec.expected(3))} (stale or wrong reply)", str(exc)
            assert (samples[:3] > 0).all() and samples[3] == 0  # a wrong reply is never a sample
            return
        finally:
            th.join(30)
        raise AssertionError("a stale reply was accepted")


def check_loop_checksum_mismatch(maker: Maker, poll: str, loop: str) -> None:
    """The server's echo loop answers a request that fails its CRC with inverted ids; the
    client loop reports it as a checksum mismatch."""
    import numpy as np

    from hopbench.core.timing import Progress, echo_cycles, run_cycles
    from hopbench.errors import VerifyError

    codec = _codec()
    with _loop_pair(maker, poll) as (client, server):
        th, box = _thread(lambda: echo_cycles(server, server.alloc(64), server.alloc(K * ID_BYTES), codec, 5,
                                              crc=12345, on_bad_seq=lambda seq: None, loop=loop))
        progress = Progress(done=-1)
        try:
            run_cycles(client, client.alloc(64), client.alloc(K * ID_BYTES), codec, np.zeros(5, dtype=np.int64),
                       loop=loop, progress=progress)
        except VerifyError as exc:
            assert "checksum mismatch at seq 0" in str(exc) and progress.done == 0, (progress, exc)
            return
        finally:
            client.close()  # ends the server's loop, waiting for the next request, before the join
            th.join(30)
        raise AssertionError("a request failing its CRC-32 was not reported")


def check_loop_bad_seq_goes_to_the_callback(maker: Maker, poll: str, loop: str) -> None:
    """The echo loop over Channel.recv_into: a request out of sequence goes to on_bad_seq, and the loop stops there."""
    from hopbench.core.timing import echo_cycles

    codec = _codec()
    with _loop_pair(maker, poll) as (client, server):
        bad: list[int] = []
        th, box = _thread(lambda: echo_cycles(server, server.alloc(64), server.alloc(K * ID_BYTES), codec, 10,
                                              on_bad_seq=bad.append, loop=loop))
        req, rep = client.alloc(64), client.alloc(K * ID_BYTES)
        for seq in (0, 1, 7):  # the third request carries seq 7 where 2 is expected
            memoryview(req).cast("B")[:8] = seq.to_bytes(8, "little")
            client.send(req)
            if seq != 7:
                client.recv_into(rep)
        th.join(30)
        assert "error" not in box and box["result"] == 2 and bad == [2], (box, bad)


def check_loop_peer_close_keeps_completed(maker: Maker, poll: str, loop: str) -> None:
    """The loops over Channel.recv_into's PeerClosed: a peer closing mid-run raises it and keeps every completed sample."""
    import numpy as np

    from hopbench.core.timing import Progress, run_cycles

    codec = _codec()
    with _loop_pair(maker, poll) as (client, server):
        def echo_then_close() -> None:
            buf, out = server.alloc(64), server.alloc(K * ID_BYTES)
            for seq in range(5):
                server.recv_into(buf)
                codec.pack(out, seq)
                server.send(out)
            server.recv_into(buf)
            server.close()

        th, box = _thread(echo_then_close)
        samples = np.zeros(50, dtype=np.int64)
        progress = Progress()
        try:
            run_cycles(client, client.alloc(64), client.alloc(K * ID_BYTES), codec, samples, loop=loop,
                       progress=progress)
        except PeerClosed as exc:
            assert progress.done == 5, (progress, exc)
            assert (samples[:5] > 0).all() and not samples[5:].any()
            return
        finally:
            th.join(30)
        raise AssertionError("a peer that closed mid-run did not raise PeerClosed")


def check_loop_silent_peer_times_out(maker: Maker, poll: str, loop: str) -> None:
    """The loops over Channel.recv_into's Timeout: a silent peer ends the run with Timeout, not a hang."""
    import numpy as np

    from hopbench.core.timing import Progress, run_cycles

    codec = _codec()
    with _loop_pair(maker, poll, timeout_s=0.5) as (client, server):
        def echo_then_silence() -> None:
            buf, out = server.alloc(64), server.alloc(K * ID_BYTES)
            for seq in range(3):
                server.recv_into(buf)
                codec.pack(out, seq)
                server.send(out)

        th, box = _thread(echo_then_silence)
        t0 = time.monotonic()
        progress = Progress()
        try:
            run_cycles(client, client.alloc(64), client.alloc(K * ID_BYTES), codec, np.zeros(20, dtype=np.int64),
                       loop=loop, progress=progress)
        except Timeout as exc:
            assert progress.done == 3 and time.monotonic() - t0 < 10, (progress, exc)
            return
        finally:
            th.join(30)
        raise AssertionError("a peer that stopped answering did not time out")


LOOP_CHECKS: list[Callable[[Maker, str, str], None]] = [
    check_loop_runs_and_records, check_loop_bytes_identical_to_python, check_loop_wrong_reply_is_verify_error,
    check_loop_checksum_mismatch, check_loop_bad_seq_goes_to_the_callback, check_loop_peer_close_keeps_completed,
    check_loop_silent_peer_times_out,
]
