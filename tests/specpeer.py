"""A client and a server written only from docs/PROTOCOL.md (version 3), importing nothing
from hopbench. CI runs them against the real `hopbench serve` and `hopbench run`
(tests/test_protocol_contract.py), error cases included. Stdlib only, tcp transport."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
import threading

VERSION = 3
HEADER = struct.Struct("<4sHHII")
HELLO, PLAN, ACCEPT, REFUSE, BYE, ERROR, AUTH, DONE, ENV = 1, 2, 3, 4, 5, 6, 7, 8, 9


def mac(secret: str, *parts: str) -> str:
    return hmac.new(secret.encode("utf-8"), "|".join(parts).encode("utf-8"), hashlib.sha256).hexdigest()


class Wire:
    """Frames; after authentication each is followed by its 32-byte tag (Session binding)."""

    role = b"c"

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.key: bytes | None = None
        self.sent = self.received = 0
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def bind(self, secret: str, challenge: str, nonce: str) -> None:
        self.key = hmac.new(secret.encode(), f"session|{challenge}|{nonce}".encode(), hashlib.sha256).digest()

    def tag(self, direction: bytes, counter: int, frame: bytes) -> bytes:
        assert self.key is not None
        return hmac.new(self.key, direction + struct.pack("<Q", counter) + frame, hashlib.sha256).digest()

    def proof(self, role: str, plan_no: int) -> bytes:
        assert self.key is not None
        return hmac.new(self.key, f"data|{role}|{plan_no}".encode(), hashlib.sha256).digest()

    def send_frame(self, t: int, obj=None, raw: bytes | None = None, version: int = VERSION) -> None:
        body = raw if raw is not None else (json.dumps(obj).encode() if obj is not None else b"")
        frame = HEADER.pack(b"HOPB", version, t, len(body), 0) + body
        if self.key is not None:
            frame += self.tag(self.role, self.sent, frame)
            self.sent += 1
        self.sock.sendall(frame)

    def recv_exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError(f"peer closed after {len(buf)} of {n} bytes")
            buf += chunk
        return buf

    def recv_frame(self) -> tuple[int, dict]:
        header = self.recv_exact(16)
        magic, ver, t, n, _ = HEADER.unpack(header)
        assert magic == b"HOPB" and ver == VERSION, (magic, ver)
        body = self.recv_exact(n) if n else b""
        if self.key is not None:
            want = self.tag(b"s" if self.role == b"c" else b"c", self.received, header + body)
            self.received += 1
            assert hmac.compare_digest(self.recv_exact(32), want), "a frame failed the session's tag"
        return t, (json.loads(body) if n else {})

    def closed(self, timeout: float = 5.0) -> bool:
        """True when the peer closes (EOF or reset) without sending more."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def read_abort(self, first: bytes, size: int) -> str:
        """An abort on the data stream: an ERROR frame in messages of `size` bytes."""
        data = first
        while len(data) < 16:
            data += self.recv_exact(size)
        magic, ver, t, n, _ = HEADER.unpack(data[:16])
        assert magic == b"HOPB" and t == ERROR
        while len(data) < 16 + n:
            data += self.recv_exact(size)
        return json.loads(data[16:16 + n])["reason"]

    def send_abort(self, reason: str, size: int) -> None:
        body = json.dumps({"reason": reason}).encode()
        frame = HEADER.pack(b"HOPB", VERSION, ERROR, len(body), 0) + body
        frame += b"\0" * (-len(frame) % size)
        self.sock.sendall(frame)


