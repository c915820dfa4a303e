"""`hopbench matrix`: every link of a cluster, measured pair by pair, placed by Ray.

One agent per node (a Ray actor pinned to its node with NodeAffinitySchedulingStrategy)
serves (a hopbench server on the node's address, in a thread) and runs (a hopbench client
session, whose files it hands back). The driver plans the pairs (ordered or unordered),
groups them into rounds of disjoint pairs (the circle method: no node is in two
measurements at once), runs each round with at most `concurrency` pairs at a time, and
writes every measurement as a sweep cell (cells/<pair>/<transport>/<payload>-g0/r<k>/), so
fit, verdict, export, plot and report read the folder unchanged. Each node's doctor
report is recorded with it; the outliers are named with their likely cause
(analysis: hopbench.analysis.matrix).

Resumable like a sweep: the same command with `--out FOLDER` measures only the cells not
yet complete. A node that leaves the cluster mid-run is recorded in matrix.left, its
remaining cells are marked failed, the rest continue.

The Ray glue (RayAgents) is the only part that imports ray; the driver (run_matrix) takes
any `Agents` (tests use in-process fakes)."""

from __future__ import annotations

import json
import logging
import random
import shlex
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from hopbench import results as R
from hopbench.errors import ConfigError, HopbenchError
from hopbench.orchestration.sweep.plan import Cell as SweepCell
from hopbench.records import Place, RunConfig, Series
from hopbench.shape import ShapeConfig, payloads


class NodeLeft(HopbenchError):
    """The node's agent is gone (it left the cluster)."""

    def __init__(self, why: str, node: str | None = None):
        super().__init__(why)
        self.why, self.node = why, node


class Agents(Protocol):
    """The nodes and what can be asked of them."""

    def nodes(self) -> list[str]: ...

    def doctor(self, node: str) -> dict: ...

    def serve(self, node: str) -> tuple[str, int]:
        """Start (once) the node's server; its (host, port)."""

    def run(self, node: str, host: str, port: int, job: dict) -> dict:
        """Run one client job (runner.run_session) on the node; {"ok", "error", "files": {name: text}}."""

    def close(self) -> None: ...


@dataclass
class MatrixConfig:
    # the shape: from configs/shape.toml (MatrixConfig.from_shape), never restated here
    k: int
    id_bytes: int
    bytes_per_token: int
    operating_tokens: int
    tokens: tuple[int, ...] = (1, 3)
    bytes: tuple[int, ...] = ()
    transports: tuple[str, ...] = ("tcp",)
    repeats: int = 3
    cycles: int = 200
    warmup: int = 20
    ordered: bool = False
    concurrency: int = 0  # 0: every pair of a round at once; 1: strictly one pair at a time
    poll: str = "auto"
    seed: int = 0
    command: str = ""
    transport_settings: dict[str, dict[str, str]] = field(default_factory=dict)
    codecs: tuple[str, ...] = ("none",)  # payload codecs (docs/CODECS.md): each payload also under each
    hidden: int = 6144  # values per scale of a lossy codec (configs/shape.toml)


def shape_fields(shape: ShapeConfig) -> dict[str, int]:
    """MatrixConfig's shape fields from a loaded shape config."""
    return {"k": shape.shape.k, "id_bytes": shape.shape.id_bytes, "bytes_per_token": shape.shape.bytes_per_token,
            "operating_tokens": shape.operating_tokens, "hidden": shape.shape.hidden}


def checked(cfg: MatrixConfig) -> MatrixConfig:
    """ConfigError for a matrix that cannot run: counts, unknown transport settings, an
    operating payload not measured."""
    if cfg.concurrency < 0 or cfg.repeats < 1 or cfg.cycles < 1:
        raise ConfigError("--concurrency must be >= 0, --repeats and --cycles >= 1")
    from hopbench.core.transport import get_transport

    for t in cfg.transports:
        get_transport(t).check_settings(cfg.transport_settings.get(t, {}))
    if cfg.operating_tokens not in cfg.tokens:
        raise ConfigError(f"--tokens must include the operating payload T = {cfg.operating_tokens} (the hop is read "
                          "there)")
    if cfg.codecs != ("none",):
        from hopbench.orchestration.runjob import check_codecs

        cfg.codecs = tuple(check_codecs(",".join(cfg.codecs), cfg.hidden))
    return cfg


def parse_interfaces(text: str | None) -> dict[str, str]:
    """--interface: IFNAME for every node, or ADDR=IFNAME,... per node ("*" = every node)."""
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        if item:
            node, sep, name = item.partition("=")
            out[node if sep else "*"] = name if sep else node
    return out


