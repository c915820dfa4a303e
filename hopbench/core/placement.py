"""CPU placement: pin a process (and the threads it starts later) and report the
affinity actually in effect, per thread."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