class SpecClient(Wire):
    def __init__(self, host: str, port: int):
        super().__init__(socket.create_connection((host, port), timeout=10))

    def handshake(self, secret: str | None = None) -> dict:
        hello = {"protocol": VERSION, "role": "client", "software": "spec-client"}
        if secret is None:
            hello["env"] = {}
        self.send_frame(HELLO, hello)
        t, server_hello = self.recv_frame()
        assert t == HELLO, (t, server_hello)
        ch = (server_hello.get("auth") or {}).get("challenge")
        if secret is not None:
            assert ch, "a client holding a secret refuses a server that does not authenticate"
            nonce = os.urandom(16).hex()
            self.send_frame(AUTH, {"nonce": nonce, "mac": mac(secret, "client", ch, nonce)})
            t, auth = self.recv_frame()
            assert t == AUTH and hmac.compare_digest(auth["mac"], mac(secret, "server", nonce, ch))
            self.bind(secret, ch, nonce)
            self.send_frame(ENV, {"env": {}})
        return server_hello

    def plan(self, request_bytes=184320, reply_bytes=8, k=2, id_bytes=4, cycles=20, warmup=3) -> tuple[int, dict]:
        self.send_frame(PLAN, {"transport": "tcp", "request_bytes": request_bytes, "reply_bytes": reply_bytes,
                               "k": k, "id_bytes": id_bytes, "cycles": cycles, "warmup": warmup})
        return self.recv_frame()

    def done(self) -> int:
        """DONE after a plan's last reply: the cycles the server served."""
        t, obj = self.recv_frame()
        assert t == DONE, (t, obj)
        return obj["cycles"]

    def cycles(self, request_bytes: int, reply_bytes: int, k: int, id_bytes: int, total: int) -> None:
        req = bytearray(request_bytes)
        code = {2: "H", 4: "I", 8: "Q"}[id_bytes]
        for seq in range(total):
            struct.pack_into("<Q", req, 0, seq)
            self.sock.sendall(req)
            reply = self.recv_exact(reply_bytes)
            ids = struct.unpack_from(f"<{k}{code}", reply)
            assert ids == tuple((seq * k + i) % 2 ** (8 * id_bytes) for i in range(k)), (seq, ids)
            assert not any(reply[k * id_bytes:]), "the reply tail is zero"


class SpecServer(Wire):
    role = b"s"
    """One session at a time in a thread. `mode`: "normal"; "impostor" (never offers
    authentication, measures anyway); "abort" (aborts the plan after 5 round trips);
    "tail" (non-zero bytes after the ids); "linger" (stays open after BYE)."""

    def __init__(self, mode: str = "normal", secret: str | None = None):
        self.mode = mode
        self.secret = secret
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.seen: list[tuple[int, dict]] = []  # frames received, for the tests
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        super().__init__(conn)
        try:
            self._session()
        except (EOFError, OSError, AssertionError):
            pass
        finally:
            if self.mode != "linger":
                conn.close()

    def _session(self) -> None:
        t, hello = self.recv_frame()
        self.seen.append((t, hello))
        offer = self.secret is not None and self.mode != "impostor"
        ch = os.urandom(16).hex() if offer else None
        reply = {"protocol": VERSION, "role": "server", "software": "spec-server",
                 "caps": {"max_request_bytes": 1 << 26, "max_reply_bytes": 1 << 26, "max_cycles": 10**6},
                 "auth": {"challenge": ch} if ch else None}
        if not ch:
            reply["env"] = {"hostname": "spec"}
        self.send_frame(HELLO, reply)
        if ch:
            t, auth = self.recv_frame()
            self.seen.append((t, auth))
            if not hmac.compare_digest(auth["mac"], mac(self.secret, "client", ch, auth["nonce"])):
                self.send_frame(REFUSE, {"reason": "authentication failed: wrong or missing secret"})
                return
            self.send_frame(AUTH, {"mac": mac(self.secret, "server", auth["nonce"], ch), "env": {"hostname": "spec"}})
            self.bind(self.secret, ch, auth["nonce"])
            t, env = self.recv_frame()
            self.seen.append((t, env))
            assert t == ENV
        while True:
            t, obj = self.recv_frame()
            self.seen.append((t, obj))
            if t == BYE:
                if self.mode == "linger":
                    self.sock.sendall(b"x")
                return
            assert t == PLAN
            self.send_frame(ACCEPT, {"data_port": None, "transport_info": {}})
            k, w, n = obj["k"], obj["id_bytes"], obj["reply_bytes"]
            code = {2: "H", 4: "I", 8: "Q"}[w]
            total = 1 + obj["warmup"] + obj["cycles"]
            for seq in range(total):
                req = self.recv_exact(obj["request_bytes"])
                if req[:4] == b"HOPB":
                    self.seen.append((ERROR, {"reason": self.read_abort(req, obj["request_bytes"])}))
                    break
                if self.mode == "abort" and seq == 5:
                    self.send_abort("spec server: out of draft slots", n)
                    return
                reply = bytearray(n)
                struct.pack_into(f"<{k}{code}", reply, 0, *((seq * k + i) % 2 ** (8 * w) for i in range(k)))
                if self.mode == "tail" and n > k * w:
                    reply[-1] = 0x5A
                self.sock.sendall(reply)
            else:
                self.send_frame(DONE, {"cycles": total})

    def close(self) -> None:
        self.listener.close()
        self.thread.join(timeout=10)


