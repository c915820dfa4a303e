"""TOML config loading with key checking: a bad key names the key and the file."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from hopbench.errors import ConfigError

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


def load_toml(path: str | Path, allowed: set[str] | None = None) -> dict[str, Any]:
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    if allowed is not None:
        check_keys(data, allowed, str(path))
    return data


def check_keys(table: dict, allowed: set[str], file: str, prefix: str = "") -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(
                f"{file}: unknown key {prefix}{key!r} (allowed: {', '.join(sorted(allowed))})"
            )


def require(table: dict, key: str, types, file: str, prefix: str = "", allowed: set[str] | None = None):
    if key not in table:
        raise ConfigError(f"{file}: missing key {prefix}{key!r}")
    value = table[key]
    if not isinstance(value, types) or isinstance(value, bool) and types is not bool:
        raise ConfigError(f"{file}: key {prefix}{key!r} has the wrong type ({type(value).__name__})")
    if allowed is not None and isinstance(value, dict):
        check_keys(value, allowed, file, f"{prefix}{key}.")
    return value
