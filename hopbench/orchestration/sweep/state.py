"""A sweep folder's state: the config fingerprint that makes it resumable, finding an
unfinished sweep of the same config, whether a cell is done."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from hopbench.config_sweep import SweepConfig

SWEEP_SCHEMA = "hopbench.sweep"


def _fingerprint(cfg: SweepConfig) -> str:
    d = asdict(cfg)
    d.pop("path")
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def find_resumable(root: Path, cfg: SweepConfig) -> Path | None:
    """The newest unfinished sweep folder of this exact config, if any."""
    fp = _fingerprint(cfg)
    for sweep_json in sorted(Path(root).glob(f"*-sweep-{cfg.name}-{cfg.profile}/sweep.json"), reverse=True):
        try:
            rep = json.loads(sweep_json.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if rep.get("fingerprint") == fp and rep.get("status") != "complete":
            return sweep_json.parent
    return None


def cell_done(folder: Path) -> bool:
    try:
        return json.loads((folder / "report.json").read_text()).get("status") == "complete"
    except (OSError, json.JSONDecodeError):
        return False