def open_folder(out: Path | None, new: bool, results_dir: Path, cfg: MatrixConfig) -> Path:
    """The matrix folder: --out, else an unfinished one of this configuration (resumed), else new."""
    folder = out or (None if new else find_resumable(results_dir, cfg))
    if folder is None:
        return R.new_folder(results_dir, "matrix")
    if folder.exists() and not R.ResultFolder(folder).is_sweep:
        raise ConfigError(f"{folder} exists and is not a matrix folder; refusing to write into it")
    return folder


def pairs(nodes: list[str], ordered: bool) -> list[tuple[str, str]]:
    """(client, server) pairs: every ordered pair, or every unordered pair once."""
    return [(a, b) for i, a in enumerate(nodes) for j, b in enumerate(nodes) if i != j and (ordered or i < j)]


def rounds(nodes: list[str], ordered: bool) -> list[list[tuple[str, str]]]:
    """The pairs in rounds of disjoint pairs (round-robin circle method; with an odd count
    one node sits out each round). Ordered pairs: each round twice, once per direction."""
    ring: list[str | None] = list(nodes) + ([None] if len(nodes) % 2 else [])
    n = len(ring)
    out: list[list[tuple[str, str]]] = []
    for _ in range(n - 1):
        rnd = [(a, b) for i in range(n // 2) if (a := ring[i]) is not None and (b := ring[n - 1 - i]) is not None]
        canon = [(a, b) if nodes.index(a) < nodes.index(b) else (b, a) for a, b in rnd]
        out.append(canon)
        if ordered:
            out.append([(b, a) for a, b in canon])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return out


def pair_name(client: str, server: str) -> str:
    """A pair's rung name (a path component: no slashes)."""
    return f"{client}_to_{server}".replace("/", "-")


@dataclass(frozen=True)
class Cell(SweepCell):
    """A sweep cell whose rung is a pair (its key and folder are a sweep cell's)."""

    client: str = ""
    server: str = ""


def plan(nodes: list[str], cfg: MatrixConfig) -> list[list[Cell]]:
    """Batches of cells: within a batch, no node appears twice (they may run at once).
    Repeats are the outer loop; within a repeat, rounds; within a pair, payloads and
    transports in a seeded random order (interleaved, as a sweep)."""
    rng = random.Random(cfg.seed)
    loads = payloads(cfg.bytes_per_token, cfg.tokens, cfg.bytes, cfg.k * cfg.id_bytes)
    batches: list[list[Cell]] = []
    for rep in range(cfg.repeats):
        for rnd in rounds(nodes, cfg.ordered):
            combos = [(tr, p, c) for tr in cfg.transports for p in loads for c in cfg.codecs]
            rng.shuffle(combos)
            for tr, p, c in combos:
                series = Series(tr, c)
                batches.append([Cell(Place(pair_name(a, b)), series, series.spell(p.label), p.tokens, p.request_bytes,
                                     p.reply_bytes, base=p.label, repeat=rep, client=a, server=b) for a, b in rnd])
    return batches


def _job(cell: Cell, cfg: MatrixConfig) -> dict:
    run_cfg = RunConfig(transport=cell.series.transport, k=cfg.k, id_bytes=cfg.id_bytes, cycles=cfg.cycles,
                        warmup=cfg.warmup, poll=cfg.poll, transport_settings=cfg.transport_settings,
                        rung=cell.rung, bytes_per_token=cfg.bytes_per_token, codecs=(cell.series.codec,),
                        hidden=cfg.hidden)
    return {"config": run_cfg.to_dict(),
            "payload": {"label": cell.payload, "tokens": cell.tokens, "request_bytes": cell.request_bytes,
                        "reply_bytes": cell.reply_bytes, "codec": cell.series.codec},
            "extra": {"sweep": {"cell": asdict(cell), "key": cell.key,
                                "seed": cfg.seed},
                      "rung": cell.rung, "matrix": {"client": cell.client, "server": cell.server}}}


def run_matrix(agents: Agents, cfg: MatrixConfig, folder: Path, log: Callable[[str], None] = print,
               on_progress: Callable[[int, int, float, float, str], None] | None = None) -> Path:
    """Measure every planned cell not yet complete in `folder` (created or resumed), holding
    the folder's lock throughout (a second writer is refused with the first's pid)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with R.FolderLock(folder):
        return _run_matrix(agents, cfg, folder, log, on_progress)


def _run_matrix(agents: Agents, cfg: MatrixConfig, folder: Path, log: Callable[[str], None],
                on_progress: Callable[[int, int, float, float, str], None] | None) -> Path:
    nodes = sorted(agents.nodes())
    if len(nodes) < 2:
        raise ConfigError(f"a matrix needs at least 2 nodes; the cluster has {len(nodes)}")
    rf = R.ResultFolder(folder)
    if rf.is_sweep:
        top = rf.read_top()
        if (top.get("matrix") or {}).get("config") != _cfg_dict(cfg):
            raise ConfigError(f"{folder} holds a matrix of another configuration; choose another --out")
        log(f"resuming the matrix in {folder}")
    else:
        if any(p.name != ".lock" for p in folder.iterdir()):
            raise ConfigError(f"{folder} is not empty and holds no matrix; refusing to write into it")
        # the config keys a sweep's readers use (the rest of a matrix's is under matrix.config)
        top = R.SweepReport(
            kind="matrix", seed=cfg.seed,
            config={"name": "matrix", "profile": "matrix", "path": None, "operating_tokens": cfg.operating_tokens,
                    "repeats": cfg.repeats, "transports": list(cfg.transports), "command": cfg.command},
            shape=R.ShapeRecord(cfg.bytes_per_token, cfg.k, cfg.id_bytes), preflight={"local": {}, "rungs": {}},
            extra={"matrix": {"config": _cfg_dict(cfg), "nodes": {}, "left": {}}}).to_dict()
    lock = threading.Lock()

    def save(status: str) -> None:
        with lock:
            top["status"] = status
            top["updated_utc"] = R.utc_iso()
            rf.write_sweep(top)

    left: dict[str, str] = top["matrix"]["left"]
    for n in nodes:
        if n in top["matrix"]["nodes"] or n in left:
            continue
        try:
            top["matrix"]["nodes"][n] = {"doctor": agents.doctor(n)}
        except NodeLeft as exc:
            left[n] = f"before measuring: {exc.why}"
    for a, b in pairs(nodes, cfg.ordered):
        top["rungs"].setdefault(pair_name(a, b), {"name": pair_name(a, b), "kind": "matrix-pair", "client": a,
                                                  "server": b, "rate_mbit": None, "transports": list(cfg.transports)})
    batches = plan(nodes, cfg)
    todo = [[c for c in batch if not rf.cell_done(c.key)] for batch in batches]
    todo = [b for b in todo if b]
    total = sum(len(b) for b in todo)
    log(f"matrix: {len(nodes)} nodes, {len(pairs(nodes, cfg.ordered))} {'ordered' if cfg.ordered else 'unordered'} "
        f"pairs, {total} cells to measure ({sum(len(b) for b in batches) - total} already complete), "
        f"{'one pair at a time' if cfg.concurrency == 1 else 'disjoint pairs at once'}")
    save("running")
    servers: dict[str, tuple[str, int]] = {}

    def server_of(node: str) -> tuple[str, int]:
        with lock:
            if node not in servers:
                servers[node] = agents.serve(node)
            return servers[node]

    def one(cell: Cell) -> None:
        gone = [n for n in (cell.client, cell.server) if n in left]
        if gone:
            with lock:
                top["failed_cells"].append({"key": cell.key, "error": f"node {gone[0]} left the cluster"})
            return
        rf.set_aside(cell.key)  # an earlier attempt that did not complete: kept aside
        try:
            host, port = server_of(cell.server)
            answer = agents.run(cell.client, host, port, _job(cell, cfg))
        except NodeLeft as exc:
            node = exc.node or cell.client
            with lock:
                left.setdefault(node, f"{R.utc_iso()}: {exc.why}")
                top["failed_cells"].append({"key": cell.key, "error": f"node {node} left the cluster"})
            log(f"node {node} left the cluster ({exc.why}); its pairs are marked and the rest continue")
            return
        if answer.get("files"):
            R.ResultFolder(rf.cell_dir(cell.key)).write_files(answer["files"])
        if not answer.get("ok"):
            error = answer.get("error")
            try:  # was it the server's node that went away?
                agents.serve(cell.server)
            except NodeLeft as exc:
                with lock:
                    left.setdefault(cell.server, f"{R.utc_iso()}: {exc.why}")
                error = f"node {cell.server} left the cluster ({error})"
                log(f"node {cell.server} left the cluster; its pairs are marked and the rest continue")
            with lock:
                top["failed_cells"].append({"key": cell.key, "error": error})
            log(f"cell {cell.key} failed: {error}")

    t0 = time.monotonic()
    done = 0
    status = "incomplete"
    width = max(1, cfg.concurrency or max((len(b) for b in todo), default=1))
    try:
        with ThreadPoolExecutor(max_workers=width) as pool:
            for batch in todo:
                for chunk in (batch[i:i + width] for i in range(0, len(batch), width)):
                    list(pool.map(one, chunk))
                    done += len(chunk)
                    el = time.monotonic() - t0
                    if on_progress:
                        on_progress(done, total, el, el / done * (total - done), chunk[-1].key)
                save("running")
        status = "complete" if not top["failed_cells"] and not left else "incomplete"
    finally:
        save(status)
    return folder


def _cfg_dict(cfg: MatrixConfig) -> dict:
    d = asdict(cfg)
    d.pop("command", None)
    d.pop("concurrency", None)  # how it was scheduled does not change what is measured
    return json.loads(json.dumps(d))


# ---------------------------------------------------------------- the agents on Ray


class _Agent:
    """One per node (a Ray actor): the node's server and client. Runs in the node's
    process (and network namespace, when the node lives in one)."""

    def __init__(self, address: str, interface: str | None, settings: dict, poll: str, loop: str):
        self.address = _interface_address(interface) if interface else address
        self.interface = interface
        self.settings, self.poll, self.loop = settings, poll, loop
        self.server: Any = None

    def node(self) -> dict:
        import socket

        return {"address": self.address, "hostname": socket.gethostname(), "interface": self.interface}

    def doctor(self) -> dict:
        from hopbench.orchestration import doctor as D

        rep = D.local_report(with_ucx=False).to_dict()
        rep["address"] = self.address
        rep["route_interface"] = _interface_of(self.address)
        rep["qdisc"] = _qdisc(rep["route_interface"]) if rep["route_interface"] else None
        return rep

    def serve(self, max_sessions: int = 1) -> tuple[str, int]:
        if self.server is None:
            from hopbench.core.server import Server, ServerConfig

            self.server = Server(ServerConfig(host=self.address, port=0, poll=self.poll,
                                              transport_settings=self.settings, loop=self.loop,
                                              max_sessions=max_sessions), log=lambda line: None)
            threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self.address, int(self.server.address[1])

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def run(self, host: str, port: int, job: dict) -> dict:
        import tempfile

        from hopbench.orchestration.runner import run_session
        from hopbench.records import Payload

        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "cell"
            out.mkdir()
            try:
                loads = [Payload(**p) for p in job.get("payloads") or [job["payload"]]]  # several: the fan-in's
                run_session(host, port, loads, RunConfig.from_dict(job["config"]), folder=out, extra=job.get("extra"),
                            group=job.get("group"), target=job.get("target"))
                answer: dict[str, Any] = {"ok": True}
            except HopbenchError as exc:
                answer = {"ok": False, "error": str(exc)}
            except Exception as exc:  # a bug: report it, keep the matrix going
                answer = {"ok": False, "error": f"internal error: {exc!r}"}
            answer["files"] = {p.name: p.read_text() for p in out.iterdir() if p.is_file()}
        return answer


def _auto_address() -> str:
    """Where Ray's "auto" points: RAY_ADDRESS, or the cluster last started on this machine."""
    import os
    import tempfile

    env = os.environ.get("RAY_ADDRESS")
    if env:
        return env.removeprefix("ray://")
    try:
        return (Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster").read_text().strip()
    except OSError:
        raise ConfigError("--ray auto: no Ray cluster runs on this machine (no RAY_ADDRESS, no "
                          "/tmp/ray/ray_current_cluster); start one (ray start --head) or give --ray HOST:PORT") from None


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"--ray {address!r}: expected HOST:PORT of the cluster's head (e.g. head:6379) or auto")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError(f"cannot reach the Ray cluster's head at {address} ({exc.strerror or exc}); is Ray "
                          f"running there (ray start --head)?") from None


def _interface_address(interface: str) -> str:
    import subprocess

    out = subprocess.run(["ip", "-j", "-4", "addr", "show", "dev", interface], capture_output=True, text=True)
    try:
        return json.loads(out.stdout)[0]["addr_info"][0]["local"]
    except (ValueError, IndexError, KeyError):
        raise ConfigError(f"interface {interface!r} has no IPv4 address on this node") from None


def _interface_of(address: str) -> str | None:
    import subprocess

    out = subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True)
    try:
        for link in json.loads(out.stdout):
            if any(a.get("local") == address for a in link.get("addr_info", [])):
                return str(link["ifname"])
    except ValueError:
        pass
    return None


def _qdisc(interface: str) -> list[dict] | None:
    """The interface's egress queueing (a shaper here is a likely cause of a slow link)."""
    import subprocess

    out = subprocess.run(["tc", "-j", "qdisc", "show", "dev", interface], capture_output=True, text=True)
    try:
        return [{k: q.get(k) for k in ("kind", "options")} for q in json.loads(out.stdout)]
    except ValueError:
        return None


class RayAgents:
    """The agents on a Ray cluster: one actor per alive node, placed with node affinity."""

    def __init__(self, address: str, interfaces: dict[str, str] | None = None, settings: dict | None = None,
                 poll: str = "auto", loop: str = "auto", timeout_s: float = 600.0, wait_nodes: int = 0,
                 wait_s: float = 120.0):
        try:
            import ray
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        except ImportError:
            raise ConfigError("hopbench matrix needs Ray: pip install 'hopbench[ray]'") from None
        self.ray = ray
        self.timeout_s = timeout_s
        # fail in a line, before Ray's client retries for minutes
        _check_reachable(address if address != "auto" else _auto_address())
        try:
            ray.init(address=address, ignore_reinit_error=True,  # "auto": the cluster this node is in, never a new one
                     logging_level=logging.ERROR, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConfigError(f"cannot join the Ray cluster at {address!r}: {str(exc).splitlines()[0]}") from None
        interfaces = interfaces or {}
        deadline = time.monotonic() + wait_s
        while len([n for n in ray.nodes() if n.get("Alive")]) < wait_nodes:
            if time.monotonic() > deadline:
                alive = len([n for n in ray.nodes() if n.get("Alive")])
                ray.shutdown()
                raise ConfigError(f"the Ray cluster has {alive} alive nodes after {wait_s:.0f} s; --wait-nodes "
                                  f"asked for {wait_nodes}")
            time.sleep(0.5)  # polling the cluster's membership, not synchronisation between our own processes
        remote = ray.remote(num_cpus=0, max_restarts=0)(_Agent)
        self.actors: dict[str, Any] = {}
        for n in ray.nodes():
            if not n.get("Alive"):
                continue
            addr = n["NodeManagerAddress"]
            iface = interfaces.get(addr) or interfaces.get("*")
            strategy = NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False)
            self.actors[addr] = remote.options(scheduling_strategy=strategy).remote(addr, iface, settings or {}, poll,
                                                                                    loop)

    def _call(self, node: str, method: str, *args: Any) -> Any:
        ray = self.ray
        try:
            return ray.get(getattr(self.actors[node], method).remote(*args), timeout=self.timeout_s)
        except ray.exceptions.RayActorError as exc:
            raise NodeLeft(f"its agent died ({type(exc).__name__})", node) from None
        except ray.exceptions.GetTimeoutError:
            raise NodeLeft(f"no answer within {self.timeout_s:.0f} s", node) from None

    def nodes(self) -> list[str]:
        return list(self.actors)

    def doctor(self, node: str) -> dict:
        rep: dict = self._call(node, "doctor")
        return rep

    def serve(self, node: str, max_sessions: int = 1) -> tuple[str, int]:
        host, port = self._call(node, "serve", max_sessions)
        return str(host), int(port)

    def run_many(self, calls: list[tuple[str, str, int, dict]]) -> list[dict]:
        """Jobs on several nodes at once (the fan-in's targets): each node's answer, or its error."""
        ray = self.ray
        refs = [self.actors[node].run.remote(host, port, job) for node, host, port, job in calls]
        out = []
        for (node, _, _, _), ref in zip(calls, refs):
            try:
                out.append(ray.get(ref, timeout=self.timeout_s))
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
                out.append({"ok": False, "error": f"node {node}: {type(exc).__name__}", "files": {}})
        return out

    def run(self, node: str, host: str, port: int, job: dict) -> dict:
        try:
            answer: dict = self._call(node, "run", host, port, job)
        except NodeLeft as exc:  # the client died; or the server's node, seen by the client as an error
            raise NodeLeft(exc.why, node) from None
        return answer

    def close(self) -> None:
        for a in self.actors.values():
            try:
                self.ray.kill(a)
            except Exception:
                pass
        self.ray.shutdown()


def find_resumable(root: Path, cfg: MatrixConfig) -> Path | None:
    """The newest unfinished matrix folder of this configuration under root, if any."""
    want = _cfg_dict(cfg)
    for path in sorted(Path(root).glob("*-matrix"), reverse=True):
        rf = R.ResultFolder(path)
        if not rf.is_sweep:
            continue
        try:
            doc = rf.read_top()
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("kind") == "matrix" and doc.get("status") != "complete" \
                and (doc.get("matrix") or {}).get("config") == want:
            return path
    return None


def command_line(argv: list[str]) -> str:
    return shlex.join(["hopbench", "matrix", *argv])
