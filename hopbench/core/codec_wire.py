"""A codec plan on the wire (docs/PROTOCOL.md "Codec plans"): each request is two messages,
a 16-byte frame header (seq u64, encoded length u32, CRC-32 of the body the receiver must
decode to, 0 without --verify) and the encoded body. The codec channels are wrappers (like
the GPU path's staged channels): the timing loops stay the same, and each side reads its
one clock around its codec call. The codecs themselves: core/codecs.py."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from hopbench.core import protocol as P
from hopbench.core.codecs import FRAME, FRAME_BYTES, Codec, steady_heap
from hopbench.core.transport import WrappedChannel
from hopbench.errors import ProtocolError


@dataclass
class CodecStages:
    """Per-cycle numbers of a codec plan: encode_ns (client), wire_bytes (frame + encoded)."""

    encode_ns: np.ndarray
    wire_bytes: np.ndarray


def send_frame(channel: Any, codec: Codec, body: np.ndarray, seq: int, crc: int, header: bytearray,
               clock: Callable[[], int]) -> tuple[int, int]:
    """Encode `body` (timed with `clock`) and send the frame header and the encoded body;
    returns (encode ns, bytes on the wire)."""
    t0 = clock()
    enc = codec.encode(body)
    t1 = clock()
    n = len(memoryview(enc).cast("B"))
    FRAME.pack_into(header, 0, seq, n, crc)
    channel.send(header)
    channel.send(enc)
    return t1 - t0, FRAME_BYTES + n


class ClientAborted(Exception):
    """The client aborted the plan on the codec stream (its reason read)."""

    def __init__(self, seq: int, reason: str):
        super().__init__(reason)
        self.seq = seq


class FrameReceiver:
    """The receiving side of codec frames: recv(channel, body) receives a frame header and
    its encoded body and decodes into `body` (a uint8 array), timed with `clock`; returns
    (seq, the header's CRC, decode ns). A frame longer than the codec's bound for the body,
    or one that does not decode, raises ProtocolError; the client's abort ClientAborted."""

    def __init__(self, codec: Any, max_body: int, clock: Callable[[], int]):
        self.codec, self.clock = codec, clock
        self.header = bytearray(FRAME_BYTES)
        own = getattr(codec, "recv_buffer", None)  # a GPU codec lands frames in its pinned buffer
        self.enc: Any = own(max_body) if own is not None else bytearray(codec.bound(max_body))
        steady_heap()

    def recv(self, channel: Any, body: Any, index: int = 0) -> tuple[int, int, int]:
        channel.recv_into(self.header)
        if P.is_abort(self.header):
            raise ClientAborted(index, P.read_abort(channel, self.header))
        seq, n, crc = FRAME.unpack_from(self.header, 0)
        limit = self.codec.bound(int(body.size))
        if n > limit:
            raise ProtocolError(f"request {seq}: a {self.codec.name} frame of {n} B, more than the {limit} B its "
                                "body can encode to")
        view = memoryview(self.enc)[:n]
        channel.recv_into(view)
        t0 = self.clock()
        try:
            self.codec.decode(view, body)
        except ProtocolError as exc:
            raise ProtocolError(f"request {seq}: {exc}") from None
        except Exception as exc:  # a library's own error on a corrupt frame
            raise ProtocolError(f"request {seq}: the {self.codec.name} frame does not decode: {exc}") from None
        return seq, crc, self.clock() - t0


class CodecClientChannel(WrappedChannel):
    """The client's side of an echo plan: send() encodes this cycle's body (seq i takes body
    i mod n, so the cycles go through the source's tokens), timed with the client's clock,
    then sends the frame; recv_into() is the transport's."""

    def __init__(self, inner: Any, codec: Codec, bodies: list[np.ndarray], crcs: list[int],
                 stages: CodecStages, clock: Callable[[], int]):
        self.inner, self.codec, self.bodies, self.crcs, self.stages, self.clock = inner, codec, bodies, crcs, stages, clock
        self.info = inner.info
        self.header = bytearray(FRAME_BYTES)
        self.recv_into = inner.recv_into
        steady_heap()

    def send(self, buf: Any) -> None:
        seq = P.SEQ.unpack_from(buf, 0)[0]
        j = seq % len(self.bodies)
        ns, nbytes = send_frame(self.inner, self.codec, self.bodies[j], seq, self.crcs[j], self.header, self.clock)
        self.stages.encode_ns[seq] = ns
        self.stages.wire_bytes[seq] = nbytes


class CodecServerChannel(WrappedChannel):
    """The server's side of an echo plan: recv_into(request) receives a frame and decodes it
    into the request body (decode_ns[i]), writes the seq; with --verify a decoded body
    failing the frame's CRC calls on_bad_crc(seq) (the echo loop's corrupted reply)."""

    def __init__(self, inner: Any, codec: Any, body_bytes: int, decode_ns: np.ndarray, clock: Callable[[], int],
                 verify: bool, on_bad_crc: Callable[[int], None], device_body: Any = None):
        self.inner, self.decode_ns = inner, decode_ns
        self.verify, self.on_bad_crc = verify, on_bad_crc
        self.device_body = device_body  # a GPU codec decodes here (the drafter's device buffer)
        self.info = inner.info
        self.frames = FrameReceiver(codec, body_bytes, clock)
        self.send = inner.send
        self._i = 0

    def recv_into(self, buf: Any) -> None:
        body = np.frombuffer(buf, dtype=np.uint8)[P.SEQ_BYTES:]
        into = body if self.device_body is None else self.device_body
        seq, crc, ns = self.frames.recv(self.inner, into, self._i)
        if self._i < self.decode_ns.size:
            self.decode_ns[self._i] = ns
        self._i += 1
        P.SEQ.pack_into(buf, 0, seq)
        if self.verify:
            if self.device_body is not None:  # the decoded states to host for the check (after the timed decode)
                self.device_body.get(out=body)
            if zlib.crc32(body.data) != crc:
                self.on_bad_crc(seq)


def expected_crcs(codec: Codec, bodies: list[np.ndarray]) -> list[int]:
    """What each body must decode to, as CRC-32 (a lossy codec's reconstruction; computed
    before the timed loop)."""
    out = []
    for body in bodies:
        if codec.lossless:
            out.append(zlib.crc32(body.data))
        else:
            back = np.empty_like(body)
            codec.decode(codec.encode(body), back)
            out.append(zlib.crc32(back.data))
    return out


# ---- `hopbench codecs [FILE]`: each codec on this CPU, off the wire ------------------------
