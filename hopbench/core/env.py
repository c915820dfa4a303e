"""Environment of one end: host, kernel, CPU, Python and package versions, and the
interface the route to the peer leaves by (MTU, speed, driver from /sys)."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

SYS_NET = Path("/sys/class/net")
PACKAGES = ("hopbench", "numpy", "typer")  # and every registered transport's libraries (transport.libraries)


def read_sys(path: Path) -> str | None:
    """A /proc or /sys file's text, stripped (None where it cannot be read)."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    from hopbench.core.transport import libraries

    for name in (*PACKAGES, *libraries()):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def route(peer_host: str) -> dict[str, Any]:
    """The kernel's route to `peer_host` (`ip route get`): its address, the interface it
    leaves by and the source address (None where unknown), and the raw line."""
    try:
        addr = socket.gethostbyname(peer_host)
        out = subprocess.run(["ip", "route", "get", addr], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return {"peer": peer_host, "interface": None}
    w = out.split()
    return {"peer": peer_host, "address": addr, "interface": w[w.index("dev") + 1] if "dev" in w else None,
            "source": w[w.index("src") + 1] if "src" in w else None, "raw": out.strip()}


def route_interface(peer_host: str) -> str | None:
    """The interface the kernel's route to `peer_host` leaves by."""
    interface: str | None = route(peer_host)["interface"]
    return interface


def driver_of(dev: Path) -> str | None:
    """The kernel driver bound to a /sys/class/net device (None: virtual, or none bound)."""
    try:
        return os.path.basename(os.readlink(dev / "device" / "driver"))
    except OSError:
        return None


def interface_info(name: str, sys_net: Path = SYS_NET) -> dict[str, Any]:
    base = sys_net / name
    speed = read_sys(base / "speed")
    driver = driver_of(base)
    mtu = read_sys(base / "mtu")
    return {
        "name": name,
        "mtu": int(mtu) if mtu and mtu.isdigit() else None,
        # speed reads -1 or fails on virtual links (veth, lo): None means "not reported"
        "speed_mbps": int(speed) if speed and speed.lstrip("-").isdigit() and int(speed) > 0 else None,
        "driver": driver,
        "operstate": read_sys(base / "operstate"),
    }


def collect(peer_host: str | None = None) -> dict[str, Any]:
    env: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "pinned": os.environ.get("HOPBENCH_PINNED"),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "packages": package_versions(),
        "tcp_slow_start_after_idle": read_sys(Path("/proc/sys/net/ipv4/tcp_slow_start_after_idle")),
        "tcp_congestion_control": read_sys(Path("/proc/sys/net/ipv4/tcp_congestion_control")),
        "netns": _netns_name(),
        "cpu_governor": read_sys(Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")),
    }
    if peer_host:
        dev = route_interface(peer_host)
        env["route"] = {"peer": peer_host, "interface": interface_info(dev) if dev else None}
    return env


def _netns_name() -> str | None:
    """The `ip netns` name this process runs in, if any (ip netns exec bind-mounts it)."""
    try:
        me = os.stat("/proc/self/ns/net").st_ino
        for p in Path("/run/netns").iterdir():
            if p.stat().st_ino == me:
                return p.name
    except OSError:
        pass
    return None
