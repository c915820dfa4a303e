"""A `hopbench serve` child process and its ready line.

`hopbench serve` prints, once it listens, the line
    hopbench server listening on HOST:PORT
(the machine-readable ready line; HOST may be an IPv6 address, the port is after the last
colon). Anything before it (a library's warnings) is skipped. Every place that starts a
server in a child process learns its port here, nowhere else."""

from __future__ import annotations

import subprocess
from typing import Any

from hopbench.errors import HopbenchError

READY = "hopbench server listening on "


def parse_ready(line: str) -> tuple[str, int] | None:
    if not line.startswith(READY):
        return None
    host, _, port = line[len(READY):].strip().rpartition(":")
    return host, int(port)


def ready_address(proc: subprocess.Popen, max_lines: int = 200) -> tuple[str, int]:
    """Read the child's stdout up to its ready line; HopbenchError when it exits first."""
    assert proc.stdout is not None
    seen = []
    for _ in range(max_lines):
        line = proc.stdout.readline()
        if not line:
            break
        got = parse_ready(line)
        if got:
            return got
        seen.append(line.strip())
    proc.poll()
    raise HopbenchError(f"the server process did not report ready (exit {proc.returncode}): "
                        f"{' | '.join(seen[-3:]) or 'no output'}")


def ready_port(proc: subprocess.Popen) -> int:
    return ready_address(proc)[1]


def _serve_child(conn: Any, cfg: Any, cpu: str | None) -> None:
    from hopbench.core.placement import pin
    from hopbench.core.server import Server

    pin(cpu)
    server = Server(cfg, log=lambda line: None)
    conn.send(tuple(server.address))
    conn.close()
    server.serve_forever()


class ServerProcess:
    """A server in a child process started through the library (multiprocessing, spawn),
    pinned to `cpu`; its bound address comes back through a pipe. A context manager: the
    child is stopped (SIGTERM, the server's own clean stop) on exit."""

    def __init__(self, cfg: Any, cpu: str | None = None, start_timeout_s: float = 60.0):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve_child, args=(child, cfg, cpu), daemon=True)
        self.proc.start()
        if not parent.poll(start_timeout_s):
            self.stop()
            raise HopbenchError(f"the server process did not report its address within {start_timeout_s:g} s")
        host, port = parent.recv()
        self.address: tuple[str, int] = (str(host), int(port))

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.terminate()
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(10)

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
