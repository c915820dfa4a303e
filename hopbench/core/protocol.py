"""The wire protocol (docs/PROTOCOL.md is the normative description; keep them in step).

Control frames: a 16-byte header message, then (if length > 0) a body message of
`length` bytes holding one UTF-8 JSON object.

    header = magic "HOPB" | version u16 | type u16 | length u32 | reserved u32 (0)
             little-endian, 16 bytes

Cycle messages (on the data channel): request of `request_bytes` whose first 8 bytes are
the sequence number (u64 LE); reply of `reply_bytes` whose first k*id_bytes bytes are the
K draft ids id_i = (seq*k + i) mod 2**(8*id_bytes), unsigned LE.
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable

from hopbench.core import auth
from hopbench.core.bodies import (  # re-exported
    MAX_DEPTH as MAX_DEPTH,
)
from hopbench.core.bodies import (
    SCHEMAS as SCHEMAS,
)
from hopbench.core.bodies import (
    U32 as U32,
)
from hopbench.core.bodies import (
    decode_body as decode_body,
)
from hopbench.core.bodies import (
    encode_body as encode_body,
)
from hopbench.core.bodies import (
    is_protocol_number as is_protocol_number,
)
from hopbench.core.bodies import (
    validate as validate,
)
from hopbench.errors import PeerError, ProtocolError, Refused, VerifyError
from hopbench.records import MAX_CYCLES, MAX_MESSAGE_BYTES

MAGIC = b"HOPB"
# The header's version and the HELLO body's "protocol" are the same number. Any change to
# frames, keys or their meaning increments it; peers of different versions refuse each
# other (docs/PROTOCOL.md, "Versioning"). 2: minimal HELLO before authentication, the
# environment in AUTH, abort frames on the data stream, strict keys. 3: the session bound
# to the authentication (a tag on every later frame, a proof on each data channel), the
# client's environment only after the server's proof (ENV), each plan confirmed (DONE),
# out-of-range plans and malformed JSON (duplicate keys, deep nesting) answered ERROR.
VERSION = 3
HEADER = struct.Struct("<4sHHII")
HEADER_BYTES = HEADER.size  # 16
MAX_BODY = 65536  # control bodies are small JSON objects; never allocate more than this
SEQ = struct.Struct("<Q")
SEQ_BYTES = SEQ.size
#: a codec plan's request frame header: seq u64, encoded length u32, CRC-32 of the decoded body u32
CODEC_FRAME = struct.Struct("<QII")
CODEC_FRAME_BYTES = CODEC_FRAME.size

HELLO, PLAN, ACCEPT, REFUSE, BYE, ERROR, AUTH, DONE, ENV = 1, 2, 3, 4, 5, 6, 7, 8, 9
TYPE_NAMES = {HELLO: "HELLO", PLAN: "PLAN", ACCEPT: "ACCEPT", REFUSE: "REFUSE", BYE: "BYE", ERROR: "ERROR", AUTH: "AUTH",
              DONE: "DONE", ENV: "ENV"}
TAG_BYTES = 32  # HMAC-SHA256 of a frame in a bound session (docs/PROTOCOL.md, "Session binding")
#: plans started together (PLAN `group`, docs/PROTOCOL.md): the most targets in one group,
#: the longest id, and how long the server holds a plan's ACCEPT for the group's others
MAX_GROUP = 1024
#: streamed plans (docs/PROTOCOL.md "Streamed plans"): the most chunks a cycle's request is cut
#: into (a model's aux layers), and the end message that follows them (seq u64, accepted u32, 0 u32)
MAX_STREAM_CHUNKS = 64
STREAM_END_BYTES = 16
STREAM_END = struct.Struct("<QII")
MAX_GROUP_ID = 64
GROUP_WAIT_S = 120.0
ID_CODES = {2: "H", 4: "I", 8: "Q"}


def pack_header(msg_type: int, length: int) -> bytes:
    return HEADER.pack(MAGIC, VERSION, msg_type, length, 0)


def unpack_header(buf: bytes) -> tuple[int, int]:
    """Return (type, body length); ProtocolError on anything that is not a valid header."""
    magic, version, msg_type, length, _reserved = HEADER.unpack(buf)
    if magic != MAGIC:
        raise ProtocolError(f"not a hopbench peer (bad magic {bytes(magic)!r})")
    if version != VERSION:
        raise ProtocolError(f"protocol version mismatch: peer speaks {version}, we speak {VERSION}")
    if msg_type not in TYPE_NAMES:
        raise ProtocolError(f"unknown message type {msg_type}")
    if length > MAX_BODY:
        raise ProtocolError(f"control message of {length} bytes exceeds the {MAX_BODY}-byte limit")
    return msg_type, length


def send_msg(channel: Any, msg_type: int, obj: dict[str, Any] | None = None, bind: auth.Binding | None = None) -> None:
    body = encode_body(obj) if obj is not None else b""
    if len(body) > MAX_BODY:
        raise ProtocolError(f"control message too large ({len(body)} bytes)")
    header = pack_header(msg_type, len(body))
    channel.send(header)
    if body:
        channel.send(body)
    if bind is not None:
        channel.send(bind.seal(header + body))


def recv_frame(channel: Any, bind: auth.Binding | None = None) -> tuple[int, dict[str, Any]]:
    """Receive one control frame (header, then body, then its tag in a bound session):
    (type, body object). ProtocolError for anything that is not a well-formed frame,
    SessionMismatch for a tag that fails; REFUSE/ERROR are returned, not raised. BYE must
    have an empty body (length 0)."""
    header = bytearray(HEADER_BYTES)
    channel.recv_into(header)
    msg_type, length = unpack_header(bytes(header))
    body = bytearray(length)
    if length:
        channel.recv_into(body)
    if bind is not None:
        tag = bytearray(TAG_BYTES)
        channel.recv_into(tag)
        bind.check(bytes(header) + bytes(body), bytes(tag), TYPE_NAMES.get(int.from_bytes(header[6:8], "little"), "frame"))
    obj: dict[str, Any] = {}
    if length:
        obj = decode_body(bytes(body))
        if msg_type == BYE:
            raise ProtocolError("BYE must have an empty body")
    return msg_type, obj


def recv_msg(channel: Any, *expected: int, bind: auth.Binding | None = None) -> tuple[int, dict[str, Any]]:
    """Receive one control frame. REFUSE and ERROR become exceptions; a type outside
    `expected` is a ProtocolError."""
    msg_type, obj = recv_frame(channel, bind)
    if msg_type == REFUSE and REFUSE not in expected:
        raise Refused(f"server refused: {_reason(obj)}")
    if msg_type == ERROR and ERROR not in expected:
        raise PeerError(f"peer reported an error: {_reason(obj)}")
    if expected and msg_type not in expected:
        want = "/".join(TYPE_NAMES[t] for t in expected)
        raise ProtocolError(f"expected {want}, got {TYPE_NAMES[msg_type]}")
    return msg_type, obj


class _SubPlan:
    """A typed block of the PLAN body (its schema is SCHEMAS[WIRE]): `to_dict` sends the keys
    that are set, `from_dict` checks the body and builds it."""

    WIRE = "?"

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)  # type: ignore[arg-type]
                if getattr(self, f.name) is not None}

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> Any:
        validate(obj, cls.WIRE)
        return cls(**obj)


@dataclass(frozen=True)
class StreamPlan(_SubPlan):
    """A streamed plan (docs/PROTOCOL.md "Streamed plans"): each cycle's request crosses as
    `chunks` chunk messages of `chunk_bytes`, then a 16-byte end message."""

    WIRE = "stream"
    chunks: int
    chunk_bytes: int


@dataclass(frozen=True)
class GroupPlan(_SubPlan):
    """Plans started together (docs/PROTOCOL.md "Plans started together"): the server holds
    this plan's ACCEPT until the group's `size` sessions have sent theirs."""

    WIRE = "group"
    id: str
    size: int


@dataclass(frozen=True)
class SpecPlan(_SubPlan):
    """A speculative plan (docs/PROTOCOL.md "Speculative plans", docs/SPEC.md)."""

    WIRE = "spec"
    mode: str
    bytes_per_token: int
    draft: str
    chunks: int | None = None
    fanout: int | None = None
    seed: int | None = None
    ranked: tuple[int, ...] | None = None
    scale: float | None = None
    batch_window_ms: float | None = None
    max_batch: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        if self.ranked is not None:
            d["ranked"] = list(self.ranked)
        return d

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> "SpecPlan":
        validate(obj, cls.WIRE)
        return cls(**{**obj, **({"ranked": tuple(obj["ranked"])} if "ranked" in obj else {})})


@dataclass(frozen=True)
class DrafterPlan(_SubPlan):
    """A plan served by the server's drafter model (docs/DRAFTER.md): each request's rows run
    its forward, the reply carries the argmax ids. `early` (streamed plans): what runs as each
    tap's chunk lands (off, fc: the tap's slice of fc, all: the whole forward once the last
    tap is in, for each of the K + 1 candidate rows)."""

    WIRE = "drafter"
    early: str = "off"


#: a sub-record's PLAN key -> its type (Plan's typed blocks)
SUB_PLANS: dict[str, type[_SubPlan]] = {"spec": SpecPlan, "group": GroupPlan, "stream": StreamPlan,
                                         "drafter": DrafterPlan}


@dataclass(frozen=True)
class Tail:
    """One array that follows a plan's last reply (int64, `columns` per cycle), in the order
    its kind declares (Plan.tails): the server sends them, the client receives them."""

    name: str
    columns: int = 1


#: a staged GPU server's copy times (h2d, d2h per cycle)
SERVER_STAGES = Tail("server_stages", 2)
#: a drafter's own times per cycle: its forward (draft_ns, the GPU's own time where it has
#: one), its wait in the queue for a batch, the rows of the batch it ran in, its early work
DRAFT_TAIL = Tail("draft", 7)


@dataclass(frozen=True)
class Plan:
    """What the client asks the server to do for one payload."""

    transport: str
    request_bytes: int
    reply_bytes: int
    k: int
    id_bytes: int
    cycles: int  # timed cycles
    warmup: int  # warm-up cycles (run, recorded, excluded from statistics)
    verify: bool = False
    payload_crc32: int | None = None
    gap_ms: float = 0.0  # client think time between cycles (informational for the server)
    transport_settings: dict[str, Any] | None = None
    # where each end keeps the payload (docs/PROTOCOL.md, "GPU memory"): the client's
    # request source / reply destination, the server's request destination / reply source
    client_memory: str = "host"
    server_memory: str = "host"
    gpu_path: str = "staged"  # "staged" (explicit pinned copies) or "direct" (CUDA-aware transport)
    spec: SpecPlan | None = None  # a speculative plan (docs/PROTOCOL.md "Speculative plans")
    codec: str | None = None  # a codec plan (docs/PROTOCOL.md "Codec plans"): requests cross encoded
    codec_group: int = 0  # a lossy codec's values per scale (one token's layer: the hidden width)
    group: GroupPlan | None = None  # plans started together
    stream: StreamPlan | None = None  # a streamed plan
    drafter: DrafterPlan | None = None  # served by the server's drafter model

    @property
    def kind(self) -> str:
        """The plan's kind: the key of its paths in hopbench.core.kinds.KINDS (docs/ARCHITECTURE.md
        "Adding a plan kind"). The one place a plan's blocks are read to classify it."""
        if self.stream is not None:
            return "stream" if self.drafter is None else "stream-draft"
        if self.spec is not None:
            return "spec"
        if self.drafter is not None:
            return "draft"
        return "round-trip"  # its paths vary by the body (raw, codec, staged, direct)

    @property
    def body(self) -> str:
        """How the request's bytes live and cross, the axis beside `kind` that a kind's paths
        vary by (each keeps a table keyed by it, as KINDS is keyed by kind): "codec" (encoded
        in the hop), "staged" or "direct" (CUDA memory at one end or both, by gpu_path), else
        "raw" (host memory). Declared here once, so no path re-derives it."""
        if self.codec is not None:
            return "codec"
        return self.gpu_path if self.uses_gpu else "raw"

    @property
    def tails(self) -> list[Tail]:
        """What follows the last reply, in order (docs/PROTOCOL.md "After the last reply")."""
        out: list[Tail] = []
        if self.stream is not None:
            out.append(Tail("server_hold_ns"))
        if self.codec is not None and self.spec is None:
            out.append(Tail("decode_ns"))
        if self.server_stages:
            out.append(SERVER_STAGES)
        if self.drafter is not None:
            out.append(DRAFT_TAIL)
        return out

    @property
    def uses_gpu(self) -> bool:
        return "cuda" in (self.client_memory, self.server_memory)

    @property
    def server_stages(self) -> bool:
        """The server times its own copies and sends them after the cycles (a codec plan
        sends its decode times instead: its copies are inside the decode)."""
        return self.codec is None and self.server_memory == "cuda" and self.gpu_path == "staged"

    @property
    def request_frame_bytes(self) -> int:
        """The size of the client's first data message of a cycle (its aborts are cut to it):
        a codec plan's frame header, a streamed plan's chunk, else the whole request."""
        if self.stream is not None:
            return self.stream.chunk_bytes
        return CODEC_FRAME_BYTES if self.codec else self.request_bytes

    @property
    def total(self) -> int:
        """Round trips on the wire: 1 untimed + warm-up + timed."""
        return 1 + self.warmup + self.cycles

    def to_wire(self) -> dict[str, Any]:
        """The PLAN body: only the keys docs/PROTOCOL.md lists (an absent spec is not sent)."""
        d = asdict(self)
        d["transport_settings"] = d["transport_settings"] or {}
        for key in ("codec", *SUB_PLANS):
            block = getattr(self, key)
            if block is None:
                del d[key]
            elif key in SUB_PLANS:
                d[key] = block.to_dict()
        if d["codec_group"] == 0:
            del d["codec_group"]
        return d

    def range_error(self) -> str | None:
        """Why these values cannot describe a plan at all (an ERROR, not a REFUSE), or None."""
        if self.request_bytes < SEQ_BYTES:
            return f"request_bytes {self.request_bytes} is below the {SEQ_BYTES}-byte sequence header"
        if self.id_bytes not in ID_CODES:
            return f"id_bytes must be one of {sorted(ID_CODES)}"
        if not 1 <= self.k <= 64:
            return "k must be between 1 and 64"
        if self.reply_bytes < self.k * self.id_bytes:
            return f"reply_bytes {self.reply_bytes} cannot hold {self.k} ids of {self.id_bytes} bytes"
        if self.cycles < 1:
            return "cycles must be at least 1"
        if self.codec is not None and not 1 <= self.codec_group <= 1 << 20:
            return "a codec plan's codec_group must be between 1 and 1048576"
        if self.stream is not None:
            wrong = self._stream_error()
            if wrong:
                return wrong
        if self.group is not None:
            if not 1 <= len(self.group.id) <= MAX_GROUP_ID:
                return f"a group's id must be 1 to {MAX_GROUP_ID} characters"
            if not 1 <= self.group.size <= MAX_GROUP:
                return f"a group's size must be between 1 and {MAX_GROUP}"
        return None

    def _stream_error(self) -> str | None:
        assert self.stream is not None
        chunks, size = self.stream.chunks, self.stream.chunk_bytes
        if not 1 <= chunks <= MAX_STREAM_CHUNKS:
            return f"a streamed plan's chunks must be between 1 and {MAX_STREAM_CHUNKS}"
        if size < STREAM_END_BYTES:
            return f"a streamed plan's chunk_bytes must be at least {STREAM_END_BYTES}"
        if self.request_bytes != chunks * size:
            return f"a streamed plan's request_bytes must be chunks x chunk_bytes = {chunks * size}"
        if self.spec is not None or self.verify:
            return "a streamed plan runs without spec and without verify"
        if self.drafter is not None and self.codec is not None:
            return "a streamed plan to the drafter model sends raw chunks: not with a codec"
        if self.uses_gpu and self.codec is not None:
            return "a streamed plan in cuda memory sends raw chunks: not with a codec"
        return None

    @classmethod
    def from_wire(cls, obj: dict[str, Any]) -> "Plan":
        validate(obj, "PLAN")
        crc = obj.get("payload_crc32")
        if crc is not None and crc >= U32:
            raise ProtocolError("PLAN: 'payload_crc32' must be null or an unsigned 32-bit integer")
        if obj.get("verify") and crc is None:
            raise ProtocolError("PLAN: 'verify' is true but 'payload_crc32' is null")
        if "codec_group" in obj and "codec" not in obj:
            raise ProtocolError("PLAN: 'codec_group' without 'codec' (it sizes a codec plan's groups)")
        plan = cls(
            transport=obj["transport"], request_bytes=obj["request_bytes"], reply_bytes=obj["reply_bytes"],
            k=obj["k"], id_bytes=obj["id_bytes"], cycles=obj["cycles"], warmup=obj["warmup"],
            verify=bool(obj.get("verify", False)), payload_crc32=crc, gap_ms=float(obj.get("gap_ms", 0.0)),
            transport_settings=obj.get("transport_settings") or {},
            client_memory=obj.get("client_memory", "host"), server_memory=obj.get("server_memory", "host"),
            gpu_path=obj.get("gpu_path", "staged"), codec=obj.get("codec"), codec_group=obj.get("codec_group", 0),
            **{key: t.from_dict(obj[key]) for key, t in SUB_PLANS.items() if key in obj},
        )
        wrong = plan.range_error()
        if wrong:
            raise ProtocolError(f"PLAN: {wrong}")
        return plan


