import socket
import threading

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
