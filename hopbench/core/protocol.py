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

import json
import math
import struct
from dataclasses import asdict, dataclass
from typing import Any, Callable

from hopbench.core import auth
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
MAX_DEPTH = 32  # JSON nesting a body may have (objects and arrays)
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


def encode_body(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise ValueError(f"duplicate key {key[:40]!r}")
        obj[key] = value
    return obj


def _depth(v: Any) -> int:
    """Nesting of objects and arrays (a scalar: 0), without recursion."""
    deepest, stack = 0, [(v, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((y, d + 1) for y in (x.values() if isinstance(x, dict) else x))
    return deepest


def decode_body(body: bytes) -> dict[str, Any]:
    """One UTF-8 JSON object, or ProtocolError (never another exception): not UTF-8, not
    JSON, NaN/Infinity, a duplicate key, numbers beyond Python's digit limit, nesting deeper
    than MAX_DEPTH (or the parser's recursion limit), anything but an object."""
    try:
        obj = json.loads(body.decode("utf-8"), parse_constant=_no_constant, object_pairs_hook=_unique)
    except UnicodeDecodeError:
        raise ProtocolError("control body is not UTF-8") from None
    except RecursionError:
        raise ProtocolError("control body nests too deeply") from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, a number of too many digits
        raise ProtocolError(f"control body is not valid JSON ({str(exc)[:80]})") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"control body is a JSON {type(obj).__name__}, not an object")
    if _depth(obj) > MAX_DEPTH:
        raise ProtocolError(f"control body nests deeper than {MAX_DEPTH} levels")
    return obj


# ---- frame bodies: keys, types and ranges (docs/PROTOCOL.md, "Frame bodies") -------------

_HEX = frozenset("0123456789abcdef")
U32 = 2**32


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check(kind: Any, v: Any) -> bool:
    if isinstance(kind, tuple):  # one of several kinds
        return any(_check(k, v) for k in kind)
    if kind is None:
        return v is None
    if kind == "int":
        return _is_int(v) and 0 <= v < 2**63
    if kind == "port":
        return _is_int(v) and 1 <= v <= 65535
    if kind == "num":
        return (_is_int(v) or isinstance(v, float)) and math.isfinite(v) and v >= 0
    if kind == "str":
        return isinstance(v, str) and len(v) <= 4096
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "obj":
        return isinstance(v, dict)
    if kind == "intlist":
        return isinstance(v, list) and len(v) <= 64 and all(_is_int(x) and 0 <= x <= 64 for x in v)
    if kind == "namelist":
        return isinstance(v, list) and len(v) <= 64 and all(isinstance(x, str) and 0 < len(x) <= 64 for x in v)
    if kind == "hex32":
        return isinstance(v, str) and len(v) == 32 and set(v) <= _HEX
    if kind == "hex64":
        return isinstance(v, str) and len(v) == 64 and set(v) <= _HEX
    if isinstance(kind, frozenset):
        return isinstance(v, str) and v in kind
    raise AssertionError(kind)


def is_protocol_number(v: Any) -> bool:
    """A HELLO's `protocol` that names a version (a JSON integer 0..2^63-1): another one is
    answered REFUSE whatever else that version's HELLO holds; anything else is an ERROR."""
    return _check("int", v)


def _describe(kind: Any) -> str:
    if isinstance(kind, tuple):
        return " or ".join(_describe(k) for k in kind)
    if kind is None:
        return "null"
    if isinstance(kind, frozenset):
        return "one of " + ", ".join(sorted(kind))
    return {"int": "an integer 0..2^63-1", "port": "a port 1..65535", "num": "a finite number >= 0",
            "str": "a string (<= 4096 chars)", "bool": "true or false", "obj": "an object",
            "hex32": "32 lowercase hex digits", "hex64": "64 lowercase hex digits",
            "intlist": "a list of at most 64 integers 0..64"}[kind]


# name -> {key: (kind, required)}
SCHEMAS: dict[str, dict[str, tuple[Any, bool]]] = {
    "HELLO client": {"protocol": ("int", True), "role": (frozenset({"client"}), True), "software": ("str", True),
                     "env": ("obj", False)},
    "HELLO server": {"protocol": ("int", True), "role": (frozenset({"server"}), True), "software": ("str", True),
                     "caps": ("obj", True), "auth": (("obj", None), True), "env": ("obj", False)},
    "caps": {"max_request_bytes": ("int", True), "max_reply_bytes": ("int", True), "max_cycles": ("int", True),
             "max_sessions": ("int", False), "codecs": ("namelist", False)},
    "auth challenge": {"challenge": ("hex32", True)},
    "AUTH client": {"nonce": ("hex32", True), "mac": ("hex64", True)},
    "AUTH server": {"mac": ("hex64", True), "env": ("obj", True)},
    "ENV": {"env": ("obj", True)},
    "DONE": {"cycles": ("int", True)},
    "PLAN": {"transport": ("str", True), "request_bytes": ("int", True), "reply_bytes": ("int", True),
             "k": ("int", True), "id_bytes": ("int", True), "cycles": ("int", True), "warmup": ("int", True),
             "verify": ("bool", False), "payload_crc32": (("int", None), False), "gap_ms": ("num", False),
             "transport_settings": ("obj", False), "client_memory": (frozenset({"host", "cuda"}), False),
             "server_memory": (frozenset({"host", "cuda"}), False),
             "gpu_path": (frozenset({"staged", "direct"}), False), "spec": ("obj", False),
             "codec": ("str", False), "codec_group": ("int", False), "group": ("obj", False),
             "stream": ("obj", False)},
    "stream": {"chunks": ("int", True), "chunk_bytes": ("int", True)},
    "group": {"id": ("str", True), "size": ("int", True)},
    "spec": {"mode": (frozenset({"sync", "overlap", "stream"}), True), "bytes_per_token": ("int", True),
             "chunks": ("int", False),
             "fanout": ("int", False), "seed": ("int", False), "draft": ("str", True), "ranked": ("intlist", False),
             "scale": ("num", False), "batch_window_ms": ("num", False), "max_batch": ("int", False)},
    "ACCEPT": {"data_port": (("port", None), True), "transport_info": ("obj", True)},
    "REFUSE": {"reason": ("str", True)},
    "ERROR": {"reason": ("str", True)},
}


def validate(obj: dict[str, Any], name: str) -> dict[str, Any]:
    """Check a body against SCHEMAS[name]: every required key present, no unknown key,
    every value of its kind. ProtocolError naming the first fault."""
    schema = SCHEMAS[name]
    unknown = sorted(set(obj) - set(schema))
    if unknown:
        raise ProtocolError(f"{name}: unknown key {unknown[0][:40]!r}")
    for key, (kind, required) in schema.items():
        if key not in obj:
            if required:
                raise ProtocolError(f"{name}: missing key {key!r}")
            continue
        if not _check(kind, obj[key]):
            raise ProtocolError(f"{name}: {key!r} must be {_describe(kind)}")
    return obj


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
    spec: dict[str, Any] | None = None  # a speculative plan (docs/PROTOCOL.md "Speculative plans")
    codec: str | None = None  # a codec plan (docs/PROTOCOL.md "Codec plans"): requests cross encoded
    codec_group: int = 0  # a lossy codec's values per scale (one token's layer: the hidden width)
    #: plans started together (docs/PROTOCOL.md "Plans started together"): {"id": str, "size": M};
    #: the server holds this plan's ACCEPT until the group's M sessions have sent theirs
    group: dict[str, Any] | None = None
    #: a streamed plan (docs/PROTOCOL.md "Streamed plans"): {"chunks": C, "chunk_bytes": B}; each
    #: cycle's request crosses as C chunk messages of B bytes, then a 16-byte end message
    stream: dict[str, Any] | None = None

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
            return int(self.stream["chunk_bytes"])
        return CODEC_FRAME_BYTES if self.codec else self.request_bytes

    @property
    def total(self) -> int:
        """Round trips on the wire: 1 untimed + warm-up + timed."""
        return 1 + self.warmup + self.cycles

    def to_wire(self) -> dict[str, Any]:
        """The PLAN body: only the keys docs/PROTOCOL.md lists (an absent spec is not sent)."""
        d = asdict(self)
        d["transport_settings"] = d["transport_settings"] or {}
        for key in ("spec", "codec", "group", "stream"):
            if d[key] is None:
                del d[key]
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
            if not 1 <= len(self.group["id"]) <= MAX_GROUP_ID:
                return f"a group's id must be 1 to {MAX_GROUP_ID} characters"
            if not 1 <= self.group["size"] <= MAX_GROUP:
                return f"a group's size must be between 1 and {MAX_GROUP}"
        return None

    def _stream_error(self) -> str | None:
        assert self.stream is not None
        chunks, size = self.stream["chunks"], self.stream["chunk_bytes"]
        if not 1 <= chunks <= MAX_STREAM_CHUNKS:
            return f"a streamed plan's chunks must be between 1 and {MAX_STREAM_CHUNKS}"
        if size < STREAM_END_BYTES:
            return f"a streamed plan's chunk_bytes must be at least {STREAM_END_BYTES}"
        if self.request_bytes != chunks * size:
            return f"a streamed plan's request_bytes must be chunks x chunk_bytes = {chunks * size}"
        if self.spec is not None or self.verify:
            return "a streamed plan runs without spec and without verify"
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
            gpu_path=obj.get("gpu_path", "staged"), spec=validate(obj["spec"], "spec") if "spec" in obj else None,
            codec=obj.get("codec"), codec_group=obj.get("codec_group", 0),
            group=validate(obj["group"], "group") if "group" in obj else None,
            stream=validate(obj["stream"], "stream") if "stream" in obj else None,
        )
        wrong = plan.range_error()
        if wrong:
            raise ProtocolError(f"PLAN: {wrong}")
        return plan


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
