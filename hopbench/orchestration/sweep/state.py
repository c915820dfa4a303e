"""A sweep folder's state: the config fingerprint that makes it resumable, finding an
unfinished sweep of the same config, whether a cell is done."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from hopbench import results as R
from hopbench.config_sweep import SweepConfig


def _fingerprint(cfg: SweepConfig) -> str:
    d = asdict(cfg)
    d.pop("path")
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


def find_resumable(root: Path, cfg: SweepConfig) -> Path | None:
    """The newest unfinished sweep folder of this exact config, if any."""
    fp = _fingerprint(cfg)
    return R.ResultFolder.find_resumable(root, f"sweep-{cfg.name}-{cfg.profile}",
                                         lambda reading: reading.header.extra.get("fingerprint") == fp)
