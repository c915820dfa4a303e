"""CPU placement: pin a process (and the threads it starts later) and report the
affinity actually in effect, per thread."""

from __future__ import annotations

import os
from pathlib import Path

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


def affinity() -> dict:
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
