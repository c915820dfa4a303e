"""The typer app and its root options (--version)."""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="What does one speculative-decoding network hop cost on this link?")


def _print_version(value: bool) -> None:
    if value:
        from hopbench.version import __version__

        print(f"hopbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", "-V", callback=_print_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """What does one speculative-decoding network hop cost on this link?"""

