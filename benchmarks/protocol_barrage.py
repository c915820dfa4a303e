"""A barrage of malformed control frames against a real `hopbench serve` (a child process):
random bytes, JSON of every shape, deep nesting, huge numbers, NaN, non-ASCII auth fields,
unknown/missing keys, frames out of state. Per connection it counts the server's answers
(one ERROR or REFUSE expected) and at the end the tracebacks and log lines of the server.
Then a normal client must still be served. Prints the figures; exit 1 on any violation."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from hopbench.core import protocol as P  # noqa: E402
from hopbench.core.client import Session  # noqa: E402
from hopbench.orchestration.serverproc import parse_ready  # noqa: E402
from tests.specpeer import HEADER, SpecClient  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
SECRET = "barrage"
HELLO_OK = {"protocol": P.VERSION, "role": "client", "software": "barrage"}


def junk(rng: random.Random) -> bytes:
    leaves = [None, True, 0, -1, 2**70, 1.5, 1e308, "x", "é" * 40,
              "\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace")]
    leaf = lambda: rng.choice(leaves)  # noqa: E731
    kind = rng.randrange(10)
    if kind == 0:
        return rng.randbytes(rng.randrange(0, 200))
    if kind == 1:
        return b"[" * rng.randrange(500, 60000)
    if kind == 2:
        return b'{"k": ' + b"9" * rng.randrange(4000, 20000) + b"}"
    if kind == 3:
        return b'{"k": NaN, "cycles": Infinity}'
    if kind == 4:
        return json.dumps({"nonce": "é" * 32, "mac": "ü" * 64}).encode()
    if kind == 5:
        return json.dumps([leaf() for _ in range(rng.randrange(5))]).encode()
    keys = sorted(P.SCHEMAS["PLAN"]) + sorted(P.SCHEMAS["HELLO client"]) + ["", "zz", "__proto__"]
    d = {rng.choice(keys): leaf() for _ in range(rng.randrange(12))}
    if kind == 6:
        d = {"a" * rng.randrange(1, 3000): d}
    return json.dumps(d).encode()


def wait_port(logf) -> int:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        logf.seek(0)
        for line in logf:
            if parse_ready(line):
                return parse_ready(line)[1]
        time.sleep(0.05)  # polling a file the child writes; not synchronisation of the measurement
    raise SystemExit("the server did not start")


def main() -> int:
    rng = random.Random(2026)
    results = {}
    for secret in (None, SECRET):
        args = [sys.executable, "-m", "hopbench", "serve", "--bind", "127.0.0.1:0", "--idle-timeout", "2"]
        env_secret = {"HOPBENCH_SECRET": secret} if secret else {}
        import os
        import tempfile

        logf, errf = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")  # a pipe would fill and block it
        srv = subprocess.Popen(args, stdout=logf, stderr=errf, text=True, env={**os.environ, **env_secret})
        port = wait_port(logf)
        answers = {"one ERROR": 0, "one REFUSE": 0, "ACCEPT (well-formed plan)": 0, "none (client's own ERROR/BYE)": 0,
                   "other": 0}
        t0 = time.monotonic()
        for _ in range(N // 2):
            c = SpecClient("127.0.0.1", port)
            state = rng.choice(["AWAIT_HELLO", "READY" if not secret else "AWAIT_AUTH"])
            if state != "AWAIT_HELLO":
                c.send_frame(P.HELLO, HELLO_OK)
                c.recv_frame()
            t = rng.choice(sorted(P.TYPE_NAMES))
            body = junk(rng)
            c.sock.sendall(HEADER.pack(b"HOPB", P.VERSION, t, len(body), 0) + body if len(body) <= P.MAX_BODY
                           else HEADER.pack(b"HOPB", P.VERSION, t, len(body), 0))
            got = []
            c.sock.settimeout(3)
            try:
                while True:
                    got.append(c.recv_frame()[0])
            except (EOFError, ConnectionResetError, socket.timeout, AssertionError):
                pass
            c.sock.close()
            key = {(P.ERROR,): "one ERROR", (P.REFUSE,): "one REFUSE", (P.ACCEPT,): "ACCEPT (well-formed plan)",
                   (): "none (client's own ERROR/BYE)"}.get(tuple(got), "other")
            if key == "none (client's own ERROR/BYE)" and t not in (P.ERROR, P.BYE):
                key = "other"
            answers[key] += 1
        s = Session("127.0.0.1", port, secret=secret)
        ok = s.measure(P.Plan("tcp", 184320, 8, 2, 4, 50, 5)).completed == 56
        s.bye()
        s.close()
        # the server logs a session once it has ended it: wait for the normal client's line
        # (a bounded poll of the file it writes) before stopping it, or it dies mid-log
        want = sum(answers.values()) + 1
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            logf.seek(0)
            if sum(ln.startswith("session ") for ln in logf.read().splitlines()) >= want:
                break
            time.sleep(0.05)  # polling a file the child writes, bounded; not the measurement's timing
        srv.terminate()
        srv.wait(timeout=10)
        logf.seek(0)
        errf.seek(0)
        out, err = logf.read(), errf.read()
        log = out.splitlines()
        results[secret] = (answers, err.count("Traceback"), len([ln for ln in log if ln.startswith("session ")]),
                           sum("internal error" in ln for ln in log), ok, time.monotonic() - t0)
    bad = False
    for secret, (answers, tb, lines, internal, ok, dt) in results.items():
        total = sum(answers.values())
        print(f"server {'with' if secret else 'without'} --secret: {total} malformed connections in {dt:.1f} s")
        for k, v in answers.items():
            print(f"  {k:<32} {v:6d}")
        print(f"  tracebacks in the server's stderr: {tb}; session log lines: {lines} (one per connection + the "
              f"normal client); internal errors: {internal}; a normal client measured afterwards: {ok}")
        bad |= tb > 0 or answers["other"] > 0 or internal > 0 or not ok or lines != total + 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