def send_tails(channel: Any, plan: Plan, values: dict[str, Any]) -> None:
    """The server's end of a plan: each of its kind's tails (Plan.tails), in order."""
    for tail in plan.tails:
        channel.send(memoryview(values[tail.name]).cast("B"))


def recv_tails(channel: Any, plan: Plan) -> dict[str, Any]:
    """The client's end of a plan: each of its kind's tails (Plan.tails), in order, as int64
    arrays of plan.total rows (and the tail's columns)."""
    import numpy as np

    out = {}
    for tail in plan.tails:
        a = np.zeros((plan.total, tail.columns) if tail.columns > 1 else plan.total, dtype=np.int64)
        channel.recv_into(a.view(np.uint8).reshape(-1))
        out[tail.name] = a
    return out


@dataclass(frozen=True)
class Caps:
    """Server-side limits, announced in the server HELLO and enforced on every PLAN."""

    max_request_bytes: int = MAX_MESSAGE_BYTES
    max_reply_bytes: int = MAX_MESSAGE_BYTES
    max_cycles: int = MAX_CYCLES

    def check(self, plan: Plan) -> str | None:
        """A refusal reason (a well-formed plan over a cap), or None when it is acceptable.
        Values that cannot describe a plan at all are Plan.range_error's (an ERROR)."""
        wrong = plan.range_error()
        if wrong:
            return wrong
        if plan.request_bytes > self.max_request_bytes:
            return f"request_bytes {plan.request_bytes} exceeds the server cap of {self.max_request_bytes} (--max-request-bytes)"
        if plan.reply_bytes > self.max_reply_bytes:
            return f"reply_bytes {plan.reply_bytes} exceeds the server cap of {self.max_reply_bytes}"
        if plan.total > self.max_cycles:
            return f"{plan.total} round trips exceed the server cap of {self.max_cycles} per plan (--max-cycles)"
        return None


