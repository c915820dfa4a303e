"""A `hopbench serve` child process and its ready line.

`hopbench serve` prints, once it listens, the line
    hopbench server listening on HOST:PORT
(the machine-readable ready line; HOST may be an IPv6 address, the port is after the last
colon). Anything before it (a library's warnings) is skipped. Every place that starts a
server in a child process learns its port here, nowhere else."""

from __future__ import annotations

import subprocess

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
