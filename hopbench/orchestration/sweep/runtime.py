"""What runs during a sweep: per rung an emulated link (or loopback, or a real peer), a
long-lived server and one agent process; stop() tears all of it down."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path

from hopbench.config import parse_hostport
from hopbench.config_sweep import Rung
from hopbench.errors import HopbenchError
from hopbench.orchestration import netem
from hopbench.orchestration.serverproc import parse_ready


class _Proc:
    """A child process whose stdout lines we read with a timeout (no sleeps)."""

    def __init__(self, cmd: list[str], log_path: Path, stdin: bool = False):
        self.log = open(log_path, "a")
        self.cmd = list(cmd)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1,
                                     stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                     start_new_session=True)

    def readline(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        what = " ".join(map(str, self.cmd[-6:]))
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise HopbenchError(f"no answer from `{what}` within {timeout:.0f} s")
        line = self.proc.stdout.readline()
        if not line:
            raise HopbenchError(f"`{what}` exited (code {self.proc.poll()}); see {self.log.name}")
        return line

    def drain_to_log(self) -> None:
        def pump():
            for line in self.proc.stdout:
                self.log.write(line)
                self.log.flush()
        threading.Thread(target=pump, daemon=True).start()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        self.log.close()


class RungRuntime:
    """Link + server + agent for one rung; stop() tears all of it down."""

    def __init__(self, rung: Rung, logs: Path, place=None):
        self.place = place  # hopbench.core.placement.Placement or None
        self.rung = rung
        self.logs = logs
        self.link: netem.Link | None = None
        self.server: _Proc | None = None
        self.agent: _Proc | None = None
        self.host = "127.0.0.1"
        self.port = 0

    def start(self) -> None:
        rung, py = self.rung, [sys.executable, "-m"]
        client_prefix: list[str] = []
        if rung.kind == "emulated":
            self.link = netem.Link.create(rate_mbit=rung.rate_mbit, mtu=rung.mtu)
            client_prefix = self.link.exec_prefix("client")
            self.host = self.link.server_addr
        if rung.kind == "real":
            assert rung.peer is not None  # validated when the rung loaded
            self.host, self.port = parse_hostport(rung.peer)
        else:
            self.start_server()
        pin = ["taskset", "-c", self.place.client_cpu] if self.place and self.place.client_cpu else []
        tag = rung.name + (f"@{self.place.name}" if self.place else "")
        self.agent = _Proc(client_prefix + pin + py + ["hopbench.orchestration.agent"], self.logs / f"agent-{tag}.log",
                           stdin=True)

    def start_server(self) -> None:
        prefix = self.link.exec_prefix("server") if self.link else []
        opts = [f"--opt={k}={v}" for s in self.rung.settings().values() for k, v in s.items()]
        if self.place:
            opts += ["--poll", self.place.poll] + (["--cpu", self.place.server_cpu] if self.place.server_cpu else [])
        tag = self.rung.name + (f"@{self.place.name}" if self.place else "")
        self.server = _Proc(prefix + [sys.executable, "-m", "hopbench", "serve", "--bind", f"{self.host}:0", *opts],
                            self.logs / f"server-{tag}.log")
        line = self.server.readline(60)
        while line and not parse_ready(line):  # a library's warnings before the ready line
            line = self.server.readline(60)
        ready = parse_ready(line)
        if not ready:
            raise HopbenchError(f"the server of rung {tag} did not report ready (see {self.logs}/server-{tag}.log)")
        self.port = ready[1]
        self.server.drain_to_log()

    def server_died(self) -> bool:
        """True (and a fresh server started) when our local server is gone."""
        if self.server is None or self.server.proc.poll() is None:
            return False
        self.server.stop()
        self.start_server()
        return True

    def run_cell(self, job: dict, timeout: float) -> dict:
        assert self.agent is not None
        job = {**job, "host": self.host, "port": self.port}
        stdin = self.agent.proc.stdin
        assert stdin is not None
        stdin.write(json.dumps(job) + "\n")
        stdin.flush()
        return json.loads(self.agent.readline(timeout))

    def describe(self) -> dict:
        d = {**asdict(self.rung), "server": f"{self.host}:{self.port}",
             "placement": self.place.describe() if self.place else None}
        if self.link:
            d["link"] = self.link.describe()
        return d

    def stop(self) -> None:
        for p in (self.agent, self.server):
            if p is not None:
                p.stop()
        if self.link is not None:
            self.link.destroy()
