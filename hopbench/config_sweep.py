"""Rung and sweep configs (configs/rungs/*.toml, configs/sweep.toml): loading with key
checking; a bad key names the key and the file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hopbench.config import check_keys, config_file, load_toml, parse_hostport, require
from hopbench.errors import ConfigError
from hopbench.records import DESIGNS

RUNG_KEYS = {"name", "kind", "transports", "rate_mbit", "mtu", "peer", "interface", "bytes_max", "ucx", "zmq",
             "nixl", "placement"}
SWEEP_KEYS = {"name", "rungs", "transports", "tokens", "k", "bytes_min", "bytes_max", "bytes_points", "repeats",
              "cell_budget_s", "min_cycles", "max_cycles", "warmup", "seed", "gaps_ms", "operating_tokens",
              "placements", "codecs", "payload_from", "clients", "stream", "designs"}


@dataclass(frozen=True)
class Rung:
    name: str
    kind: str  # loopback | emulated | real
    transports: tuple[str, ...]
    rate_mbit: float | None = None
    mtu: int = 1500
    peer: str | None = None
    interface: str | None = None
    bytes_max: int | None = None
    ucx: dict = field(default_factory=dict)
    zmq: dict = field(default_factory=dict)
    nixl: dict = field(default_factory=dict)  # NIXL_* settings, e.g. {NIXL_UCX_TLS = "tcp"}
    placement: str | None = None  # pins this rung to one placement (e.g. "split-busy")
    path: str = ""

    def settings(self) -> dict[str, dict]:
        return {k: v for k, v in (("ucx", dict(self.ucx)), ("zmq", dict(self.zmq)), ("nixl", dict(self.nixl))) if v}


def load_rung(name: str) -> Rung:
    path = Path(name) if name.endswith(".toml") else config_file(f"rungs/{name}.toml")
    data = load_toml(path, allowed={"rung"})
    f = str(path)
    r = require(data, "rung", dict, f)
    check_keys(r, RUNG_KEYS, f, "rung.")
    kind = require(r, "kind", str, f, "rung.")
    if kind not in ("loopback", "emulated", "real"):
        raise ConfigError(f"{f}: rung.kind must be loopback, emulated or real (got {kind!r})")
    if kind == "real" and "peer" not in r:
        raise ConfigError(f"{f}: a real rung needs rung.peer (HOST:PORT of its hopbench serve)")
    if kind == "real":
        host, port = parse_hostport(require(r, "peer", str, f, "rung."))
        if port == 0:
            raise ConfigError(f"{f}: rung.peer {r['peer']!r} needs the server's port")
    return Rung(name=require(r, "name", str, f, "rung."), kind=kind,
                transports=tuple(require(r, "transports", list, f, "rung.")),
                rate_mbit=r.get("rate_mbit"), mtu=r.get("mtu", 1500), peer=r.get("peer"),
                interface=r.get("interface"), bytes_max=r.get("bytes_max"), ucx=r.get("ucx", {}),
                zmq=r.get("zmq", {}), nixl=r.get("nixl", {}), placement=r.get("placement"), path=f)


#: every sweep key but the rungs has a default (configs/sweep.toml's values, the name the
#: file's stem): a minimal config is `[sweep] rungs = ["loopback"]`
SWEEP_DEFAULTS: dict = {"transports": ["tcp", "zmq", "ucx"], "tokens": [1, 2, 3, 4, 5, 6, 7, 8], "k": 2,
                        "bytes_min": 64, "bytes_max": 4194304, "bytes_points": 9, "repeats": 5, "cell_budget_s": 0.35,
                        "min_cycles": 10, "max_cycles": 2000, "warmup": 10, "seed": 0, "gaps_ms": [0],
                        "operating_tokens": 3}


@dataclass(frozen=True)
class SweepConfig:
    name: str
    rungs: tuple[str, ...]
    transports: tuple[str, ...]
    tokens: tuple[int, ...]
    k: int
    bytes_min: int
    bytes_max: int
    bytes_points: int
    repeats: int
    cell_budget_s: float
    min_cycles: int
    max_cycles: int
    warmup: int
    seed: int
    gaps_ms: tuple[float, ...]
    operating_tokens: int
    placements: tuple[str, ...] = ("auto",)
    codecs: tuple[str, ...] = ("none",)  # payload codecs (docs/CODECS.md): an axis like the transports
    payload_from: str | None = None  # the hidden states the codecs encode (None: synthetic)
    #: targets at once against the rung's server (docs/RESULTS.md "Several targets"): an axis,
    #: each M > 1 its own series (tcp@M) measured back to back at every payload
    clients: tuple[int, ...] = (1,)
    #: the streamed hop as an axis (docs/STREAM.md): "off" and/or "layers" (a streamed cell per
    #: rung x transport at the operating payload, its series tcp~layers)
    stream: tuple[str, ...] = ("off",)
    #: payload designs as an axis: "taps" and/or "projected" (the drafter's fc on the target: the
    #: token payloads with one hidden-wide row per position, series tcp#projected)
    designs: tuple[str, ...] = ("taps",)
    path: str = ""
    profile: str = "default"


def load_sweep(path: str | Path, quick: bool = False) -> SweepConfig:
    path = Path(path)
    data = load_toml(path, allowed={"sweep", "quick"})
    f = str(path)
    s = dict(require(data, "sweep", dict, f))
    check_keys(s, SWEEP_KEYS, f, "sweep.")
    s = {"name": path.stem, **SWEEP_DEFAULTS, **s}
    if quick:
        q = data.get("quick", {})
        check_keys(q, SWEEP_KEYS, f, "quick.")
        s.update(q)
    try:
        cfg = SweepConfig(
            name=s["name"], rungs=tuple(s["rungs"]), transports=tuple(s["transports"]), tokens=tuple(s["tokens"]),
            k=int(s["k"]), bytes_min=int(s["bytes_min"]), bytes_max=int(s["bytes_max"]),
            bytes_points=int(s["bytes_points"]), repeats=int(s["repeats"]), cell_budget_s=float(s["cell_budget_s"]),
            min_cycles=int(s["min_cycles"]), max_cycles=int(s["max_cycles"]), warmup=int(s["warmup"]),
            seed=int(s["seed"]), gaps_ms=tuple(float(g) for g in s["gaps_ms"]),
            operating_tokens=int(s["operating_tokens"]), placements=tuple(s.get("placements", ["auto"])),
            codecs=tuple(str(c) for c in s.get("codecs", ["none"])), payload_from=s.get("payload_from"),
            clients=tuple(s.get("clients", [1])), stream=tuple(str(x) for x in s.get("stream", ["off"])),
            designs=tuple(str(x) for x in s.get("designs", ["taps"])), path=f, profile="quick" if quick else "default")
    except KeyError as exc:
        raise ConfigError(f"{f}: missing key sweep.{exc.args[0]}") from None
    if cfg.repeats < 1:
        raise ConfigError(f"{f}: sweep.repeats must be >= 1")
    if not cfg.stream or not set(cfg.stream) <= {"off", "layers"}:
        raise ConfigError(f"{f}: sweep.stream must list off and/or layers (got {list(cfg.stream)!r})")
    if not cfg.designs or not set(cfg.designs) <= set(DESIGNS):
        raise ConfigError(f"{f}: sweep.designs must list taps and/or projected (got {list(cfg.designs)!r})")
    if not cfg.clients or any(type(m) is not int or not 1 <= m <= 1024 for m in cfg.clients):
        raise ConfigError(f"{f}: sweep.clients must be a list of target counts 1..1024 (got {list(cfg.clients)!r})")
    return cfg
