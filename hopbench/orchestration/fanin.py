"""`hopbench fanin --ray ADDRESS --server NODE --targets N`: targets on several Ray nodes
against one server node (docs/MATRIX.md "Fan-in").

The matrix's agents (one Ray actor per node, hopbench.orchestration.matrix) do the work:
the server node's agent serves (sessions at once: N), each target node's agent runs one
target's session, its plans started together with the others' (PLAN group); the files
each target writes come back to the driver. The run is `run --clients N` with the
targets on other hosts (hopbench.orchestration.clients): a reference alone (the first
target node), then the N at once; the same records, readable by every reader."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from hopbench import results as R
from hopbench.errors import ConfigError
from hopbench.orchestration.clients import TargetJob
from hopbench.records import Payload, RunConfig


def ray_runner(agents: Any, nodes: list[str]) -> Callable[[list[TargetJob]], dict[int | None, str | None]]:
    """Target jobs on Ray nodes: target i (the reference: None) on nodes[i - 1], all at once;
    each node's files written into the job's folder here."""

    def run(jobs: list[TargetJob]) -> dict[int | None, str | None]:
        calls = []
        for job in jobs:
            node = nodes[(job.target or 1) - 1]
            calls.append((node, job.host, job.port, {
                "payloads": [dataclasses.asdict(p) for p in job.payloads], "config": job.cfg.to_dict(),
                "group": job.group, "target": job.target, "extra": {"fanin": {"node": node, "target": job.target}}}))
        errors: dict[int | None, str | None] = {}
        for job, answer in zip(jobs, agents.run_many(calls)):
            if answer.get("files"):
                R.ResultFolder(job.folder).write_files(answer["files"])
            errors[job.target] = None if answer.get("ok") else str(answer.get("error"))
        return errors

    return run


def run_fanin(agents: Any, server: str, targets: int, payloads: Callable[[str, int], tuple[list[Payload], RunConfig]],
              folder: Callable[[], Path], say: Callable[[str], None] = print,
              warn: Callable[[str], None] = print) -> dict[str, Any]:
    """The server on `server`, `targets` targets on the other nodes (one each); the run's record."""
    from hopbench.orchestration.clients import ClientsOptions, run_clients

    nodes = agents.nodes()
    if server not in nodes:
        raise ConfigError(f"--server {server}: not a node of the cluster (nodes: {', '.join(nodes)})")
    others = [n for n in nodes if n != server]
    if not 1 <= targets <= len(others):
        raise ConfigError(f"--targets {targets}: the cluster has {len(others)} node(s) besides the server "
                          "(one target per node)")
    host, port = agents.serve(server, max_sessions=max(targets, 2))
    loads, cfg = payloads(host, port)
    cfg = dataclasses.replace(cfg, clients=targets)
    say(f"fan-in: server {server} ({host}:{port}), targets on {', '.join(others[:targets])}")
    record = run_clients(host, port, loads, cfg, folder,
                         options=ClientsOptions(extra={"fanin": {"server": server, "targets": others[:targets]}},
                                                runner=ray_runner(agents, others), say=say, warn=warn))
    return record


__all__ = ["ray_runner", "run_fanin"]
