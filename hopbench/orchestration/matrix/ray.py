"""The Ray glue: the only module that imports ray (the driver takes any Agents; tests use
in-process fakes)."""

from __future__ import annotations

import logging
import time
from typing import Any

from hopbench.errors import ConfigError
from hopbench.orchestration.matrix.agent import (
    _Agent,
    _auto_address,
    _check_reachable,
)
from hopbench.orchestration.matrix.config import (
    NodeLeft,
)


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