class ReplyIds:
    """Packs and checks the K ids of a reply for one plan.

    The K ids of seq are consecutive integers, so their little-endian concatenation is
    one integer, seq*k*A + C with A = sum(2**(w*i)) and C = sum(i * 2**(w*i)) (w = id bits),
    as long as no id wraps around. `packer`/`checker` use that on the hot path (one
    multiply-add and a to_bytes/from_bytes of k*id_bytes bytes); the general struct path
    handles wrap-around and errors."""

    def __init__(self, k: int, id_bytes: int):
        self.k = k
        self.mask = (1 << (8 * id_bytes)) - 1
        self.struct = struct.Struct("<%d%s" % (k, ID_CODES[id_bytes]))
        self.span = self.struct.size
        bits = 8 * id_bytes
        self._ka = k * sum(1 << (bits * i) for i in range(k))
        self._c = sum(i << (bits * i) for i in range(k))
        self._limit = (self.mask - k + 1) // k + 1  # seqs below this never wrap

    def expected(self, seq: int) -> tuple[int, ...]:
        base = seq * self.k
        return tuple(map(self.mask.__and__, range(base, base + self.k)))

    def pack(self, buf: Any, seq: int, corrupt: bool = False) -> None:
        ids = self.expected(seq)
        if corrupt:  # the server's signal that the request checksum failed
            ids = tuple(v ^ self.mask for v in ids)
        self.struct.pack_into(buf, 0, *ids)

    def check(self, buf: Any, seq: int) -> None:
        got = self.struct.unpack_from(buf, 0)
        want = self.expected(seq)
        if got != want:
            if got == tuple(v ^ self.mask for v in want):
                raise VerifyError(f"server reports a request checksum mismatch at seq {seq}")
            raise VerifyError(f"reply to seq {seq} carries ids {list(got)}, expected {list(want)} (stale or wrong reply)")

    def packer(self, buf: Any) -> Callable[[int], None]:
        """pack(seq) writing the ids of seq into buf (fast path; see class docstring)."""
        head = memoryview(buf).cast("B")[: self.span]
        ka, c, limit, span, slow = self._ka, self._c, self._limit, self.span, self.pack

        def pack(seq: int) -> None:
            if seq < limit:
                head[:] = (seq * ka + c).to_bytes(span, "little")
            else:
                slow(buf, seq)

        return pack

    def checker(self, buf: Any) -> Callable[[int], None]:
        """check(seq) raising VerifyError unless buf carries the ids of seq."""
        head = memoryview(buf).cast("B")[: self.span]
        ka, c, limit, slow = self._ka, self._c, self._limit, self.check
        from_bytes = int.from_bytes

        def check(seq: int) -> None:
            if seq >= limit or from_bytes(head, "little") != seq * ka + c:
                slow(buf, seq)

        return check


