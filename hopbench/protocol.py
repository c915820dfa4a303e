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
import struct
from dataclasses import asdict, dataclass
from typing import Any

from hopbench.errors import ProtocolError, Refused, VerifyError

MAGIC = b"HOPB"
VERSION = 1
HEADER = struct.Struct("<4sHHII")
HEADER_BYTES = HEADER.size  # 16
MAX_BODY = 65536  # control bodies are small JSON objects; never allocate more than this
SEQ = struct.Struct("<Q")
SEQ_BYTES = SEQ.size

HELLO, PLAN, ACCEPT, REFUSE, BYE, ERROR, AUTH = 1, 2, 3, 4, 5, 6, 7
TYPE_NAMES = {HELLO: "HELLO", PLAN: "PLAN", ACCEPT: "ACCEPT", REFUSE: "REFUSE", BYE: "BYE", ERROR: "ERROR", AUTH: "AUTH"}
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


def decode_body(body: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"control body is not UTF-8 JSON ({exc.__class__.__name__})") from None
    if not isinstance(obj, dict):
        raise ProtocolError("control body is not a JSON object")
    return obj


def send_msg(channel, msg_type: int, obj: dict[str, Any] | None = None) -> None:
    body = encode_body(obj) if obj is not None else b""
    if len(body) > MAX_BODY:
        raise ProtocolError(f"control message too large ({len(body)} bytes)")
    channel.send(pack_header(msg_type, len(body)))
    if body:
        channel.send(body)


