"""What the commands share: the options spelled once (Annotated), the enums, the address and
CPU-pinning helpers, the sweep's progress bar and the analysis commands' shape."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from hopbench.config import DEFAULT_PORT, parse_hostport, parse_spec
from hopbench.core.transport import options_help, transport_help
from hopbench.errors import ConfigError
from hopbench.models.shapes import PRESETS

#: the drafter presets as the help says them (hopbench.models.shapes.PRESETS: a new one shows here)
DRAFTER_PRESETS = ", ".join(PRESETS)

# the registry describes the transports (entry points: no transport library is imported)
TRANSPORT_HELP = transport_help() + "."
OPT_HELP = options_help()

PortOpt = Annotated[Optional[int], typer.Option("--port", "-p", min=1, max=65535,
                                                help="The server's port; overrides the one in --peer/--bind (iperf3's -p).")]


def _address(text: str, port: int | None, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """HOST[:PORT] with --port over it; a peer without either is the server's default port."""
    host, p = parse_hostport(text, default_port=default_port)
    return host, p if port is None else port


class Poll(str, Enum):
    auto = "auto"
    block = "block"
    busy = "busy"


class Loop(str, Enum):
    auto = "auto"
    native = "native"
    python = "python"


LOOP_HELP = ("The timed loop: auto (the compiled one where it is built and applies, else Python, saying why), native "
             "(refuse without it) or python (the reference).")
LoopOpt = Annotated[Loop, typer.Option(help=LOOP_HELP)]


class Memory(str, Enum):
    host = "host"
    cuda = "cuda"


class GpuPath(str, Enum):
    staged = "staged"
    direct = "direct"


def _pin(cpu: str | None) -> None:
    import os

    from hopbench.core.placement import pin

    pin(cpu)
    if cpu:
        os.environ["HOPBENCH_PINNED"] = cpu



class LiveBar:
    """A rich progress bar on a terminal (the sweep prints plain lines to a log file)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                 TextColumn("{task.fields[key]}"), console=Console(stderr=True), transient=True)
        self.task: Any = None

    def update(self, done: int, total: int, elapsed: float, eta: float, key: str) -> None:
        if self.task is None:
            self.progress.start()
            self.task = self.progress.add_task("sweep", total=total, key=key)
        self.progress.update(self.task, completed=done, key=key)

    def stop(self) -> None:
        if self.task is not None:
            self.progress.stop()


def recorded_shape(folder: Path, bpt: int, op: int) -> tuple[int, int]:
    # imported here, not at the top: numpy's thread pool must start after --cpu pinned us
    from hopbench.analysis.data import recorded_shape as _recorded

    return _recorded(folder, bpt, op)


def _shape(shape):
    from hopbench.shape import load_shape

    return load_shape(shape)


JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON document on stdout instead of tables (docs/RESULTS.md).")]


def _quiet(line: str) -> None:
    """The tables' sink when --json asks for the document alone."""


ShapeOpt = Annotated[Optional[Path], typer.Option("--shape", help="Shape config (default configs/shape.toml).")]


ResultsArg = Annotated[Path, typer.Argument(help="A sweep or run result folder.")]



# the verdict's inputs, declared once: verdict and report take the same ones
TDraftOpt = Annotated[Optional[str], typer.Option(help="ms the drafter costs per cycle = the break-even hop; '15.88+-0.4' gives a 95% half-width. Default: the study's, configs/shape.toml.")]
CycleOpt = Annotated[Optional[str], typer.Option(help="Decode cycle with the drafter co-located, ms (VALUE or VALUE+-HALF).")]
TokSOpt = Annotated[Optional[str], typer.Option(help="Co-located throughput, tok/s (VALUE or VALUE+-HALF).")]
TDraftRemoteOpt = Annotated[Optional[str], typer.Option(help="The remote drafter's own time per cycle: MS[+-HALF], or a folder that measured it (a `hopbench drafter` folder, or a run with --remote-drafter). Default: what the results folder measured with --remote-drafter, else 0 (the study's projection).")]
DrafterTargetsOpt = Annotated[int, typer.Option(help="With --t-draft-remote DRAFTER_FOLDER: the forward of a batch of this many targets (hopbench drafter --targets), what each target's cycle waits for when one drafter serves them.")]


def parse_link(text: str | None) -> tuple[str | None, float | None, str | None]:
    """--link [NAME][,rate=MBIT][,interface=IF]: the link's name in the results, its nominal
    rate (checked against the interface's speed, recorded) and the interface the route to the
    peer must leave by (a warning otherwise)."""
    if text is None:
        return None, None, None
    name, kw = parse_spec(text, "--link", {"rate": "MBIT", "interface": "IF"})
    try:
        rate = float(kw["rate"]) if "rate" in kw else None
    except ValueError:
        raise ConfigError(f"--link {text}: rate= is the link's nominal rate in Mbit/s") from None
    if rate is not None and not rate > 0:
        raise ConfigError(f"--link {text}: rate= is a rate above 0 Mbit/s")
    return name or None, rate, kw.get("interface")


