"""`hopbench doctor`: check the path before measuring it.

The remote-drafter study lost an afternoon to a NIC with no driver bound (a cable in it
was electrically dark), an administratively down port, and a misread link partner. The
local report reads /sys (interfaces, PCI network devices without a driver, RDMA devices),
the sysctls that change results and the CPU governor; with a peer it adds the route, the
server's own report, the path MTU and a short goodput probe compared with the slower of
the two ends' negotiated speeds. Every function takes the /sys and /proc roots so tests
can hand it fake trees.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hopbench.core.env import driver_of, read_sys, route

IFF_UP = 0x1
SLOWER_HOP_RATIO = 0.5  # goodput below half the negotiated speed: something slower sits in between


@dataclass
class Finding:
    level: str  # "warn" or "info"
    code: str
    message: str


@dataclass
class Report:
    interfaces: list[dict] = field(default_factory=list)
    pci_without_driver: list[dict] = field(default_factory=list)
    rdma: list[dict] = field(default_factory=list)
    ucx_devices: list[str] | None = None
    transports: list[dict] = field(default_factory=list)  # hopbench.core.transport.describe_transports()
    sysctls: dict[str, Any] = field(default_factory=dict)
    cpu_governors: dict[str, int] = field(default_factory=dict)
    peer: dict[str, Any] | None = None
    findings: list[Finding] = field(default_factory=list)
    rate_check: dict[str, Any] | None = None  # the rate the user named (--rate) against what was found

    def warn(self, code: str, message: str) -> None:
        self.findings.append(Finding("warn", code, message))

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "warn"]

    def to_dict(self) -> dict:
        return asdict(self)


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def interfaces(sys_root: Path = Path("/sys")) -> list[dict]:
    out = []
    base = sys_root / "class" / "net"
    for dev in sorted(base.iterdir()) if base.exists() else []:
        raw_flags = read_sys(dev / "flags")
        flags = _int(str(int(raw_flags, 16)) if raw_flags else None)
        driver = driver_of(dev)
        speed = _int(read_sys(dev / "speed"))
        out.append({
            "name": dev.name,
            "admin_up": bool(flags & IFF_UP) if flags is not None else None,
            "operstate": read_sys(dev / "operstate"),
            "carrier": _int(read_sys(dev / "carrier")),  # unreadable (None) while admin down
            "driver": driver,
            "physical": (dev / "device").exists(),
            "speed_mbps": speed if speed and speed > 0 else None,
            "duplex": read_sys(dev / "duplex"),
            "mtu": _int(read_sys(dev / "mtu")),
        })
    return out


def pci_without_driver(sys_root: Path = Path("/sys")) -> list[dict]:
    """PCI network controllers (class 0x02xxxx) with no driver bound: unusable ports."""
    out = []
    base = sys_root / "bus" / "pci" / "devices"
    for dev in sorted(base.iterdir()) if base.exists() else []:
        cls = read_sys(dev / "class") or ""
        if cls.startswith("0x02") and not (dev / "driver").exists():
            out.append({"slot": dev.name, "class": cls, "vendor": read_sys(dev / "vendor"), "device": read_sys(dev / "device")})
    return out


def rdma_devices(sys_root: Path = Path("/sys")) -> list[dict]:
    out = []
    base = sys_root / "class" / "infiniband"
    for dev in sorted(base.iterdir()) if base.exists() else []:
        for port in sorted((dev / "ports").iterdir()) if (dev / "ports").exists() else []:
            out.append({"device": dev.name, "port": port.name, "state": read_sys(port / "state"),
                        "link_layer": read_sys(port / "link_layer"), "rate": read_sys(port / "rate")})
    return out


def ucx_devices() -> list[str] | None:
    """Transport/device resources UCX sees (None when ucxx is not installed)."""
    from hopbench.core.transport import get_transport
    from hopbench.errors import TransportUnavailable

    try:
        return get_transport("ucx").devices()
    except TransportUnavailable:
        return None


def _transports() -> list[dict]:
    from hopbench.core.transport import describe_transports

    return describe_transports()


def sysctls(proc_root: Path = Path("/proc")) -> dict[str, Any]:
    keys = ["net/ipv4/tcp_slow_start_after_idle", "net/core/rmem_max", "net/core/wmem_max", "net/ipv4/tcp_rmem",
            "net/ipv4/tcp_wmem", "net/ipv4/tcp_congestion_control"]
    return {k.replace("/", "."): read_sys(proc_root / "sys" / k) for k in keys}


def governors(sys_root: Path = Path("/sys")) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in sorted((sys_root / "devices" / "system" / "cpu").glob("cpu[0-9]*/cpufreq/scaling_governor")):
        g = read_sys(p) or "?"
        counts[g] = counts.get(g, 0) + 1
    return counts


def local_report(sys_root: Path = Path("/sys"), proc_root: Path = Path("/proc"), with_ucx: bool = True) -> Report:
    r = Report(interfaces=interfaces(sys_root), pci_without_driver=pci_without_driver(sys_root),
               rdma=rdma_devices(sys_root), ucx_devices=ucx_devices() if with_ucx else None,
               transports=_transports() if with_ucx else [],
               sysctls=sysctls(proc_root), cpu_governors=governors(sys_root))
    for i in r.interfaces:
        if i["name"] == "lo":
            continue
        # a down virtual device (ifb, dummy, a veth's peer) is a note; a physical port is a warning
        level = "warn" if i["physical"] else "info"
        if i["admin_up"] is False:
            r.findings.append(Finding(level, "admin-down", f"{i['name']} is administratively down (ip link set {i['name']} up)"))
        elif i["carrier"] == 0:
            r.findings.append(Finding(level, "no-carrier",
                                      f"{i['name']} is up but has no carrier (cable, switch port or peer down)"))
        if i["physical"] and i["driver"] is None:
            r.warn("no-driver", f"{i['name']} has no driver bound")
    for d in r.pci_without_driver:
        r.warn("pci-no-driver", f"PCI network device {d['slot']} ({d['vendor']}:{d['device']}) has no driver bound: "
                                "any port on it is electrically dark")
    for d in r.rdma:
        if d["state"] and "ACTIVE" not in d["state"]:
            r.warn("rdma-port-down", f"RDMA {d['device']} port {d['port']} is {d['state']}")
    if r.sysctls.get("net.ipv4.tcp_slow_start_after_idle") == "1":
        r.findings.append(Finding("info", "slow-start-after-idle",
                                  "net.ipv4.tcp_slow_start_after_idle=1: after think time TCP restarts slow start "
                                  "(measure with --gap-ms to see it)"))
    if any(g in ("powersave", "schedutil", "ondemand") for g in r.cpu_governors):
        r.findings.append(Finding("info", "cpu-governor", f"CPU governors {r.cpu_governors}: frequency scaling adds jitter"))
    return r


def check_route(r: Report, rt: dict, expected_interface: str | None, sys_root: Path = Path("/sys")) -> None:
    if expected_interface and rt.get("interface") and rt["interface"] != expected_interface:
        r.warn("route-interface", f"the route to {rt['peer']} leaves by {rt['interface']}, not {expected_interface} "
                                  "as the rung config names")
    if rt.get("interface"):
        i = next((x for x in interfaces(sys_root) if x["name"] == rt["interface"]), None)
        if i and i["admin_up"] is False:
            r.warn("route-admin-down", f"the route to {rt['peer']} leaves by {rt['interface']}, which is down")


def check_speed(r: Report, rung_rate_mbit: float | None, iface: dict | None) -> None:
    if rung_rate_mbit:
        r.rate_check = {"rate_mbit": rung_rate_mbit, "interface": (iface or {}).get("name"),
                        "negotiated_mbps": (iface or {}).get("speed_mbps")}
    if rung_rate_mbit and iface and iface.get("speed_mbps") and iface["speed_mbps"] < rung_rate_mbit:
        r.warn("speed-mismatch", f"{iface['name']} negotiated {iface['speed_mbps']} Mb/s, below the rung's "
                                 f"{rung_rate_mbit:g} Mb/s (link partner, cable or switch?)")


def peer_report(host: str, port: int, expected_interface: str | None = None, rung_rate_mbit: float | None = None,
                probe_s: float = 1.0, secret: str | None = None) -> Report:
    """Local report + route, the server's report, path MTU and a goodput probe."""
    import numpy as np

    from hopbench.core import control
    from hopbench.core import protocol as P
    from hopbench.core.client import Session

    r = local_report()
    rt = route(host)
    check_route(r, rt, expected_interface)
    local_if = next((i for i in r.interfaces if i["name"] == rt.get("interface")), None)
    check_speed(r, rung_rate_mbit, local_if)
    with Session(host, port, secret=secret) as s:
        server_env = s.server_env
        try:
            pmtu = control.path_mtu(s.control)
        except OSError:  # noqa: B014 (kept: a closed control channel)
            pmtu = None
        # goodput probe: 1 MiB requests for about probe_s; the fixed cost is subtracted
        # with a 64 B round trip measured in the same session
        small = float(np.median(s.measure(P.Plan("tcp", 64, 8, 2, 4, 50, 5)).timed))
        big = 1 << 20
        first = s.measure(P.Plan("tcp", big, 8, 2, 4, 3, 1))
        est = float(np.median(first.timed)) / 1e9
        n = max(3, min(500, int(probe_s / max(est, 1e-4))))
        t = float(np.median(s.measure(P.Plan("tcp", big, 8, 2, 4, n, 2)).timed))
        goodput_mbps = big * 8 / max(t - small, 1.0) * 1e3
    server_if = (server_env.get("route_to_client") or {}).get("interface") or {}
    speeds = [x for x in ((local_if or {}).get("speed_mbps"), server_if.get("speed_mbps")) if x]
    slower_end = min(speeds) if speeds else None
    r.peer = {"route": rt, "path_mtu": pmtu, "server_env": server_env, "local_interface": local_if,
              "server_interface": server_if, "goodput_mbps": goodput_mbps, "slower_end_mbps": slower_end,
              "probe": {"request_bytes": big, "p50_ns": t, "small_p50_ns": small}}
    if slower_end and goodput_mbps < SLOWER_HOP_RATIO * slower_end:
        r.warn("slower-hop", f"goodput {goodput_mbps:.0f} Mb/s is far below the {slower_end} Mb/s both ends "
                             "negotiated: a slower hop sits in between (switch port, shaper, misread link partner)")
    if local_if and local_if.get("mtu") and pmtu and pmtu < local_if["mtu"]:
        r.findings.append(Finding("info", "path-mtu", f"path MTU {pmtu} is below {local_if['name']}'s MTU {local_if['mtu']}"))
    return r


