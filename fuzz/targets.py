"""Fuzz targets: everything hopbench parses from outside (docs/PROTOCOL.md, docs/SECURITY.md).

Each target takes the fuzzer's bytes and either returns or raises one of the errors the
document promises for bad input (hopbench.errors: ProtocolError and its kinds, PeerClosed
for a stream that ends, ConfigError/HopbenchError for files and flags). Anything else (a
traceback, an internal error, a hang past the input's bound) is a crash: fuzz/run.py reports
it and saves the input; each crash found becomes a regression test (tests/test_fuzz.py).

  frame_server   a control frame as the server reads it, then its body as the server checks it
  frame_client   a control frame as the client reads it, then its body as the client checks it
  session        a whole client byte stream against a real ServerSession (with and without a
                 secret): handshake, authentication, binding, plans, cycles, aborts
  abort          an abort on the data stream (reply-sized messages), as either end reads it
  config         a TOML file as configs/shape.toml, a sweep config and a rung config
  cli_values     the CLI's value parsers (HOST:PORT, int lists, byte grids, quantities, hops)
  result         a report.json (and a sweep.json) as the result readers load them
  codec_frame    a codec plan's request stream (frame headers and encoded bodies) as the
                 server receives and decodes it, for every codec (docs/CODECS.md)
  hidden_file    a hidden-state file (safetensors or .npy) as --payload-from reads it
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

# every module a target reaches, imported here so that fuzz/run.py instruments them all
# for coverage (a module first imported inside a target would be fuzzed blind)
from hopbench import config_sweep, results, shape  # noqa: F401
from hopbench.analysis import data as _data  # noqa: F401
from hopbench.analysis import verdict as _verdict  # noqa: F401
from hopbench.core import codec_wire as _codec_wire
from hopbench.core import codecs as _codecs
from hopbench.core import protocol as P
from hopbench.core import serving as _serving  # noqa: F401
from hopbench.core import session as _session  # noqa: F401
from hopbench.errors import HopbenchError, PeerClosed
from hopbench.workload import hidden as _hidden

#: the exceptions a target may raise for bad input: the documented answers
EXPECTED: tuple[type[BaseException], ...] = (HopbenchError,)


class BytesChannel:
    """A byte-stream channel reading from the fuzzer's bytes (PeerClosed at their end) and
    collecting what is sent: the control connection as a peer would present it."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0
        self.out: list[bytes] = []
        self.info: dict[str, Any] = {"transport": "tcp", "peer": "?"}

    def recv_into(self, buf: Any) -> None:
        view = memoryview(buf).cast("B")
        n = len(view)
        if self.pos + n > len(self.data):
            got = len(self.data) - self.pos
            self.pos = len(self.data)
            raise PeerClosed("peer closed the connection" if got == 0 else
                             f"peer closed the connection mid-message ({got} of {n} bytes)")
        view[:] = self.data[self.pos:self.pos + n]
        self.pos += n

    def send(self, buf: Any) -> None:
        self.out.append(bytes(memoryview(buf).cast("B")))

    def alloc(self, n: int) -> bytearray:
        return bytearray(n)

    def shutdown(self) -> None:
        self.pos = len(self.data)

    def close(self) -> None:
        pass


SERVER_BODIES = {P.HELLO: "HELLO client", P.AUTH: "AUTH client", P.ENV: "ENV", P.REFUSE: "REFUSE", P.ERROR: "ERROR"}
CLIENT_BODIES = {P.HELLO: "HELLO server", P.AUTH: "AUTH server", P.ACCEPT: "ACCEPT", P.DONE: "DONE",
                 P.REFUSE: "REFUSE", P.ERROR: "ERROR"}


def frame_server(data: bytes) -> None:
    t, obj = P.recv_frame(BytesChannel(data))
    if t == P.PLAN:
        plan = P.Plan.from_wire(obj)
        P.Caps().check(plan)
    elif t in SERVER_BODIES:
        P.validate(obj, SERVER_BODIES[t])


def frame_client(data: bytes) -> None:
    chan = BytesChannel(data)
    t, obj = P.recv_frame(chan)
    if t in CLIENT_BODIES:
        P.validate(obj, CLIENT_BODIES[t])
        if t == P.HELLO:
            P.validate(obj["caps"], "caps")
            if obj["auth"] is not None:
                P.validate(obj["auth"], "auth challenge")


def _only_tcp(name: str) -> Any:
    """The harness serves tcp only (a zmq/ucx plan would open real listeners per input; the
    transports' own parsing is the conformance suite's): every other name is unavailable."""
    from hopbench.core.transport import get_transport
    from hopbench.errors import TransportUnavailable

    if name != "tcp":
        raise TransportUnavailable(f"transport {name!r} is not served by the fuzz harness")
    return get_transport(name)


