"""The speculative hop's shape: tokens -> request bytes, K -> reply bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from hopbench.config import config_file, load_toml, parse_int_list, require, resolve_config
from hopbench.errors import ConfigError
from hopbench.records import Payload

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}
ID_BYTES = {"int32": 4, "int64": 8, "int16": 2}


@dataclass(frozen=True)
class Shape:
    aux_layers: tuple[int, ...]
    hidden: int
    dtype: str
    k: int
    id_dtype: str

    @property
    def bytes_per_token(self) -> int:
        return len(self.aux_layers) * self.hidden * DTYPE_BYTES[self.dtype]

    @property
    def id_bytes(self) -> int:
        return ID_BYTES[self.id_dtype]

    def request_bytes(self, tokens: int) -> int:
        return tokens * self.bytes_per_token

    def reply_bytes(self, k: int | None = None) -> int:
        return (self.k if k is None else k) * self.id_bytes


@dataclass(frozen=True)
class ShapeConfig:
    shape: Shape
    tokens: tuple[int, ...]
    bytes_min: int
    bytes_max: int
    bytes_points: int
    t_draft_ms: float
    cycle_ms: float
    tok_s: float
    operating_tokens: int
    path: str


def load_shape(path: str | Path | None = None) -> ShapeConfig:
    path = resolve_config(path) if path else config_file("shape.toml")
    data = load_toml(path, allowed={"model", "draft", "grid", "decode"})
    f = str(path)
    model = require(data, "model", dict, f, allowed={"name", "aux_layers", "hidden", "dtype"})
    draft = require(data, "draft", dict, f, allowed={"k", "id_dtype"})
    grid = require(data, "grid", dict, f, allowed={"tokens", "bytes_min", "bytes_max", "bytes_points"})
    dec = require(data, "decode", dict, f, allowed={"t_draft_ms", "cycle_ms", "tok_s", "operating_tokens"})
    dtype = require(model, "dtype", str, f, "model.")
    id_dtype = require(draft, "id_dtype", str, f, "draft.")
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"{f}: model.dtype must be one of {sorted(DTYPE_BYTES)}, got {dtype!r}")
    if id_dtype not in ID_BYTES:
        raise ConfigError(f"{f}: draft.id_dtype must be one of {sorted(ID_BYTES)}, got {id_dtype!r}")
    shape = Shape(
        aux_layers=tuple(require(model, "aux_layers", list, f, "model.")),
        hidden=require(model, "hidden", int, f, "model."),
        dtype=dtype,
        k=require(draft, "k", int, f, "draft."),
        id_dtype=id_dtype,
    )
    return ShapeConfig(
        shape=shape,
        tokens=tuple(require(grid, "tokens", list, f, "grid.")),
        bytes_min=require(grid, "bytes_min", int, f, "grid."),
        bytes_max=require(grid, "bytes_max", int, f, "grid."),
        bytes_points=require(grid, "bytes_points", int, f, "grid."),
        t_draft_ms=float(require(dec, "t_draft_ms", (int, float), f, "decode.")),
        cycle_ms=float(require(dec, "cycle_ms", (int, float), f, "decode.")),
        tok_s=float(require(dec, "tok_s", (int, float), f, "decode.")),
        operating_tokens=require(dec, "operating_tokens", int, f, "decode."),
        path=f,
    )


def payloads(bytes_per_token: int, tokens: "list[int] | tuple[int, ...]", sizes: "list[int] | tuple[int, ...]",
             reply: int | str) -> list[Payload]:
    """The one plan path (run, sweep and matrix): a payload per accepted-token count (T<t>,
    t x bytes_per_token) and per raw request size (B<b>). `reply`: the reply's bytes, or
    "same" for an echo-sized (symmetric) reply."""
    def sized(req: int) -> int:
        return req if reply == "same" else int(reply)

    out = [Payload(f"T{t}", t, t * bytes_per_token, sized(t * bytes_per_token)) for t in tokens]
    return out + [Payload(f"B{b}", None, b, sized(b)) for b in sizes]


def reply_size(text: str | None, k: int, id_bytes: int) -> int | str:
    """--reply-bytes: None -> K ids; 'same' -> echo-sized; else a number of bytes."""
    if text is None:
        return k * id_bytes
    if text == "same":
        return "same"
    return parse_int_list(text, "--reply-bytes")[0]


MAX_GRID_POINTS = 10_000  # a size grid larger than this is a typo, not a plan (each size is a cell)


def log_grid(lo: int, hi: int, points: int) -> list[int]:
    """`points` log-spaced sizes from lo to hi inclusive, rounded to whole bytes, deduplicated."""
    if points > MAX_GRID_POINTS:  # found by fuzz/ (target cli_values): log:5:6:51946544 took 28 s
        raise ConfigError(f"a grid of {points} sizes: at most {MAX_GRID_POINTS}")
    if points < 2 or lo <= 0 or hi <= lo:
        return sorted({max(1, lo), max(1, hi)})
    step = (math.log(hi) - math.log(lo)) / (points - 1)
    return sorted({int(round(math.exp(math.log(lo) + i * step))) for i in range(points)})


def parse_bytes_grid(text: str, shape_cfg: ShapeConfig) -> list[int]:
    """'grid' -> the config's log-spaced grid; 'log:LO:HI:N' -> N log-spaced sizes; else a list."""
    if text == "grid":
        return log_grid(shape_cfg.bytes_min, shape_cfg.bytes_max, shape_cfg.bytes_points)
    if text.startswith("log:"):
        parts = text.split(":")[1:]
        if len(parts) != 3:
            raise ConfigError(f"--bytes {text!r}: expected log:LO:HI:POINTS")
        values = parse_int_list(",".join(parts), "--bytes")
        if len(values) != 3 or "" in parts:  # found by fuzz/ (target cli_values): "log::4:40965"
            raise ConfigError(f"--bytes {text!r}: expected log:LO:HI:POINTS")
        lo, hi, n = values
        return log_grid(lo, hi, n)
    return parse_int_list(text, "--bytes")
