"""Configuration in one place: TOML loading with key checking (a bad key names the key and
the file) and the parsers of command-line values. The shape (hopbench.shape) and the rung
and sweep configs (hopbench.config_sweep) build on it."""

from __future__ import annotations

import tomllib
from importlib.resources import files
from pathlib import Path
from typing import Any

from hopbench.errors import ConfigError

LOCAL_CONFIGS = Path("configs")  # ./configs/ in the current directory (a checkout) wins over the installed copy


def config_file(rel: str | Path) -> Path:
    """A shipped config by its path under configs/ (e.g. "shape.toml", "rungs/emu-1g.toml"):
    ./configs/<rel> when the current directory has it, else the copy installed with
    hopbench (package data of hopbench.configs, read through importlib.resources)."""
    local = LOCAL_CONFIGS / rel
    if local.exists():
        return local
    return Path(str(files("hopbench.configs").joinpath(str(rel))))


def resolve_config(path: str | Path) -> Path:
    """A config path as given: itself when it exists; a relative configs/... path that does
    not exist here is the shipped config of that name (so the defaults work outside a checkout)."""
    path = Path(path)
    if path.exists() or path.is_absolute() or not path.parts or path.parts[0] != "configs":
        return path
    shipped = config_file(Path(*path.parts[1:]))
    return shipped if shipped.exists() else path


def load_toml(path: str | Path, allowed: set[str] | None = None) -> dict[str, Any]:
    path = resolve_config(path)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:  # found by fuzz/ (target config): TOML is UTF-8 text
        raise ConfigError(f"{path}: not valid TOML: not UTF-8 text (byte {exc.start})") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    if allowed is not None:
        check_keys(data, allowed, str(path))
    return data


def check_keys(table: dict, allowed: set[str], file: str, prefix: str = "") -> None:
    for key in table:
        if key not in allowed:
            raise ConfigError(
                f"{file}: unknown key {prefix + key!r} (allowed: {', '.join(sorted(allowed))})"
            )


def require(table: dict, key: str, types, file: str, prefix: str = "", allowed: set[str] | None = None):
    if key not in table:
        raise ConfigError(f"{file}: missing key {prefix + key!r}")
    value = table[key]
    if not isinstance(value, types) or isinstance(value, bool) and types is not bool:
        raise ConfigError(f"{file}: key {prefix + key!r} has the wrong type ({type(value).__name__})")
    if allowed is not None and isinstance(value, dict):
        check_keys(value, allowed, file, f"{prefix}{key}.")
    return value


DEFAULT_PORT = 5201  # `hopbench serve`'s port unless --bind says otherwise (iperf3's)


def parse_hostport(text: str, default_host: str = "127.0.0.1", default_port: int = 0) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT, or HOST alone (default_port: a peer's is DEFAULT_PORT)."""
    host, sep, port = text.rpartition(":")
    if not sep or (text.count(":") > 1 and not text.startswith("[")):  # HOST, or a bare IPv6 address
        host, port = text, str(default_port)
    host = host.strip("[]") or default_host
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"bad address {text!r}: expected HOST:PORT")
    return host, int(port)


def parse_int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise ConfigError(f"{what}: expected comma-separated integers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise ConfigError(f"{what}: expected positive integers, got {text!r}")
    return values


def parse_spec(text: str, flag: str, keys: dict[str, str]) -> tuple[str, dict[str, str]]:
    """An option spelled HEAD[,KEY=VALUE...] (as --codec zstd:3, --stream layers,forward=MS and
    --link NAME,rate=MBIT group a kind's settings): its head and its keys (`keys`: each key's
    placeholder), each once, or a one-line error naming the keys it takes."""
    head, *rest = [part.strip() for part in text.split(",")]
    kw: dict[str, str] = {}
    for part in rest:
        key, eq, value = part.partition("=")
        if not eq or key not in keys or key in kw or not value:
            raise ConfigError(f"{flag} {text}: {part!r} is not one of "
                              f"{', '.join(f'{k}={v}' for k, v in keys.items())} (each once)")
        kw[key] = value
    return head.strip(), kw
