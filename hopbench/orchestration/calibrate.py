"""Placement calibration and advice: which CPU placement of server and client is fastest
on this machine, measured on loopback with the library (a server process and a client
process, each pinned, started through multiprocessing; no CLI round trip)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hopbench.core.placement import Placement, placement

CANDIDATES = ("same-block", "split-block", "unpinned-block", "split-busy", "unpinned-busy")
SIZES = (64, 184_320)


def _client_child(conn: Any, port: int, p: Placement, cycles: int) -> None:
    """In a child process: pin, measure both sizes on loopback, send back the p50s."""
    import numpy as np

    from hopbench.core import protocol as P
    from hopbench.core.client import Session
    from hopbench.core.placement import pin

    try:
        pin(p.client_cpu)
        with Session("127.0.0.1", port, poll=p.poll) as s:
            out = {f"p50_ns_{n}": float(np.median(s.measure(P.Plan("tcp", n, 8, 2, 4, cycles, 30)).timed)) for n in SIZES}
            s.bye()
        conn.send(out)
    except Exception as exc:  # reported in the calibration table
        conn.send({"error": f"{exc.__class__.__name__}: {exc}"[:300]})


def calibrate(cycles: int = 300) -> tuple[str, dict[str, dict[str, Any]]]:
    """Measure each candidate placement on loopback (64 B and 184,320 B requests, TCP)
    and return the one with the smallest sum of p50s, with the table behind the choice."""
    import multiprocessing as mp

    from hopbench.core.server import ServerConfig
    from hopbench.orchestration.serverproc import ServerProcess

    ctx = mp.get_context("spawn")
    cands = [c for c in CANDIDATES if len(os.sched_getaffinity(0)) >= 2 or not c.startswith(("same", "split"))]
    table: dict[str, dict[str, Any]] = {}
    for name in cands:
        p = placement(name)
        with ServerProcess(ServerConfig(host="127.0.0.1", port=0, poll=p.poll), cpu=p.server_cpu) as srv:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_client_child, args=(child, srv.address[1], p, cycles), daemon=True)
            proc.start()
            table[name] = parent.recv() if parent.poll(120) else {"error": "the client did not answer in 120 s"}
            proc.join(30)
    scored = {n: sum(v.values()) for n, v in table.items() if "error" not in v}
    if not scored:
        return "unpinned-auto", table
    return min(scored, key=lambda n: scored[n]), table


def last_calibration(results_root: Path = Path("results")) -> str | None:
    """The placement the newest sweep in results_root calibrated and chose here, if any."""
    from hopbench.errors import HopbenchError
    from hopbench.results import ResultFolder, SweepReport, sweep_folders

    for folder in sweep_folders(results_root) if results_root.is_dir() else []:
        try:
            header = ResultFolder(folder).read_header()
        except (OSError, ValueError, HopbenchError):
            continue
        chosen = header.extra.get("placements_resolved") if isinstance(header, SweepReport) else None
        if chosen and header.extra.get("placement_calibration"):
            return f"{chosen[0]} (measured by the sweep in {folder})"
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
