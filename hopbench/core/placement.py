"""CPU placement: pin a process (and the threads it starts later) and report the
affinity actually in effect, per thread."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from hopbench.errors import ConfigError


def parse_cpus(text: str) -> set[int]:
    """'0', '0,2', '0-3' -> {..}"""
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            if "-" in part:
                lo, hi = part.split("-")
                cpus.update(range(int(lo), int(hi) + 1))
            elif part.strip():
                cpus.add(int(part))
    except ValueError:
        raise ConfigError(f"--cpu {text!r}: expected a CPU list like 0 or 0,2 or 0-3") from None
    if not cpus:
        raise ConfigError(f"--cpu {text!r}: no CPUs")
    return cpus


def pin(text: str | None) -> None:
    """Pin this process before it starts threads (ZeroMQ's I/O thread and UCX's async
    thread inherit the mask)."""
    if not text:
        return
    cpus = parse_cpus(text)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as exc:
        raise ConfigError(f"--cpu {text!r}: cannot pin ({exc.strerror}); this machine has CPUs "
                          f"{sorted(os.sched_getaffinity(0))}") from None


def split_control(session_text: str) -> tuple[set[int], set[int]]:
    """serve --session-cpus: (the control plane's CPUs, the sessions' CPUs). The control
    plane (accepting, handshakes: every connection before it has a plan) keeps this
    process's CPUs less the sessions'; the process is pinned to them now, before it starts
    threads, so connection threads inherit them."""
    sessions = parse_cpus(session_text)
    allowed = os.sched_getaffinity(0)
    usable = set(range(os.cpu_count() or 1))
    try:  # the CPUs this process could be given (its cgroup's), not only its current mask
        usable = parse_cpus(Path("/sys/fs/cgroup/cpuset.cpus.effective").read_text().strip())
    except (OSError, ConfigError):
        pass
    if not sessions <= usable:
        raise ConfigError(f"--session-cpus {session_text!r}: CPUs {sorted(sessions - usable)} are not this "
                          f"machine's (it has {_ranges(usable)})")
    control = allowed - sessions
    if not control:
        raise ConfigError(f"--session-cpus {session_text!r} leaves no CPU for the control connections (the "
                          f"server may use {_ranges(allowed)}; give it others with --cpu)")
    os.sched_setaffinity(0, control)
    return control, sessions


def _ranges(cpus: set[int]) -> str:
    return ",".join(map(str, sorted(cpus)))


class SessionCpus:
    """serve --session-cpus: each session's plan runs on a CPU of its own, the least used
    one (ties: the lowest), away from the control plane's threads; the thread goes back to
    the control CPUs when the plan ends. Hostile or idle connections never share a CPU with
    a measurement (docs/SECURITY.md, "Served under attack")."""

    def __init__(self, cpus: set[int], control: set[int]) -> None:
        self.control = set(control)
        self.load = {c: 0 for c in sorted(cpus)}
        self._lock = threading.Lock()

    @contextmanager
    def pinned(self) -> Iterator[int]:
        """The calling thread on its session CPU for the block (Linux: the mask is per thread)."""
        with self._lock:
            cpu = min(self.load, key=lambda c: (self.load[c], c))
            self.load[cpu] += 1
        try:
            os.sched_setaffinity(0, {cpu})
            yield cpu
        finally:
            try:
                os.sched_setaffinity(0, self.control)
            finally:
                with self._lock:
                    self.load[cpu] -= 1


def affinity() -> dict[str, Any]:
    """The mask of the process and of each of its threads, as the kernel reports them."""
    threads = {}
    for status in Path("/proc/self/task").glob("*/status"):
        try:
            for line in status.read_text().splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    threads[status.parent.name] = line.split(":", 1)[1].strip()
        except OSError:
            pass
    return {"process": sorted(os.sched_getaffinity(0)), "threads": threads}


# Named placements for the sweep's placement axis: where the server and the client run
# and how they receive. CPUs are indices into this process's allowed CPUs.
@dataclass(frozen=True)
class Placement:
    name: str
    server_cpu: str | None
    client_cpu: str | None
    poll: str

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "server_cpu": self.server_cpu, "client_cpu": self.client_cpu, "poll": self.poll}


def placement(name: str) -> Placement:
    """'same-block', 'split-busy', 'unpinned-auto', ... (where-how)."""
    where, _, how = name.partition("-")
    cpus = sorted(os.sched_getaffinity(0))
    if how not in ("block", "busy", "auto") or where not in ("same", "split", "unpinned"):
        raise ConfigError(f"placement {name!r}: expected same|split|unpinned-block|busy|auto, e.g. split-busy")
    if where == "split" and len(cpus) < 2:
        raise ConfigError(f"placement {name!r} needs two CPUs; this process may use {cpus}")
    server, client = {"same": (cpus[0], cpus[0]), "split": (cpus[-1], cpus[0]), "unpinned": (None, None)}[where]
    return Placement(name, None if server is None else str(server), None if client is None else str(client), how)
