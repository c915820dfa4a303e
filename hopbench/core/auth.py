"""Authentication and the bound session (docs/PROTOCOL.md "Authentication", "Session
binding"): the HMAC challenge-response over the nonces, the session key both ends derive,
and the per-frame tags and data-channel proofs of a bound session. A leaf: the frames'
reading and writing (core/protocol.py) call into it."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from hopbench.errors import ProtocolError

_HEX = frozenset("0123456789abcdef")


class SessionMismatch(ProtocolError):
    """A frame or a data channel that fails the session's tag: not the authenticated peer
    (a relay that passed the handshake through, or a tampered connection)."""


class Binding:
    """A session bound to its authentication (docs/PROTOCOL.md, "Session binding"): the key
    both ends derive from the secret and both nonces, and one frame counter per direction.
    Every frame after the AUTH exchange carries tag = HMAC-SHA256(key, direction | counter
    u64 LE | header | body), 32 bytes after the body."""

    def __init__(self, key: bytes, role: str):
        self.key, self.role = key, role
        self.sent = self.received = 0

    def _tag(self, direction: bytes, counter: int, frame: bytes) -> bytes:
        return hmac.new(self.key, direction + counter.to_bytes(8, "little") + frame, hashlib.sha256).digest()

    def seal(self, frame: bytes) -> bytes:
        tag = self._tag(self.role[:1].encode(), self.sent, frame)
        self.sent += 1
        return tag

    def check(self, frame: bytes, tag: bytes, kind: str = "frame") -> None:
        """SessionMismatch unless `tag` is the peer's next tag of `frame` (a `kind` frame)."""
        peer = b"s" if self.role == "client" else b"c"
        want = self._tag(peer, self.received, frame)
        self.received += 1
        if not hmac.compare_digest(want, bytes(tag)):
            raise SessionMismatch(f"the peer's {kind} failed the session's tag: it does not come from the peer that "
                                  "authenticated (a relay between the ends, or a tampered connection)")

    def prove_data(self, data: Any, plan_no: int, where: str) -> None:
        """Each end proves itself first on a plan's data channel, the server first; the peer's
        proof that fails is SessionMismatch (not the peer that authenticated: a relay).
        `where`: the data channel, as the error names it."""
        peer = "client" if self.role == "server" else "server"
        if self.role == "server":
            data.send(bytearray(self.data_proof("server", plan_no)))
        got = bytearray(32)
        data.recv_into(got)
        if not hmac.compare_digest(bytes(got), self.data_proof(peer, plan_no)):
            raise SessionMismatch(f"{where} failed the session's proof: not the {peer} that authenticated (a relay "
                                  "between the ends)")
        if self.role == "client":
            data.send(bytearray(self.data_proof("client", plan_no)))

    def data_proof(self, role: str, plan_no: int) -> bytes:
        """The 32 bytes each end sends first on a plan's data channel (server first)."""
        return hmac.new(self.key, f"data|{role}|{plan_no}".encode(), hashlib.sha256).digest()


def session_key(secret: str, challenge: str, nonce: str) -> bytes:
    """The bound session's key: HMAC-SHA256(secret, "session|C|N"), 32 raw bytes."""
    return hmac.new(secret.encode(), f"session|{challenge}|{nonce}".encode(), hashlib.sha256).digest()


def auth_mac(secret: str, *parts: str) -> str:
    """HMAC-SHA256 over the nonces (hex), keyed by the shared secret; the secret itself
    never crosses the wire."""
    return hmac.new(secret.encode(), "|".join(parts).encode(), hashlib.sha256).hexdigest()


def auth_ok(secret: str, mac: object, *parts: str) -> bool:
    if not (isinstance(mac, str) and len(mac) == 64 and set(mac) <= _HEX):  # compare_digest raises on non-ASCII str
        return False
    return hmac.compare_digest(str(mac), auth_mac(secret, *parts))