def format_report(r: Report) -> str:
    lines = [f"{'interface':<14} {'admin':<6} {'oper':<9} {'carrier':<8} {'driver':<14} {'speed':>10} {'duplex':<7} {'mtu':>6}"]
    for i in r.interfaces:
        lines.append(f"{i['name']:<14} {('up' if i['admin_up'] else 'down') if i['admin_up'] is not None else '?':<6} "
                     f"{i['operstate'] or '?':<9} {'-' if i['carrier'] is None else i['carrier']!s:<8} "
                     f"{i['driver'] or ('(none)' if i['physical'] else '(virtual)'):<14} "
                     f"{(str(i['speed_mbps']) + ' Mb/s') if i['speed_mbps'] else '-':>10} {i['duplex'] or '-':<7} "
                     f"{i['mtu'] or '-':>6}")
    lines.append(f"PCI network devices without a driver: {', '.join(d['slot'] for d in r.pci_without_driver) or 'none'}")
    lines.append("RDMA devices: " + (", ".join(f"{d['device']}/{d['port']} {d['state']} {d['link_layer']} {d['rate']}"
                                                for d in r.rdma) or "none (/sys/class/infiniband absent or empty)"))
    lines.append("UCX devices: " + (", ".join(r.ucx_devices) if r.ucx_devices is not None else "ucxx not installed"))
    if r.transports:
        lines.append("transports: " + "; ".join(f"{t['name']}: {t['version']}" if t["available"] else
                                                 f"{t['name']} not installed ({t['install'] or t['error']})"
                                                 for t in r.transports))
    lines.append("sysctls: " + ", ".join(f"{k}={v}" for k, v in r.sysctls.items()))
    lines.append(f"CPU frequency governors: {r.cpu_governors or 'not exposed (VM?)'}")
    if r.peer:
        p = r.peer
        lines.append(f"route to {p['route']['peer']}: via {p['route'].get('interface')} (src {p['route'].get('source')}); "
                     f"path MTU {p['path_mtu']}")
        lines.append(f"server {p['server_env'].get('hostname')}: its route back leaves by "
                     f"{p['server_interface'].get('name')} ({p['server_interface'].get('speed_mbps') or '?'} Mb/s)")
        lines.append(f"goodput probe: {p['goodput_mbps']:.0f} Mb/s (slower end negotiated: {p['slower_end_mbps'] or '?'} Mb/s)")
    if r.rate_check:
        rc = r.rate_check
        rate = rc["rate_mbit"]
        neg = rc.get("negotiated_mbps")
        where = rc.get("interface") or "the route's interface"
        if neg:
            verdict = "enough" if neg >= rate else "BELOW the nominal rate"
            lines.append(f"nominal rate (--rate) {rate:g} Mb/s vs {where} negotiated {neg} Mb/s: {verdict}")
        else:
            lines.append(f"nominal rate (--rate) {rate:g} Mb/s: {where} reports no negotiated speed (virtual or "
                         f"down), so only the goodput probe can check it" + ("" if r.peer and "goodput_mbps" in r.peer
                                                                           else " (give --peer)"))
        if r.peer and r.peer.get("goodput_mbps"):
            g = r.peer["goodput_mbps"]
            lines.append(f"goodput probe {g:.0f} Mb/s = {g / rate:.0%} of the nominal {rate:g} Mb/s"
                         + (" (TCP over Ethernet tops out near 94%)" if g <= rate else
                            " (above the nominal rate: the link is faster than --link ,rate= says)"))
    for f in r.findings:
        lines.append(f"{'WARNING' if f.level == 'warn' else 'note'}: {f.message}")
    if not r.warnings:
        lines.append("no warnings")
    return "\n".join(lines)


def preflight(peer_host: str, expected_interface: str | None = None, rung_rate_mbit: float | None = None) -> Report:
    """The cheap checks `run` and `sweep` do before measuring: /sys, the route, the
    interface's state and speed (no probe, no UCX)."""
    r = local_report(with_ucx=False)
    rt = route(peer_host)
    check_route(r, rt, expected_interface)
    iface = next((i for i in r.interfaces if i["name"] == rt.get("interface")), None)
    if iface and iface["name"] != "lo":
        if iface["admin_up"] is False or iface["carrier"] == 0:
            r.warn("route-link-down", f"the route to {peer_host} leaves by {iface['name']}, which has no link")
    check_speed(r, rung_rate_mbit, iface)
    r.peer = {"route": rt}
    return r
