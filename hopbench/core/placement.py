"""CPU placement: pin a process (and the threads it starts later) and report the
affinity actually in effect, per thread."""

from __future__ import annotations

import os
from dataclasses import dataclass
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


# Named placements for the sweep's placement axis: where the server and the client run
# and how they receive. CPUs are indices into this process's allowed CPUs.
@dataclass(frozen=True)
class Placement:
    name: str
    server_cpu: str | None
    client_cpu: str | None
    poll: str

    def describe(self) -> dict:
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


CANDIDATES = ("same-block", "split-block", "unpinned-block", "split-busy", "unpinned-busy")


def calibrate(python: str, cycles: int = 300) -> tuple[str, dict]:
    """Measure each candidate placement on loopback (64 B and 184,320 B requests, TCP)
    and return the one with the smallest sum of p50s, with the table behind the choice."""
    import csv
    import subprocess
    import tempfile

    cands = [c for c in CANDIDATES if len(os.sched_getaffinity(0)) >= 2 or not c.startswith(("same", "split"))]
    table: dict[str, dict] = {}
    for name in cands:
        p = placement(name)
        srv = subprocess.Popen([python, "-m", "hopbench", "serve", "--bind", "127.0.0.1:0", "--poll", p.poll]
                               + (["--cpu", p.server_cpu] if p.server_cpu else []), stdout=subprocess.PIPE, text=True)
        try:
            from hopbench.orchestration.serverproc import ready_port

            port = ready_port(srv)
            with tempfile.TemporaryDirectory() as tmp:
                r = subprocess.run([python, "-m", "hopbench", "run", "--peer", f"127.0.0.1:{port}", "--bytes", "64,184320",
                                    "--cycles", str(cycles), "--warmup", "30", "--poll", p.poll, "--out", f"{tmp}/r"]
                                   + (["--cpu", p.client_cpu] if p.client_cpu else []), capture_output=True, text=True)
                if r.returncode:
                    table[name] = {"error": r.stderr.strip()[-300:]}
                    continue
                rows = list(csv.DictReader(open(f"{tmp}/r/summary.csv")))
                table[name] = {f"p50_ns_{row['request_bytes']}": float(row["p50_ns"]) for row in rows}
        finally:
            srv.terminate()
            srv.wait(10)
    scored = {n: sum(v.values()) for n, v in table.items() if "error" not in v}
    if not scored:
        return "unpinned-auto", table
    return min(scored, key=scored.get), table


def last_calibration(results_root: Path = Path("results")) -> str | None:
    """The placement the newest sweep in results_root calibrated and chose here, if any."""
    import json

    for p in sorted(results_root.glob("*/sweep.json"), reverse=True):
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if doc.get("placement_calibration") and doc.get("placements_resolved"):
            return f"{doc['placements_resolved'][0]} (measured by the sweep in {p.parent})"
    return None


def placement_note(peer_host: str, results_root: Path = Path("results")) -> str | None:
    """What an unpinned `run` should know on a machine where placement matters (few CPUs:
    a VM's cross-CPU wake-up costs ~100 us, and the scheduler moves the ends between CPUs
    mid-run, so round trips drift): pin both ends, with the placement a sweep would pick."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 8:
        return None
    chosen = last_calibration(results_root) or "split-busy (the usual winner on small VMs; `make bench-placement` measures all)"
    p = placement("split-busy") if len(cpus) >= 2 else placement("same-block")
    return (f"unpinned on a {len(cpus)}-CPU machine: the scheduler moves both ends between CPUs and round trips drift "
            f"(a cross-CPU wake-up costs ~100 us on VMs). Placement the sweep picks: {chosen}; e.g. on the server's "
            f"host `hopbench serve --cpu {p.server_cpu} --poll {p.poll}` and here `hopbench run --cpu {p.client_cpu} "
            f"--poll {p.poll}`" + (" (both ends on this host)" if peer_host.startswith("127.") else ""))