def _reason(obj: dict[str, Any]) -> str:
    r = obj.get("reason")
    return r[:500] if isinstance(r, str) else "(no reason given)"


# ---- aborting a plan on the data stream -------------------------------------------------
#
# Either end may end a plan early by sending, in place of its next data message, an ERROR
# frame (header + body) carried in whole data messages of the size the other end expects:
# the frame's bytes, zero-padded to a multiple of that size, sent as consecutive messages.
# The receiver sees the magic at offset 0 of a message (a request's seq or a reply's ids
# can never start with it: docs/PROTOCOL.md), reads the header (and more messages if
# needed) and then the body. The same rule works on a byte stream and on message-framed
# transports.


def abort_messages(reason: str, size: int) -> list[bytes]:
    body = encode_body({"reason": reason[:1000]})
    frame = pack_header(ERROR, len(body)) + body
    n = -(-len(frame) // size)
    frame = frame.ljust(n * size, b"\0")
    return [frame[i * size:(i + 1) * size] for i in range(n)]


def send_abort(channel: Any, reason: str, size: int) -> None:
    for msg in abort_messages(reason, size):
        channel.send(msg)


def is_abort(first: Any) -> bool:
    return bytes(memoryview(first).cast("B")[:4]) == MAGIC


def read_abort(channel: Any, first: Any) -> str:
    """The reason of an abort whose first data message is `first` (receiving the rest of
    the frame's messages, of the same size, from `channel`)."""
    size = len(memoryview(first).cast("B"))
    data = bytearray(memoryview(first).cast("B"))
    buf = bytearray(size)
    while len(data) < HEADER_BYTES:
        channel.recv_into(buf)
        data += buf
    msg_type, length = unpack_header(bytes(data[:HEADER_BYTES]))
    if msg_type != ERROR:
        raise ProtocolError(f"a data message carries a {TYPE_NAMES[msg_type]} frame; only ERROR may abort a plan")
    while len(data) < HEADER_BYTES + length:
        channel.recv_into(buf)
        data += buf
    obj = validate(decode_body(bytes(data[HEADER_BYTES:HEADER_BYTES + length])), "ERROR") if length else {}
    return _reason(obj)
