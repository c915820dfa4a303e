"""A matrix's configuration, its folder (opened, resumed), the Agents it runs on, and the
error of a node that left."""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hopbench import results as R
from hopbench.errors import ConfigError, HopbenchError
from hopbench.records import HIDDEN_DEFAULT
from hopbench.shape import ShapeConfig


class NodeLeft(HopbenchError):
    """The node's agent is gone (it left the cluster)."""

    def __init__(self, why: str, node: str | None = None):
        super().__init__(why)
        self.why, self.node = why, node


class Agents(Protocol):
    """The nodes and what can be asked of them."""

    def nodes(self) -> list[str]: ...

    def doctor(self, node: str) -> dict: ...

    def serve(self, node: str) -> tuple[str, int]:
        """Start (once) the node's server; its (host, port)."""

    def run(self, node: str, host: str, port: int, job: dict) -> dict:
        """Run one client job (runner.run_session) on the node; {"ok", "error", "files": {name: text}}."""

    def close(self) -> None: ...


@dataclass
class MatrixConfig:
    # the shape: from configs/shape.toml (shape_fields), never restated here
    k: int
    id_bytes: int
    bytes_per_token: int
    operating_tokens: int
    tokens: tuple[int, ...] = (1, 3)
    bytes: tuple[int, ...] = ()
    transports: tuple[str, ...] = ("tcp",)
    repeats: int = 3
    cycles: int = 200
    warmup: int = 20
    ordered: bool = False
    concurrency: int = 0  # 0: every pair of a round at once; 1: strictly one pair at a time
    poll: str = "auto"
    seed: int = 0
    command: str = ""
    transport_settings: dict[str, dict[str, str]] = field(default_factory=dict)
    codecs: tuple[str, ...] = ("none",)  # payload codecs (docs/CODECS.md): each payload also under each
    hidden: int = HIDDEN_DEFAULT  # values per scale of a lossy codec (configs/shape.toml)
    taps: tuple[int, ...] = ()  # the shape's aux layers


def shape_fields(shape: ShapeConfig) -> dict[str, Any]:
    """MatrixConfig's shape fields from a loaded shape config."""
    return {"k": shape.shape.k, "id_bytes": shape.shape.id_bytes, "bytes_per_token": shape.shape.bytes_per_token,
            "operating_tokens": shape.operating_tokens, "hidden": shape.shape.hidden,
            "taps": tuple(shape.shape.aux_layers)}


def checked(cfg: MatrixConfig) -> MatrixConfig:
    """ConfigError for a matrix that cannot run: counts, unknown transport settings, an
    operating payload not measured."""
    if cfg.concurrency < 0 or cfg.repeats < 1 or cfg.cycles < 1:
        raise ConfigError("--concurrency must be >= 0, --repeats and --cycles >= 1")
    from hopbench.core.transport import get_transport

    for t in cfg.transports:
        get_transport(t).check_settings(cfg.transport_settings.get(t, {}))
    if cfg.operating_tokens not in cfg.tokens:
        raise ConfigError(f"--tokens must include the operating payload T = {cfg.operating_tokens} (the hop is read "
                          "there)")
    if cfg.codecs != ("none",):
        from hopbench.orchestration.runjob import check_codecs

        cfg.codecs = tuple(check_codecs(",".join(cfg.codecs), cfg.hidden))
    return cfg


def parse_interfaces(text: str | None) -> dict[str, str]:
    """--interface: IFNAME for every node, or ADDR=IFNAME,... per node ("*" = every node)."""
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        if item:
            node, sep, name = item.partition("=")
            out[node if sep else "*"] = name if sep else node
    return out


def open_folder(out: Path | None, new: bool, results_dir: Path, cfg: MatrixConfig) -> Path:
    """The matrix folder: --out, else an unfinished one of this configuration (resumed), else new."""
    folder = out or (None if new else find_resumable(results_dir, cfg))
    if folder is None:
        return R.new_folder(results_dir, "matrix")
    if folder.exists() and not R.ResultFolder(folder).is_sweep:
        raise ConfigError(f"{folder} exists and is not a matrix folder; refusing to write into it")
    return folder


def _cfg_dict(cfg: MatrixConfig) -> dict:
    d = asdict(cfg)
    d.pop("command", None)
    d.pop("concurrency", None)  # how it was scheduled does not change what is measured
    return json.loads(json.dumps(d))


def find_resumable(root: Path, cfg: MatrixConfig) -> Path | None:
    """The newest unfinished matrix folder of this configuration under root, if any."""
    want = _cfg_dict(cfg)

    def same(reading: R.Reading) -> bool:
        h = reading.header
        return isinstance(h, R.SweepReport) and h.kind == "matrix" and (h.extra.get("matrix") or {}).get("config") == want

    return R.ResultFolder.find_resumable(root, "matrix", same)


def command_line(argv: list[str]) -> str:
    return shlex.join(["hopbench", "matrix", *argv])
