"""The agent on each node (a Ray actor): the node's server and client, its doctor report,
and the interface helpers it needs."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from hopbench.errors import ConfigError
from hopbench.records import CONNECT_TIMEOUT_S, RunConfig


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
        from hopbench.orchestration import doctor as DR

        rep = DR.local_report(with_ucx=False).to_dict()
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

        from hopbench.orchestration.agent import answered
        from hopbench.orchestration.runner import RunIdentity, run_session
        from hopbench.records import Payload

        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "cell"
            out.mkdir()
            def work() -> None:
                loads = [Payload(**p) for p in job.get("payloads") or [job["payload"]]]  # several: the fan-in's
                run_session(host, port, loads, RunConfig.from_dict(job["config"]), folder=out,
                            identity=RunIdentity(job.get("group"), job.get("target"), job.get("extra")))

            answer = answered(work)
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


def _check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
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