def recv_msg(channel, *expected: int) -> tuple[int, dict[str, Any]]:
    """Receive one control frame. REFUSE and ERROR become exceptions; a type outside
    `expected` is a ProtocolError."""
    header = bytearray(HEADER_BYTES)
    channel.recv_into(header)
    msg_type, length = unpack_header(bytes(header))
    obj: dict[str, Any] = {}
    if length:
        body = bytearray(length)
        channel.recv_into(body)
        obj = decode_body(bytes(body))
    if msg_type == REFUSE and REFUSE not in expected:
        raise Refused(f"server refused: {obj.get('reason', '(no reason given)')}")
    if msg_type == ERROR and ERROR not in expected:
        raise ProtocolError(f"peer reported an error: {obj.get('reason', '(no reason given)')}")
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
    transport_settings: dict | None = None
    # where each end keeps the payload (docs/PROTOCOL.md, "GPU memory"): the client's
    # request source / reply destination, the server's request destination / reply source
    client_memory: str = "host"
    server_memory: str = "host"
    gpu_path: str = "staged"  # "staged" (explicit pinned copies) or "direct" (CUDA-aware transport)

    @property
    def uses_gpu(self) -> bool:
        return "cuda" in (self.client_memory, self.server_memory)

    @property
    def server_stages(self) -> bool:
        """The server times its own copies and sends them after the cycles."""
        return self.server_memory == "cuda" and self.gpu_path == "staged"

    @property
    def total(self) -> int:
        """Round trips on the wire: 1 untimed + warm-up + timed."""
        return 1 + self.warmup + self.cycles

    def to_wire(self) -> dict[str, Any]:
        d = asdict(self)
        d["transport_settings"] = d["transport_settings"] or {}
        return d

    @classmethod
    def from_wire(cls, obj: dict[str, Any]) -> "Plan":
        ints = ("request_bytes", "reply_bytes", "k", "id_bytes", "cycles", "warmup")
        for key in ints:
            v = obj.get(key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ProtocolError(f"plan field {key!r} must be a non-negative integer")
        if not isinstance(obj.get("transport"), str):
            raise ProtocolError("plan field 'transport' must be a string")
        crc = obj.get("payload_crc32")
        if crc is not None and (not isinstance(crc, int) or isinstance(crc, bool) or not 0 <= crc < 2**32):
            raise ProtocolError("plan field 'payload_crc32' must be null or an unsigned 32-bit integer")
        settings = obj.get("transport_settings") or {}
        if not isinstance(settings, dict):
            raise ProtocolError("plan field 'transport_settings' must be an object")
        gap = obj.get("gap_ms", 0.0)
        if not isinstance(gap, (int, float)) or isinstance(gap, bool):
            raise ProtocolError("plan field 'gap_ms' must be a number")
        mem = {}
        for key, choices in (("client_memory", ("host", "cuda")), ("server_memory", ("host", "cuda")),
                             ("gpu_path", ("staged", "direct"))):
            mem[key] = obj.get(key, choices[0])
            if mem[key] not in choices:
                raise ProtocolError(f"plan field {key!r} must be one of {', '.join(choices)}")
        return cls(
            **mem,
            transport=obj["transport"], request_bytes=obj["request_bytes"], reply_bytes=obj["reply_bytes"],
            k=obj["k"], id_bytes=obj["id_bytes"], cycles=obj["cycles"], warmup=obj["warmup"],
            verify=bool(obj.get("verify", False)), payload_crc32=crc, gap_ms=float(gap),
            transport_settings=settings,
        )


@dataclass(frozen=True)
class Caps:
    """Server-side limits, announced in the server HELLO and enforced on every PLAN."""

    max_request_bytes: int = 64 * 1024 * 1024
    max_reply_bytes: int = 64 * 1024 * 1024
    max_cycles: int = 1_000_000

    def check(self, plan: Plan) -> str | None:
        """Return a refusal reason, or None when the plan is acceptable."""
        if plan.request_bytes < SEQ_BYTES:
            return f"request_bytes {plan.request_bytes} is below the {SEQ_BYTES}-byte sequence header"
        if plan.request_bytes > self.max_request_bytes:
            return f"request_bytes {plan.request_bytes} exceeds the server cap of {self.max_request_bytes} (--max-request-bytes)"
        if plan.id_bytes not in ID_CODES:
            return f"id_bytes must be one of {sorted(ID_CODES)}"
        if not 1 <= plan.k <= 64:
            return "k must be between 1 and 64"
        if plan.reply_bytes < plan.k * plan.id_bytes:
            return f"reply_bytes {plan.reply_bytes} cannot hold {plan.k} ids of {plan.id_bytes} bytes"
        if plan.reply_bytes > self.max_reply_bytes:
            return f"reply_bytes {plan.reply_bytes} exceeds the server cap of {self.max_reply_bytes}"
        if plan.cycles < 1:
            return "cycles must be at least 1"
        if plan.total > self.max_cycles:
            return f"{plan.total} round trips exceed the server cap of {self.max_cycles} per plan (--max-cycles)"
        return None


class ReplyCodec:
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

    def pack(self, buf, seq: int, corrupt: bool = False) -> None:
        ids = self.expected(seq)
        if corrupt:  # the server's signal that the request checksum failed
            ids = tuple(v ^ self.mask for v in ids)
        self.struct.pack_into(buf, 0, *ids)

    def check(self, buf, seq: int) -> None:
        got = self.struct.unpack_from(buf, 0)
        want = self.expected(seq)
        if got != want:
            if got == tuple(v ^ self.mask for v in want):
                raise VerifyError(f"server reports a request checksum mismatch at seq {seq}")
            raise VerifyError(f"reply to seq {seq} carries ids {list(got)}, expected {list(want)} (stale or wrong reply)")

    def packer(self, buf):
        """pack(seq) writing the ids of seq into buf (fast path; see class docstring)."""
        head = memoryview(buf).cast("B")[: self.span]
        ka, c, limit, span, slow = self._ka, self._c, self._limit, self.span, self.pack

        def pack(seq: int) -> None:
            if seq < limit:
                head[:] = (seq * ka + c).to_bytes(span, "little")
            else:
                slow(buf, seq)

        return pack

    def checker(self, buf):
        """check(seq) raising VerifyError unless buf carries the ids of seq."""
        head = memoryview(buf).cast("B")[: self.span]
        ka, c, limit, slow = self._ka, self._c, self._limit, self.check
        from_bytes = int.from_bytes

        def check(seq: int) -> None:
            if seq >= limit or from_bytes(head, "little") != seq * ka + c:
                slow(buf, seq)

        return check


def auth_mac(secret: str, *parts: str) -> str:
    """HMAC-SHA256 over the nonces (hex), keyed by the shared secret; the secret itself
    never crosses the wire."""
    import hashlib
    import hmac

    return hmac.new(secret.encode(), "|".join(parts).encode(), hashlib.sha256).hexdigest()


def auth_ok(secret: str, mac: object, *parts: str) -> bool:
    import hmac

    return isinstance(mac, str) and hmac.compare_digest(mac, auth_mac(secret, *parts))
