"""Old spellings of options, kept one release (each with a one-line note), as one table per
command: the command's parser rewrites them into the option that replaced them before it
parses (a `Respelled` command), so the commands declare only today's options."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from typer.core import TyperCommand

from hopbench.errors import ConfigError


@dataclass(frozen=True)
class Old:
    """An option's old spelling: `flag` VALUE now reads as a part of `new`'s spec. `part`:
    "head" (the spec's first word: --rung NAME is --link NAME), "colon" (after the head's
    colon: --layers 80 is --stream layers:80), "key:NAME" (--rate 100 is --link ,rate=100),
    "tail" (a bare ,VALUE: --gpu-path direct is --memory cuda,direct) or "same" (the whole
    value, a plain rename). `default`: the new option's value when it is not given (None:
    the old flag means nothing without it, and is dropped with its note)."""

    flag: str
    new: str
    part: str
    note: str
    default: str | None = None


def _merge(spec: str, old: Old, value: str) -> str:
    """`spec` (the new option's value so far) with the old flag's value put in its place, or a
    one-line error where the spec already says it."""
    head, comma, rest = spec.partition(",")
    keys = [p.partition("=")[0] for p in rest.split(",") if "=" in p] if comma else []
    both = ConfigError(f"{old.flag} and {old.new} {spec} both set it: give it once, in {old.new}")
    if old.part == "same":
        if spec:
            raise both
        return value
    if old.part == "head":
        if head:
            raise both
        return value + comma + rest
    if old.part == "colon":
        if ":" in head:
            raise both
        return f"{head}:{value}" + comma + rest
    if old.part == "tail":
        if value in rest.split(","):
            raise both
        return f"{spec},{value}"
    key = old.part.removeprefix("key:")
    if key in keys:
        raise both
    return f"{spec},{key}={value}"


def respell(args: list[str], table: tuple[Old, ...], say: Any = None) -> list[str]:
    """`args` with every old spelling of `table` turned into today's option (each noted once
    on stderr), today's options given at the end in their merged form."""
    say = say or (lambda text: print(text, file=sys.stderr))
    olds = {o.flag: o for o in table}
    news = {o.new for o in table}
    kept: list[str] = []
    given: dict[str, str] = {}
    found: list[tuple[Old, str]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        flag, eq, inline = arg.partition("=")
        if arg == "--":  # what follows is not an option
            kept += args[i:]
            break
        if flag in olds or flag in news:
            if eq:
                value, i = inline, i + 1
            elif i + 1 < len(args):
                value, i = args[i + 1], i + 2
            else:  # a flag without its value: the parser says so
                kept.append(arg)
                i += 1
                continue
            if flag in olds:
                found.append((olds[flag], value))
            else:
                given[flag] = value
            continue
        kept.append(arg)
        i += 1
    for old, value in found:
        say(f"note: {old.note}; the old spelling goes in the next release")
        spec = given.get(old.new, old.default)
        if spec is None:
            continue
        given[old.new] = _merge(spec, old, value)
    for flag, value in given.items():
        kept += [flag, value]
    return kept


class Respelled(TyperCommand):
    """A command whose old spellings (`OLD[name]`) read as today's options, with a note."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, respell(list(args), OLD.get(self.name or "", ())))


#: each command's old spellings (docs: the options that replaced them say what they take)
OLD: dict[str, tuple[Old, ...]] = {
    "run": (
        Old("--server-memory", "--memory", "colon", "--server-memory is now --memory CLIENT:SERVER", "host"),
        Old("--gpu-path", "--memory", "tail", "--gpu-path is now --memory cuda,direct (or ,staged)", "host"),
        Old("--arrivals", "--mps", "colon", "--arrivals is now --mps RATE:poisson"),
        Old("--layers", "--stream", "colon", "--layers is now --stream layers:N", "off"),
        Old("--forward-ms", "--stream", "key:forward", "--forward-ms is now --stream layers,forward=MS", "off"),
        Old("--stream-cost-ms", "--stream", "key:cost", "--stream-cost-ms is now --stream layers,cost=MS", "off"),
        Old("--layer-times", "--stream", "key:times", "--layer-times is now --stream layers,times=FILE", "off"),
        Old("--target", "--stream", "key:target", "--target is now --stream layers,target=WHO", "off"),
        Old("--early", "--stream", "key:early", "--early is now --stream layers,early=WHAT", "off"),
        Old("--rung", "--link", "head", "--rung NAME is now --link NAME", ""),
        Old("--rate", "--link", "key:rate", "--rate MBIT is now --link NAME,rate=MBIT", ""),
        Old("--interface", "--link", "key:interface", "--interface IF is now --link NAME,interface=IF", ""),
        Old("--payload-from", "--payload", "key:from", "--payload-from FILE is now --payload taps,from=FILE", "taps"),
    ),
    "spec": (
        Old("--verify", "--verify-work", "same", "spec --verify is now --verify-work (run's --verify checks the "
            "bytes)", ""),
        Old("--layers", "--stream", "colon", "--layers is now --stream layers:N", "off"),
        Old("--stream-cost-ms", "--stream", "key:cost", "--stream-cost-ms is now --stream layers,cost=MS", "off"),
        Old("--rung", "--link", "head", "--rung NAME is now --link NAME", ""),
        Old("--rate", "--link", "key:rate", "--rate MBIT is now --link NAME,rate=MBIT", ""),
    ),
}

__all__ = ["OLD", "Old", "Respelled", "respell"]
