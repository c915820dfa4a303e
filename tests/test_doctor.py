"""doctor on fake /sys trees (one per failure kind) and live across a 100 Mbit
emulated rung, where the shaped veth must be flagged as a slower hop."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hopbench.orchestration import doctor as D
from hopbench.orchestration import netem
from hopbench.orchestration.serverproc import ready_port
from tests.conftest import cli


def make_iface(root: Path, name, *, up=True, carrier=1, speed=1000, driver="igb", physical=True, pci="0000:01:00.0"):
    d = root / "class" / "net" / name
    d.mkdir(parents=True)
    (d / "flags").write_text("0x1003\n" if up else "0x1002\n")
    (d / "operstate").write_text("up\n" if up and carrier else "down\n")
    if up:
        (d / "carrier").write_text(f"{carrier}\n")
    (d / "speed").write_text(f"{speed}\n")
    (d / "duplex").write_text("full\n")
    (d / "mtu").write_text("1500\n")
    if physical:
        dev = root / "devices" / "pci0000:00" / pci
        dev.mkdir(parents=True, exist_ok=True)
        (d / "device").symlink_to(dev)
        if driver:
            drv = root / "bus" / "pci" / "drivers" / driver
            drv.mkdir(parents=True, exist_ok=True)
            (dev / "driver").symlink_to(drv)
    return d


def make_pci(root: Path, slot, cls="0x020000", driver=None):
    d = root / "bus" / "pci" / "devices" / slot
    d.mkdir(parents=True)
    (d / "class").write_text(cls + "\n")
    (d / "vendor").write_text("0x10ec\n")
    (d / "device").write_text("0x8126\n")
    if driver:
        drv = root / "bus" / "pci" / "drivers" / driver
        drv.mkdir(parents=True, exist_ok=True)
        (d / "driver").symlink_to(drv)


def codes(r):
    return {f.code for f in r.warnings}


@pytest.fixture
def proc(tmp_path):
    p = tmp_path / "proc" / "sys" / "net" / "ipv4"
    p.mkdir(parents=True)
    (p / "tcp_slow_start_after_idle").write_text("0\n")
    return tmp_path / "proc"


def test_healthy_tree_has_no_warnings(tmp_path, proc):
    make_iface(tmp_path, "eno1")
    make_pci(tmp_path, "0000:01:00.0", driver="igb")
    r = D.local_report(tmp_path, proc, with_ucx=False)
    assert r.warnings == [] and r.interfaces[0]["driver"] == "igb" and r.interfaces[0]["speed_mbps"] == 1000


def test_pci_network_device_without_driver(tmp_path, proc):
    make_pci(tmp_path, "0000:02:00.0")  # the GPU box's dark 5 GbE Realtek port
    make_pci(tmp_path, "0000:03:00.0", cls="0x030000")  # a GPU: not a network device
    r = D.local_report(tmp_path, proc, with_ucx=False)
    assert codes(r) == {"pci-no-driver"} and "0000:02:00.0" in r.warnings[0].message


def test_admin_down_port(tmp_path, proc):
    make_iface(tmp_path, "enP7s7", up=False)
    r = D.local_report(tmp_path, proc, with_ucx=False)
    assert codes(r) == {"admin-down"}
    assert r.interfaces[0]["carrier"] is None  # unreadable while down, reported as such


def test_no_carrier(tmp_path, proc):
    make_iface(tmp_path, "eno2", carrier=0)
    assert codes(D.local_report(tmp_path, proc, with_ucx=False)) == {"no-carrier"}


def test_interface_without_driver(tmp_path, proc):
    make_iface(tmp_path, "eno3", driver=None)
    assert "no-driver" in codes(D.local_report(tmp_path, proc, with_ucx=False))


def test_down_virtual_device_is_only_a_note(tmp_path, proc):
    make_iface(tmp_path, "ifb0", up=False, physical=False)
    r = D.local_report(tmp_path, proc, with_ucx=False)
    assert r.warnings == [] and any(f.code == "admin-down" for f in r.findings)


def test_speed_mismatch(tmp_path):
    make_iface(tmp_path, "eno1", speed=100)
    r = D.Report()
    D.check_speed(r, 1000, D.interfaces(tmp_path)[0])
    assert codes(r) == {"speed-mismatch"} and "100 Mb/s" in r.warnings[0].message


def test_route_via_another_interface(tmp_path):
    make_iface(tmp_path, "eno1")
    r = D.Report()
    D.check_route(r, {"peer": "10.0.0.2", "interface": "eno1"}, "enp1s0f0np0", tmp_path)
    assert codes(r) == {"route-interface"}


def test_this_machine_truthfully():
    r = D.local_report(with_ucx=False)
    names = {i["name"] for i in r.interfaces}
    ip = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert names == {line.split(":")[1].strip().split("@")[0] for line in ip.splitlines()}
    for i in r.interfaces:
        assert i["mtu"] == int(Path(f"/sys/class/net/{i['name']}/mtu").read_text())


ok, why = netem.available()


@pytest.mark.netns
@pytest.mark.skipif(not ok, reason=f"needs network namespaces: {why}")
def test_doctor_flags_shaped_veth_as_slower_hop():
    with netem.Link.create(rate_mbit=100) as link:
        srv = subprocess.Popen(link.exec_prefix("server") + [sys.executable, "-m", "hopbench", "serve", "--bind",
                               f"{link.server_addr}:0"], stdout=subprocess.PIPE, text=True)
        try:
            port = ready_port(srv)
            r = subprocess.run(link.exec_prefix("client") + [sys.executable, "-m", "hopbench", "doctor", "--peer",
                               f"{link.server_addr}:{port}", "--json"], capture_output=True, text=True, timeout=120)
        finally:
            srv.terminate()
            srv.wait(10)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["peer"]["local_interface"]["speed_mbps"] == 10000  # what the veth claims
    assert 50 < rep["peer"]["goodput_mbps"] < 110  # the 100 Mbit shaper, whatever else the machine does
    assert "slower-hop" in {f["code"] for f in rep["findings"] if f["level"] == "warn"}


def test_run_preflight_warns_and_strict_refuses(server, tmp_path):
    base = [sys.executable, "-m", "hopbench", "run", "--peer", f"{server.host}:{server.port}", "--tokens", "1",
            "--cycles", "5", "--warmup", "1", "--link", "lab,interface=eth-nonexistent"]
    r = subprocess.run(base + ["--out", str(tmp_path / "a")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "leaves by lo, not eth-nonexistent" in r.stderr
    rep = json.loads((tmp_path / "a" / "report.json").read_text())
    assert rep["doctor"]["findings"][-1]["code"] == "route-interface"
    r = subprocess.run(base + ["--strict", "--out", str(tmp_path / "b")], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--strict refuses" in r.stderr and not (tmp_path / "b").exists()


def test_doctor_compares_the_rate_it_is_given():
    a, b = cli("doctor", "--rate", "100"), cli("doctor", "--rate", "1000")
    la = [ln for ln in a.stdout.splitlines() if "nominal rate" in ln]
    lb = [ln for ln in b.stdout.splitlines() if "nominal rate" in ln]
    assert la and lb and la != lb and "100 Mb/s" in la[0] and "1000 Mb/s" in lb[0]
