"""Link emulation on one machine: two network namespaces joined by a veth pair,
optionally shaped with tc tbf (netem does not exist in this kernel; see docs/MEASURED.md).

    with Link.create(rate_mbit=100) as link:
        link.server_cmd([...]); link.client_ns ...

Teardown removes both namespaces (which removes the veth pair and its qdiscs) on exit,
on error and on Ctrl-C. Every object's name carries a per-process prefix, so a leftover
can be found (`ip netns list | grep hb`; `leftovers()` lists them for the tests).
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from hopbench.errors import HopbenchError

PREFIX = "hb"
_counter = itertools.count()

# tbf parameters (docs/MEASURED.md): Ethernet framing charged as 24 B overhead with an 84 B
# minimum (1538 B on the wire per 1448 B MSS segment at MTU 1500); a bucket of ~200 us
# of line time; a queue limit big enough that a 4 MiB request never drops.
TBF_OVERHEAD = 24
TBF_MPU = 84
# Measured alternatives (docs/SWEEP.md): a 25 us bucket, or a peakrate bucket, delivered
# only ~60% of 1 Gbit; 200 us delivers 99.7-100% of the TCP goodput bound.
TBF_BUCKET_S = 200e-6
TBF_LIMIT = 8 * 1024 * 1024


class NetnsUnavailable(HopbenchError):
    pass


def available() -> tuple[bool, str]:
    """Can this process create namespaces? (root and the ip tool)"""
    if os.geteuid() != 0:
        return False, "not root (network namespaces need CAP_NET_ADMIN)"
    if not shutil.which("ip") or not shutil.which("tc"):
        return False, "iproute2 (ip, tc) not installed"
    try:
        subprocess.run(["ip", "netns", "list"], check=True, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"ip netns does not work here ({exc})"
    return True, "ok"


def _run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetnsUnavailable(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()}")
    return proc


#: how long a new veth may take to be running (the kernel's link watch defers a carrier
#: change by up to a second; more is a broken link)
RUNNING_WAIT_S = 10.0


def _wait_running(ns: str, dev: str) -> None:
    """Return once `dev` in `ns` is operationally up (IFF_RUNNING). A veth's carrier comes up
    with both ends, but the kernel's link watch sets the running flag up to a second later,
    and UCX enumerates only running interfaces when its context is made: a process started
    in that second could not use the link ("device ... is not enabled", its hello then
    unreachable: 5 of 6 ucx runs started at once failed). Polls the flag, bounded."""
    deadline = time.monotonic() + RUNNING_WAIT_S
    while True:
        out = _run(["ip", "-n", ns, "-o", "link", "show", "dev", dev]).stdout
        flags = out.split("<", 1)[1].split(">", 1)[0].split(",") if "<" in out else []
        if "LOWER_UP" in flags and " state UP " in out:
            return
        if time.monotonic() > deadline:
            raise NetnsUnavailable(f"the emulated link's {dev} in {ns} is not running after {RUNNING_WAIT_S:g} s: "
                                   f"{out.strip()}")
        time.sleep(0.01)  # polling the kernel's flag, bounded by the deadline above


def tbf_args(rate_mbit: float) -> list[str]:
    rate_bps = rate_mbit * 1e6
    burst = max(3076, int(rate_bps / 8 * TBF_BUCKET_S))  # >= 2 full frames
    args = ["tbf", "rate", f"{rate_mbit:g}mbit", "burst", str(burst), "limit", str(TBF_LIMIT),
            "overhead", str(TBF_OVERHEAD), "mpu", str(TBF_MPU)]
    return args


@dataclass
class Link:
    """Two namespaces joined by a veth pair; server side .1, client side .2."""

    name: str
    server_ns: str
    client_ns: str
    server_addr: str
    client_addr: str
    rate_mbit: float | None
    mtu: int = 1500
    settings: dict[str, Any] = field(default_factory=dict)
    _up: bool = False

    @classmethod
    def create(cls, rate_mbit: float | None = None, mtu: int = 1500, subnet: int | None = None) -> "Link":
        ok, why = available()
        if not ok:
            raise NetnsUnavailable(f"cannot emulate a link: {why}")
        n = next(_counter)
        tag = f"{PREFIX}{os.getpid()}x{n}"
        net = subnet if subnet is not None else (os.getpid() * 7 + n) % 250 + 1
        link = cls(name=tag, server_ns=f"{tag}s", client_ns=f"{tag}c", server_addr=f"10.201.{net}.1",
                   client_addr=f"10.201.{net}.2", rate_mbit=rate_mbit, mtu=mtu)
        try:
            link._setup()
        except BaseException:
            link.destroy()
            raise
        return link

    def _setup(self) -> None:
        s, c = self.server_ns, self.client_ns
        self._up = True
        _run(["ip", "netns", "add", s])
        _run(["ip", "netns", "add", c])
        _run(["ip", "link", "add", f"{self.name}a", "netns", s, "type", "veth", "peer", "name", f"{self.name}b", "netns", c])
        for ns, dev, addr in ((s, f"{self.name}a", self.server_addr), (c, f"{self.name}b", self.client_addr)):
            # IPv4 only: a veth's IPv6 link-local address is still tentative (duplicate address
            # detection) for a second or two after the link comes up, and UCX's TCP lanes may
            # pick it. (The ucx hellos that failed "Destination is unreachable" just after a
            # link was made had another cause too: the link not yet running, _wait_running.)
            _run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"], check=False)
            _run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"], check=False)
            _run(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev])
            _run(["ip", "-n", ns, "link", "set", dev, "mtu", str(self.mtu), "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            # TSO off + GRO on: with the defaults a shaped veth reorders across CPUs and
            # retransmits (docs/MEASURED.md). Needs ethtool; recorded either way.
            if shutil.which("ethtool"):
                r = _run(["ip", "netns", "exec", ns, "ethtool", "-K", dev, "tso", "off", "gro", "on"], check=False)
                done = "tso off gro on" if r.returncode == 0 else f"ethtool failed: {r.stderr.strip()}"
                self.settings.setdefault("offloads", {})[dev] = done
            else:
                self.settings.setdefault("offloads", {})[dev] = "unchanged (ethtool not installed)"
            if self.rate_mbit:
                _run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", *tbf_args(self.rate_mbit)])
        self.settings["qdisc"] = {
            dev: _run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", dev]).stdout.strip()
            for ns, dev in ((s, f"{self.name}a"), (c, f"{self.name}b"))
        }
        for ns, dev in ((s, f"{self.name}a"), (c, f"{self.name}b")):
            _wait_running(ns, dev)


    def exec_prefix(self, side: str) -> list[str]:
        return ["ip", "netns", "exec", self.server_ns if side == "server" else self.client_ns]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "server_ns": self.server_ns, "client_ns": self.client_ns,
                "server_addr": self.server_addr, "client_addr": self.client_addr,
                "rate_mbit": self.rate_mbit, "mtu": self.mtu, **self.settings}

    def destroy(self) -> None:
        if not self._up:
            return
        for ns in (self.server_ns, self.client_ns):
            _run(["ip", "netns", "delete", ns], check=False)
        self._up = False

    def __enter__(self) -> "Link":
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()


def leftovers() -> list[str]:
    """hopbench namespaces that exist now (the tests check none is left behind)."""
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.startswith(PREFIX) and line.split()[0][len(PREFIX):].split("x")[0].isdigit()]

