"""Seeds for each target, made by hopbench's own code: real frames, streams, files."""

from __future__ import annotations

import json
from pathlib import Path

from hopbench.core import auth
from hopbench.core import protocol as P

ROOT = Path(__file__).resolve().parent.parent


class _Sink:
    def __init__(self) -> None:
        self.out = bytearray()

    def send(self, buf: bytes) -> None:
        self.out += bytes(buf)


def frame(t: int, obj: dict | None = None, bind: auth.Binding | None = None) -> bytes:
    sink = _Sink()
    P.send_msg(sink, t, obj, bind)
    return bytes(sink.out)


def _plan(**kw: object) -> dict:
    return {**P.Plan("tcp", 64, 8, 2, 4, 3, 1).to_wire(), **kw}


def _session_streams() -> list[bytes]:
    hello = frame(P.HELLO, {"protocol": P.VERSION, "role": "client", "software": "seed", "env": {}})
    req = bytearray(64)
    cycles = b"".join(bytes(P.SEQ.pack(i)) + bytes(req[8:]) for i in range(5))
    plain = b"\0" + hello + frame(P.PLAN, _plan()) + cycles + frame(P.BYE)
    abort = b"\0" + hello + frame(P.PLAN, _plan()) + b"".join(P.abort_messages("seed abort", 64)) + frame(P.BYE)
    minimal = frame(P.HELLO, {"protocol": P.VERSION, "role": "client", "software": "seed"})
    auth = frame(P.AUTH, {"nonce": "0" * 32, "mac": "0" * 64})
    return [plain, abort, b"\1" + minimal + auth, b"\0" + hello + frame(P.PLAN, _plan(verify=True, payload_crc32=1))]


def seeds(target: str) -> list[bytes]:
    if target == "frame_server":
        return [frame(P.HELLO, {"protocol": P.VERSION, "role": "client", "software": "s", "env": {"a": [1]}}),
                frame(P.PLAN, _plan()), frame(P.AUTH, {"nonce": "0" * 32, "mac": "0" * 64}),
                frame(P.ENV, {"env": {}}), frame(P.BYE)]
    if target == "frame_client":
        return [frame(P.HELLO, {"protocol": P.VERSION, "role": "server", "software": "s", "auth": None, "env": {},
                                "caps": {"max_request_bytes": 1, "max_reply_bytes": 1, "max_cycles": 1}}),
                frame(P.ACCEPT, {"data_port": 5201, "transport_info": {}}), frame(P.DONE, {"cycles": 3}),
                frame(P.REFUSE, {"reason": "r"}), frame(P.AUTH, {"mac": "0" * 64, "env": {}})]
    if target == "session":
        return _session_streams()
    if target == "abort":
        return [b"\x08" + b"".join(P.abort_messages("seed", 16)), b"\x00" + b"".join(P.abort_messages("x" * 50, 8))]
    if target == "config":
        return [(ROOT / "configs" / "shape.toml").read_bytes(), (ROOT / "configs" / "sweep.toml").read_bytes()]
    if target == "cli_values":
        return [b"127.0.0.1:5201", b"[::1]:80", b"1,2,3", b"log:64:4096:5", b"15.88+-0.4", b"a=1.5,b=2", b"same"]
    if target == "result":
        golden = sorted((ROOT / "tests" / "golden").rglob("report.json"))[:2]
        return [p.read_bytes() for p in golden] + [json.dumps({"schema": "hopbench.run", "schema_version": 2,
                                                               "payloads": []}).encode()]
    if target == "codec_frame":
        return _codec_streams()
    if target == "hidden_file":
        return _hidden_files()
    raise KeyError(target)


def _codec_streams() -> list[bytes]:
    """For each codec and body size of the target: two real frames of synthetic states."""
    from fuzz.targets import CODEC_BODIES, CODEC_SPECS
    from hopbench.core import codec_wire, codecs
    from hopbench.workload import hidden

    src = hidden.synthetic(5, 6144, tokens=4)
    out = []
    for i, spec in enumerate(CODEC_SPECS):
        codec = codecs.parse(spec, 6144)
        for j, size in enumerate(CODEC_BODIES[:3]):
            stream = bytes([i, j])
            for seq, body in enumerate(src.bodies(size, None, 2)):
                enc = bytes(memoryview(codec.encode(body)).cast("B"))
                crc = codec_wire.expected_crcs(codec, [body])[0]
                stream += codecs.FRAME.pack(seq, len(enc), crc) + enc
            out.append(stream)
    return out


def _hidden_files() -> list[bytes]:
    """A safetensors file as safetensors writes it (BF16, 3 tokens x 2 x 8) and a .npy."""
    import io

    import numpy as np

    x = np.arange(48, dtype=np.float32).reshape(3, 2, 8)
    header = json.dumps({"h": {"dtype": "F32", "shape": [3, 2, 8], "data_offsets": [0, x.nbytes]}}).encode()
    st = len(header).to_bytes(8, "little") + header + x.tobytes()
    buf = io.BytesIO()
    np.save(buf, x.reshape(3, 16))
    return [b"\x00" + st, b"\x01" + buf.getvalue()]
