"""The typer CLI: a thin shell. Each command parses flags, calls one library function,
prints a short summary. HopbenchError -> one red line on stderr and a non-zero exit.

Rooms: app.py (the app and --version), options.py (the options every command shares),
measure.py (serve, run, spec, fanin, sweep, matrix), analyse.py (fit, verdict, plot, report,
export, compare), tools.py (doctor, codecs, transports). Commands are listed in --help in
the order their modules are imported here."""

from __future__ import annotations

import importlib
import sys

import typer

from hopbench.cli.app import app
from hopbench.cli.measure import run_request
from hopbench.errors import HopbenchError

__all__ = ["app", "main", "run_request"]

for _room in ("measure", "analyse", "tools"):  # registers the commands, in --help's order
    importlib.import_module(f"hopbench.cli.{_room}")


def main() -> None:
    try:
        app()
    except HopbenchError as exc:
        typer.secho(f"hopbench: error: {exc}", fg="red", err=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
