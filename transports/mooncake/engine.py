"""The process's Mooncake engines: one per (address, protocol, device), created on first
use and shared by every channel; its settings read once; the notifications it receives
routed to the channel each names."""

from __future__ import annotations

import importlib.metadata
import os
import threading
from dataclasses import dataclass
from typing import Any

from mooncake.engine import TransferEngine, TransferNotify, TransferOpcode

from hopbench.errors import ConfigError, TransportError

PROTOCOLS = ("tcp", "rdma")
DISTRIBUTIONS = ("mooncake-transfer-engine-non-cuda", "mooncake-transfer-engine")
RDMA_DEVICES = "/sys/class/infiniband"

WRITE = TransferOpcode.Write


def _quiet() -> None:
    """The engine logs through its bundled glog, uninitialised, so every INFO line of every
    connection goes to stderr (and an ERROR line at every start, "Local segment descriptor not
    found", which is not one): keep its fatal lines only, as GLOG_minloglevel=3 would (read by glog
    when it loads, i.e. before this module could set it). A user's own GLOG_minloglevel wins."""
    if "GLOG_minloglevel" in os.environ:
        return
    import ctypes
    import glob

    import mooncake.engine as lib

    for path in glob.glob(os.path.join(os.path.dirname(os.path.dirname(lib.__file__)), "mooncake*.libs", "libglog*")):
        try:
            ctypes.c_int.in_dll(ctypes.CDLL(path), "_ZN3fLI17FLAGS_minloglevelE").value = 3
        except (OSError, ValueError):
            pass


_quiet()


@dataclass(frozen=True)
class Settings:
    protocol: str = "tcp"
    device: str = ""
    ring_bytes: int = 64 << 20
    delay_s: float = 50e-6

    def record(self) -> dict[str, Any]:
        return {"protocol": self.protocol, "device": self.device, "ring_bytes": self.ring_bytes,
                "progress_delay_us": round(self.delay_s * 1e6)}


def _int(key: str, value: Any, low: int, high: int) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"--opt {key}={value!r}: expected an integer") from None
    if not low <= n <= high:
        raise ConfigError(f"--opt {key}={value}: expected {low}..{high}")
    return n


def parse(settings: dict[str, Any]) -> Settings:
    """The MOONCAKE_* settings, checked: ConfigError names the key and what it takes."""
    s: dict[str, Any] = {}
    for key, value in settings.items():
        if key == "MOONCAKE_protocol":
            if value not in PROTOCOLS:
                raise ConfigError(f"--opt {key}={value!r}: expected one of {', '.join(PROTOCOLS)}")
            s["protocol"] = value
        elif key == "MOONCAKE_device":
            s["device"] = str(value)
        elif key == "MOONCAKE_ring_mib":
            s["ring_bytes"] = _int(key, value, 1, 1 << 14) << 20
        elif key == "MOONCAKE_progress_delay_us":
            s["delay_s"] = _int(key, value, 0, 1_000_000) / 1e6
        else:
            raise ConfigError(f"--opt {key}: not a Mooncake setting (MOONCAKE_protocol, MOONCAKE_device, "
                              "MOONCAKE_ring_mib, MOONCAKE_progress_delay_us)")
    return Settings(**s)


def rdma_devices() -> list[str]:
    try:
        return sorted(os.listdir(RDMA_DEVICES))
    except OSError:
        return []


def version() -> str:
    for dist in DISTRIBUTIONS:
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "mooncake (version unknown)"


class Inbox:
    """One channel's notifications: its messages by k ((position, length)), the peer's
    acknowledgement of our ring (how far it has read), its goodbye."""

    __slots__ = ("events", "acked", "goodbye")

    def __init__(self) -> None:
        self.events: dict[int, tuple[int, int]] = {}
        self.acked = 0
        self.goodbye = False

    def put(self, msg: str) -> None:
        kind, _, rest = msg.partition(" ")
        fields = [int(f) for f in rest.split()] if rest else []
        if kind == "D" and len(fields) == 4:
            k, pos, n, acked = fields
            self.events[k] = (pos, n)
            self.acked = max(self.acked, acked)
        elif kind == "A" and len(fields) == 1:
            self.acked = max(self.acked, fields[0])
        elif kind == "G":
            self.goodbye = True


class Engine:
    """A Transfer Engine with its notifications routed to the channels' inboxes by id."""

    _all: dict[tuple[str, str, str], "Engine"] = {}
    _lock = threading.Lock()

    def __init__(self, host: str, settings: Settings) -> None:
        self.raw = TransferEngine()
        try:
            rc = self.raw.initialize(host, "P2PHANDSHAKE", settings.protocol, settings.device)
        except Exception as exc:
            raise TransportError(f"Mooncake engine on {host} ({settings.protocol}) failed to start: {exc}") from None
        if rc != 0:
            raise TransportError(f"Mooncake engine on {host} ({settings.protocol}) failed to start (status {rc})")
        self.host = host
        self.rpc_port = int(self.raw.get_rpc_port())
        self.inboxes: dict[int, Inbox] = {}

    @classmethod
    def get(cls, host: str, settings: Settings) -> "Engine":
        key = (host, settings.protocol, settings.device)
        with cls._lock:
            engine = cls._all.get(key)
            if engine is None:
                engine = cls._all[key] = cls(host, settings)
            return engine

    def poll(self) -> bool:
        """Route what has arrived to its channels; True when anything came."""
        got = self.raw.get_notifies()
        for n in got:
            try:
                box = self.inboxes.get(int(n.name))
            except ValueError:
                continue  # not a hopbench channel's
            if box is not None:
                box.put(n.msg)
        return bool(got)

    def register(self, addr: int, nbytes: int) -> None:
        try:
            rc = self.raw.register_memory(addr, nbytes)
        except Exception as exc:
            raise TransportError(f"Mooncake memory registration failed: {exc}") from None
        if rc != 0:
            raise TransportError(f"Mooncake memory registration of {nbytes} B failed (status {rc})")

    def unregister(self, addr: int) -> None:
        try:
            self.raw.unregister_memory(addr)
        except Exception:
            pass

    def write(self, peer: str, src: int, dst: int, n: int, to: int, msg: str) -> int:
        """A one-sided WRITE of n bytes with a notification for channel `to`; the engine's status."""
        return int(self.raw.transfer_sync(peer, src, dst, n, WRITE, TransferNotify(str(to), msg)))