# ---- data channels (docs/PROTOCOL.md "Data channels"), each opened from the document ------

def request(seq: int, size: int) -> bytes:
    return struct.pack("<Q", seq) + bytes(size - 8)


def check_reply(reply: bytes, seq: int, k: int, id_bytes: int) -> None:
    code = {2: "H", 4: "I", 8: "Q"}[id_bytes]
    assert struct.unpack_from(f"<{k}{code}", reply) == tuple((seq * k + i) % 2 ** (8 * id_bytes) for i in range(k))


class ZmqData:
    """zmq: a PAIR socket connected to tcp://HOST:data_port; "HOPBZMQ1" each way; one message
    per request and per reply; an empty message before closing."""

    HELLO = b"HOPBZMQ1"

    def __init__(self, host: str, port: int, timeout_s: float = 10.0):
        import zmq

        self.sock = zmq.Context.instance().socket(zmq.PAIR)
        self.sock.setsockopt(zmq.LINGER, 1000)
        self.sock.setsockopt(zmq.RCVTIMEO, int(timeout_s * 1000))
        self.sock.setsockopt(zmq.SNDTIMEO, int(timeout_s * 1000))
        self.sock.connect(f"tcp://{host}:{port}")
        self.sock.send(self.HELLO)
        self.answer = self.sock.recv()

    def send(self, data: bytes) -> None:
        self.sock.send(data)

    def recv(self) -> bytes:
        return self.sock.recv()

    def close(self) -> None:
        self.sock.send(b"")
        self.sock.close()


class UcxData:
    """ucx: a UCX endpoint to the listener on data_port; tag messages, client -> server tag 1,
    server -> client tag 2; "HOPBUCX1" each way."""

    HELLO = b"HOPBUCX1"

    def __init__(self, host: str, port: int, timeout_s: float = 10.0):
        os.environ.setdefault("RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY", "false")
        import libucx

        libucx.load_library()
        import numpy as np
        import ucxx._lib.libucxx as u
        from ucxx._lib.arr import Array

        self.np, self.u, self.Array, self.timeout_s = np, u, Array, timeout_s
        self.ctx = u.UCXContext({"TLS": "tcp"}, feature_flags=(u.Feature.TAG,))
        self.worker = u.UCXWorker(self.ctx)
        self.ep = u.UCXEndpoint.create(self.worker, host, port, True)
        self.send(self.HELLO)
        self.answer = self.recv(len(self.HELLO))

    def _wait(self, req) -> None:
        import time

        deadline = time.monotonic() + self.timeout_s
        while not req.completed:
            self.worker.progress()
            assert time.monotonic() < deadline, "UCX request timed out"
        req.check_error()

    def send(self, data: bytes) -> None:
        buf = self.np.frombuffer(bytearray(data), dtype=self.np.uint8)  # held until the send completes
        self._wait(self.ep.tag_send(self.Array(buf), self.u.UCXXTag(1)))

    def recv(self, n: int) -> bytes:
        buf = self.np.zeros(n, dtype=self.np.uint8)
        self._wait(self.ep.tag_recv(self.Array(buf), self.u.UCXXTag(2)))
        return buf.tobytes()

    def close(self) -> None:
        self.ep.close_blocking(10_000_000, 100)


def nixl_setup(host: str, port: int, chan_id: int, metadata: bytes) -> bytes:
    """nixl: the client's setup block (u32 big-endian length, "HOPBNIX1", the channel id as u32
    big-endian, the agent's metadata) over TCP to data_port; returns the server's block."""
    sock = socket.create_connection((host, port), timeout=10)
    try:
        body = b"HOPBNIX1" + struct.pack("!I", chan_id) + metadata
        sock.sendall(struct.pack("!I", len(body)) + body)
        n = b""
        while len(n) < 4:
            got = sock.recv(4 - len(n))
            assert got, "the server closed during setup"
            n += got
        want = struct.unpack("!I", n)[0]
        out = b""
        while len(out) < want:
            got = sock.recv(want - len(out))
            assert got, "the server closed during setup"
            out += got
        return out
    finally:
        sock.close()
