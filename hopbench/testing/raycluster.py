"""A Ray cluster of N nodes on one machine, each node in its own network namespace on one
bridge, one node's link optionally shaped slower (tc tbf both ways): what `hopbench
matrix` is tested on (tests/test_matrix.py) and demonstrated with
(benchmarks/matrix_local.py). Root, iproute2 and Ray are needed.

Clean-up ends every process inside the namespaces by pid (deleting a namespace does not
end them, and gcs_server ignores SIGTERM for a while: MEASURED.md), then deletes the
namespaces and the bridge."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from hopbench.orchestration.netem import tbf_args

PREFIX = "hbm"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def available() -> str | None:
    """Why a local cluster cannot be built here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs {tool} (apt-get install iproute2)"
    try:
        import ray  # noqa: F401
    except ImportError:
        return "needs Ray: pip install 'hopbench[ray]'"
    return None


class LocalCluster:
    def __init__(self, nodes: int = 4, slow: int | None = None, slow_mbit: float = 100.0, subnet: int = 88):
        self.n, self.slow, self.slow_mbit = nodes, slow, slow_mbit
        self.net = f"10.{subnet}.0"
        self.bridge = f"{PREFIX}br{subnet}"
        self.ns = [f"{PREFIX}{subnet}n{i}" for i in range(nodes)]
        self.addresses = [f"{self.net}.{10 + i}" for i in range(nodes)]
        self.head = f"{self.addresses[0]}:6379"
        self.ray = str(Path(sys.executable).with_name("ray"))

    def exec_prefix(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", self.ns[i]]

    def hopbench(self, i: int, *args: str, timeout_s: float = 600.0) -> subprocess.CompletedProcess:
        """`hopbench ARGS` on node i (in its namespace), from the repository root."""
        return subprocess.run([*self.exec_prefix(i), sys.executable, "-m", "hopbench", *args], capture_output=True,
                              text=True, timeout=timeout_s, cwd=Path(__file__).resolve().parent.parent.parent)

    def start(self, timeout_s: float = 90.0) -> "LocalCluster":
        try:
            self._network()
            self._ray(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _network(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.net}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.ns):
            a = self._host_ends()[i]
            b = a[:-1] + "b"
            _ip("netns", "add", ns)
            _ip("link", "add", a, "type", "veth", "peer", "name", b)
            _ip("link", "set", b, "netns", ns)
            _ip("link", "set", a, "master", self.bridge)
            _ip("link", "set", a, "up")
            _ip("netns", "exec", ns, "ip", "addr", "add", f"{self.addresses[i]}/24", "dev", b)
            _ip("netns", "exec", ns, "ip", "link", "set", b, "up")
            _ip("netns", "exec", ns, "ip", "link", "set", "lo", "up")
            if shutil.which("ethtool"):  # no reordering on shaped veths (MEASURED.md)
                for where, dev in ((["ip", "netns", "exec", ns], b), ([], a)):
                    subprocess.run([*where, "ethtool", "-K", dev, "tso", "off", "gro", "on"], capture_output=True)
            if i == self.slow:  # shaped both ways: egress from the node and towards it
                subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", b, "root",
                                *tbf_args(self.slow_mbit)], check=True, capture_output=True)
                subprocess.run(["tc", "qdisc", "replace", "dev", a, "root", *tbf_args(self.slow_mbit)], check=True,
                               capture_output=True)

    def _ray(self, timeout_s: float) -> None:
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        common = ["--num-cpus", "1", "--disable-usage-stats"]
        subprocess.run([*self.exec_prefix(0), self.ray, "start", "--head", "--node-ip-address", self.addresses[0],
                        "--port", "6379", "--include-dashboard=false", *common], check=True, capture_output=True,
                       env=env, timeout=timeout_s)
        for i in range(1, self.n):
            subprocess.run([*self.exec_prefix(i), self.ray, "start", "--address", self.head, "--node-ip-address",
                            self.addresses[i], *common], check=True, capture_output=True, env=env, timeout=timeout_s)

    def stop(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = []
            for ns in self.ns:
                r = _ip("netns", "pids", ns, check=False)
                pids += [int(p) for p in r.stdout.split() if p.strip().isdigit()]
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            if pids and sig == signal.SIGTERM:
                time.sleep(0.5)  # a grace period before SIGKILL, not synchronisation
        for ns in self.ns:
            _ip("netns", "del", ns, check=False)
        for dev in self._host_ends():  # the kernel frees a deleted namespace's veths lazily: not left to it
            _ip("link", "del", dev, check=False)
        _ip("link", "del", self.bridge, check=False)
        current = Path("/tmp/ray/ray_current_cluster")  # `ray start --head` left our address for "auto"
        try:
            if current.read_text().strip() == self.head:
                current.unlink()
        except OSError:
            pass

    def _host_ends(self) -> list[str]:
        return [f"{PREFIX}{i}{self.net.split('.')[1]}a" for i in range(self.n)]

    def leftovers(self) -> list[str]:
        names = _ip("netns", "list", check=False).stdout
        links = [d for d in [self.bridge, *self._host_ends()] if _ip("link", "show", d, check=False).returncode == 0]
        return [ns for ns in self.ns if ns in names] + links

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