def session(data: bytes) -> None:
    """The first byte picks the server's mode (bit 0: a secret); the rest is the client's
    stream. The session must end the way docs/PROTOCOL.md says for every input: its run()
    returns (never raises) and records no internal error."""
    from hopbench.core import session as S
    from hopbench.core.serving import ServerConfig
    from hopbench.core.session import ServerSession

    if not data:
        return
    secret = "fuzz" if data[0] & 1 else None
    cfg = ServerConfig(secret=secret, handshake_timeout_s=30.0,
                       caps=P.Caps(max_request_bytes=4096, max_reply_bytes=4096, max_cycles=64))
    saved, S.get_transport = S.get_transport, _only_tcp  # type: ignore[assignment]
    try:  # restored after each input: the harness must not change the process it runs in
        stats = ServerSession(BytesChannel(data[1:]), cfg, {}, lambda: 0, lambda line: None).run()
    finally:
        S.get_transport = saved  # type: ignore[assignment]
    if stats.error and stats.error.startswith("internal error"):
        raise AssertionError(stats.error)


def abort(data: bytes) -> None:
    """An abort in messages of the size the first byte picks (8..263 bytes)."""
    if not data:
        return
    size = 8 + data[0]
    chan = BytesChannel(data[1:])
    first = bytearray(size)
    chan.recv_into(first)
    if P.is_abort(first):
        P.read_abort(chan, first)


def _in_file(data: bytes, name: str, fn: Callable[[Path], Any]) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / name
        path.write_bytes(data)
        fn(path)


def config(data: bytes) -> None:
    from hopbench.config_sweep import load_sweep
    from hopbench.shape import load_shape

    _in_file(data, "shape.toml", load_shape)
    _in_file(data, "sweep.toml", load_sweep)


def cli_values(data: bytes) -> None:
    from hopbench.analysis.verdict import parse_hops, parse_quantity
    from hopbench.config import parse_hostport, parse_int_list
    from hopbench.shape import load_shape, parse_bytes_grid, reply_size

    text = data.decode("utf-8", "replace")
    for fn in (lambda: parse_hostport(text, default_port=5201), lambda: parse_int_list(text, "--x"),
               lambda: parse_bytes_grid(text, load_shape()), lambda: parse_quantity(text, "--x"),
               lambda: parse_hops(text), lambda: reply_size(text, 2, 4)):
        try:
            fn()
        except HopbenchError:
            pass


def result(data: bytes) -> None:
    from hopbench.analysis.data import read_folder
    from hopbench.results import RUN_FILE, SWEEP_FILE

    for name in (RUN_FILE, SWEEP_FILE):
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / name).write_bytes(data)
            try:
                read_folder(d)
            except HopbenchError:
                pass


CODEC_SPECS = ("zstd:1", "lz4", "blosc2:shuffle+zstd:1", "blosc2:bitshuffle+lz4:1", "fp8", "int8")
CODEC_BODIES = (56, 4096, 12289 * 2, 3 * 61440)
_CODEC_CACHE: dict[str, Any] = {}


def codec_frame(data: bytes) -> None:
    """Byte 0 picks the codec, byte 1 the body size; the rest is the stream the server's
    codec channel reads (frame headers, encoded bodies, maybe the client's abort)."""
    import numpy as np

    if len(data) < 2:
        return
    spec = CODEC_SPECS[data[0] % len(CODEC_SPECS)]
    body = CODEC_BODIES[data[1] % len(CODEC_BODIES)]
    codec = _CODEC_CACHE.get(spec) or _CODEC_CACHE.setdefault(spec, _codecs.parse(spec, 6144))
    chan = BytesChannel(data[2:])
    server = _codec_wire.CodecServerChannel(chan, codec, body, np.zeros(4, dtype=np.int64), lambda: 0, True, lambda seq: None)
    request = bytearray(P.SEQ_BYTES + body)
    try:
        for _ in range(4):
            server.recv_into(request)
    except _codec_wire.ClientAborted:
        pass


def hidden_file(data: bytes) -> None:
    """Byte 0 picks the suffix; the rest is the file --payload-from reads (2 layers x 8)."""
    if not data:
        return
    suffix = (".safetensors", ".npy")[data[0] % 2]
    _in_file(data[1:], f"h{suffix}", lambda p: _hidden.from_file(str(p), 2, 8))


TARGETS: dict[str, Callable[[bytes], None]] = {
    "frame_server": frame_server, "frame_client": frame_client, "session": session, "abort": abort,
    "config": config, "cli_values": cli_values, "result": result, "codec_frame": codec_frame,
    "hidden_file": hidden_file,
}


def check(name: str, data: bytes) -> None:
    """Run one input; re-raise anything that is not a documented answer."""
    try:
        TARGETS[name](data)
    except EXPECTED:
        pass
    except RecursionError:  # a parser that recursed on input: not a documented answer
        raise


__all__ = ["TARGETS", "check"]
