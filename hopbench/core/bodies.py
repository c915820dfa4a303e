"""The control bodies (docs/PROTOCOL.md "Bodies"): one UTF-8 JSON object each, strictly
parsed (no duplicate keys, no constants, bounded nesting), and their schemas: SCHEMAS names
each body's keys, their kinds and whether they are required; `validate` checks a body
against one. hopbench.core.protocol re-exports these."""

from __future__ import annotations

import json
import math
from typing import Any

from hopbench.errors import ProtocolError

MAX_DEPTH = 32  # JSON nesting a body may have (objects and arrays)


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
             "stream": ("obj", False), "drafter": ("obj", False)},
    "drafter": {"early": (frozenset({"off", "fc", "all"}), False)},
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
