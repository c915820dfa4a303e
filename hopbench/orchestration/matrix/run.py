"""The matrix's driver: every planned cell not yet complete, a round of disjoint pairs at a
time, written as sweep cells; a node that leaves is recorded and its cells marked failed."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from hopbench import results as R
from hopbench.errors import ConfigError
from hopbench.orchestration.matrix.config import (
    Agents,
    MatrixConfig,
    NodeLeft,
    _cfg_dict,
)
from hopbench.orchestration.matrix.plan import (
    Cell,
    _job,
    pair_name,
    pairs,
    plan,
)


def run_matrix(agents: Agents, cfg: MatrixConfig, folder: Path, log: Callable[[str], None] = print,
               on_progress: "Progress | None" = None) -> Path:
    """Measure every planned cell not yet complete in `folder` (created or resumed), holding
    the folder's lock throughout (a second writer is refused with the first's pid)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with R.FolderLock(folder):
        return _run_matrix(agents, cfg, folder, log, on_progress)


Progress = Callable[[int, int, float, float, str], None]


def _run_matrix(agents: Agents, cfg: MatrixConfig, folder: Path, log: Callable[[str], None],
                on_progress: Progress | None) -> Path:
    nodes = sorted(agents.nodes())
    if len(nodes) < 2:
        raise ConfigError(f"a matrix needs at least 2 nodes; the cluster has {len(nodes)}")
    run = _MatrixRun(agents, cfg, R.ResultFolder(folder), log)
    run.meet(nodes)
    batches = plan(nodes, cfg)
    todo = [b for b in ([c for c in batch if not run.rf.cell_done(c.key)] for batch in batches) if b]
    total = sum(len(b) for b in todo)
    log(f"matrix: {len(nodes)} nodes, {len(pairs(nodes, cfg.ordered))} {'ordered' if cfg.ordered else 'unordered'} "
        f"pairs, {total} cells to measure ({sum(len(b) for b in batches) - total} already complete), "
        f"{'one pair at a time' if cfg.concurrency == 1 else 'disjoint pairs at once'}")
    run.save("running")
    status = "incomplete"
    try:
        run.measure(todo, total, on_progress)
        status = "complete" if not run.top["failed_cells"] and not run.left else "incomplete"
    finally:
        run.save(status)
    return folder


class _MatrixRun:
    """One matrix run's state: its top record (new or resumed), the nodes that left, the
    servers started; `one(cell)` measures a cell on its pair, from a pool of threads."""

    def __init__(self, agents: Agents, cfg: MatrixConfig, rf: R.ResultFolder, log: Callable[[str], None]) -> None:
        self.agents, self.cfg, self.rf, self.log = agents, cfg, rf, log
        self.top = self._top()
        self.left: dict[str, str] = self.top["matrix"]["left"]
        self.lock = threading.Lock()
        self.servers: dict[str, tuple[str, int]] = {}

    def _top(self) -> dict:
        cfg, rf = self.cfg, self.rf
        if rf.is_sweep:
            reading = rf.read()
            top = reading.record
            if (reading.header.extra.get("matrix") or {}).get("config") != _cfg_dict(cfg):
                raise ConfigError(f"{rf.path} holds a matrix of another configuration; choose another --out")
            self.log(f"resuming the matrix in {rf.path}")
            return top
        if any(p.name != ".lock" for p in rf.path.iterdir()):
            raise ConfigError(f"{rf.path} is not empty and holds no matrix; refusing to write into it")
        # the config keys a sweep's readers use (the rest of a matrix's is under matrix.config)
        return R.SweepReport(
            kind="matrix", seed=cfg.seed,
            config={"name": "matrix", "profile": "matrix", "path": None, "operating_tokens": cfg.operating_tokens,
                    "repeats": cfg.repeats, "transports": list(cfg.transports), "command": cfg.command},
            shape=R.ShapeRecord(cfg.bytes_per_token, cfg.k, cfg.id_bytes), preflight={"local": {}, "rungs": {}},
            extra={"matrix": {"config": _cfg_dict(cfg), "nodes": {}, "left": {}}}).to_dict()

    def save(self, status: str) -> None:
        with self.lock:
            self.top["status"] = status
            self.top["updated_utc"] = R.utc_iso()
            self.rf.write_sweep(self.top)

    def meet(self, nodes: list[str]) -> None:
        """Each node's doctor report (once), and a rung per pair."""
        top, left = self.top, self.left
        for n in nodes:
            if n in top["matrix"]["nodes"] or n in left:
                continue
            try:
                top["matrix"]["nodes"][n] = {"doctor": self.agents.doctor(n)}
            except NodeLeft as exc:
                left[n] = f"before measuring: {exc.why}"
        for a, b in pairs(nodes, self.cfg.ordered):
            top["rungs"].setdefault(pair_name(a, b), {"name": pair_name(a, b), "kind": "matrix-pair", "client": a,
                                                      "server": b, "rate_mbit": None,
                                                      "transports": list(self.cfg.transports)})

    def measure(self, todo: list[list[Cell]], total: int, on_progress: Progress | None) -> None:
        """The batches, at most `concurrency` pairs at a time; saved after each batch."""
        t0 = time.monotonic()
        done = 0
        width = max(1, self.cfg.concurrency or max((len(b) for b in todo), default=1))
        with ThreadPoolExecutor(max_workers=width) as pool:
            for batch in todo:
                for chunk in (batch[i:i + width] for i in range(0, len(batch), width)):
                    list(pool.map(self.one, chunk))
                    done += len(chunk)
                    el = time.monotonic() - t0
                    if on_progress:
                        on_progress(done, total, el, el / done * (total - done), chunk[-1].key)
                self.save("running")

    def _server_of(self, node: str) -> tuple[str, int]:
        with self.lock:
            if node not in self.servers:
                self.servers[node] = self.agents.serve(node)
            return self.servers[node]

    def _failed(self, cell: Cell, error: str | None, node: str | None = None, why: str = "") -> None:
        with self.lock:
            if node is not None:
                self.left.setdefault(node, f"{R.utc_iso()}: {why}")
            self.top["failed_cells"].append({"key": cell.key, "error": error})

    def one(self, cell: Cell) -> None:
        gone = [n for n in (cell.client, cell.server) if n in self.left]
        if gone:
            self._failed(cell, f"node {gone[0]} left the cluster")
            return
        self.rf.set_aside(cell.key)  # an earlier attempt that did not complete: kept aside
        try:
            host, port = self._server_of(cell.server)
            answer = self.agents.run(cell.client, host, port, _job(cell, self.cfg))
        except NodeLeft as exc:
            node = exc.node or cell.client
            self._failed(cell, f"node {node} left the cluster", node, exc.why)
            self.log(f"node {node} left the cluster ({exc.why}); its pairs are marked and the rest continue")
            return
        if answer.get("files"):
            R.ResultFolder(self.rf.cell_dir(cell.key)).write_files(answer["files"])
        if answer.get("ok"):
            return
        error = answer.get("error")
        try:  # was it the server's node that went away?
            self.agents.serve(cell.server)
        except NodeLeft as exc:
            error = f"node {cell.server} left the cluster ({error})"
            self._failed(cell, error, cell.server, exc.why)
            self.log(f"node {cell.server} left the cluster; its pairs are marked and the rest continue")
            self.log(f"cell {cell.key} failed: {error}")
            return
        self._failed(cell, error)
        self.log(f"cell {cell.key} failed: {error}")
