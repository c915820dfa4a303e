"""The analysis extra, imported lazily: the measuring path (serve, run) needs numpy only."""

from __future__ import annotations

from typing import Any

from hopbench.errors import ConfigError

INSTALL = "pip install 'hopbench[analysis]'"


def pandas() -> Any:
    try:
        import pandas as pd
    except ImportError:
        raise ConfigError(f"this analysis needs pandas: {INSTALL}") from None
    return pd
