import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hopbench.core import protocol as P
from hopbench.core.server import Server, ServerConfig
from hopbench.testing import register_fake

register_fake()  # the in-memory test transport, never in the product registry


class ServerThread:
    def __init__(self, **kw):
        kw.setdefault("idle_timeout_s", 5.0)
        self.lines: list[str] = []
        kw.setdefault("host", "127.0.0.1")
        self.server = Server(ServerConfig(port=0, **kw), log=self.lines.append)
        self.host, self.port = self.server.address
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.stop()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


@pytest.fixture
def server():
    st = ServerThread()
    yield st
    st.stop()


@pytest.fixture
def server_factory():
    made = []

    def make(**kw):
        st = ServerThread(**kw)
        made.append(st)
        return st

    yield make
    for st in made:
        st.stop()


def small_plan(transport="tcp", request_bytes=61440, reply_bytes=8, cycles=50, warmup=5, group=None, **kw):
    return P.Plan(transport=transport, request_bytes=request_bytes, reply_bytes=reply_bytes, k=2, id_bytes=4,
                  cycles=cycles, warmup=warmup, group=P.GroupPlan.from_dict(group) if isinstance(group, dict) else group,
                  **kw)


def dead_port() -> int:
    """A port nothing listens on (bound, read, closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def ray_cluster():
    """A factory of started namespace Ray clusters (hopbench.testing.raycluster), skipped
    where they cannot run; each is stopped afterwards and must leave nothing behind."""
    from hopbench.testing import raycluster

    why = raycluster.available()
    if why:
        pytest.skip(why)
    made = []

    def make(**kw):
        c = raycluster.LocalCluster(**kw)
        made.append(c)
        return c.start()
    yield make
    for c in made:
        c.stop()
        assert c.leftovers() == []


ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden"


def cli(*args, env=None, timeout=180):
    """`hopbench ARGS` as a user runs it: a child process in the checkout, its output kept."""
    return subprocess.run([sys.executable, "-m", "hopbench", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=ROOT)


def serve_process(*extra, env=None):
    """`hopbench serve` on a free loopback port, as a child process; (the process, its port)."""
    from hopbench.orchestration.serverproc import ready_port

    p = subprocess.Popen([sys.executable, "-m", "hopbench", "serve", "--bind", "127.0.0.1:0", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, **(env or {})})
    return p, ready_port(p)


def run_folder(server, folder, payloads, **kw):
    """A small tcp run of these payloads against a test server, written into folder."""
    from hopbench.orchestration.runner import run_session
    from hopbench.records import RunConfig

    folder.mkdir()
    run_session(server.host, server.port, payloads, RunConfig("tcp", k=2, id_bytes=4, cycles=20, warmup=2, **kw),
                folder=folder)
    return folder
