"""The tools: doctor, codecs, transports."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from hopbench.cli.app import app
from hopbench.cli.options import (
    JsonOpt,
    PortOpt,
    ShapeOpt,
    _address,
)


@app.command()
def doctor(
    peer: Annotated[Optional[str], typer.Option(help="HOST[:PORT] of a `hopbench serve` (port 5201 when omitted): route, server report, path MTU, goodput probe.")] = None,
    port: PortOpt = None,
    interface: Annotated[Optional[str], typer.Option(help="The interface the route should leave by (as a rung config names it).")] = None,
    rate: Annotated[Optional[float], typer.Option(help="The link's nominal rate in Mbit/s (as a rung config names it).")] = None,
    rung: Annotated[Optional[str], typer.Option(help="Take --interface and --rate from this rung config.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    strict: Annotated[bool, typer.Option(help="Exit non-zero when there is any warning.")] = False,
    secret: Annotated[Optional[str], typer.Option(envvar="HOPBENCH_SECRET", help="Shared secret for the server.")] = None,
):
    """Check interfaces, drivers, RDMA/UCX devices, sysctls, and (with --peer) the path."""
    import json as _json

    from hopbench.orchestration import doctor as DR

    if rung:
        from hopbench.config_sweep import load_rung

        rc = load_rung(rung)
        interface = interface or rc.interface
        rate = rate or rc.rate_mbit
    if peer:
        host, port = _address(peer, port)
        report = DR.peer_report(host, port, interface, rate, secret=secret)
    else:
        report = DR.local_report()
        if rate:
            iface = next((i for i in report.interfaces if i["name"] == interface), None) if interface else None
            DR.check_speed(report, rate, iface)
    print(_json.dumps(report.to_dict(), indent=1, default=str) if json_out else DR.format_report(report))
    if strict and report.warnings:
        raise typer.Exit(1)


@app.command()
def codecs(
    file: Annotated[Optional[str], typer.Argument(help="Hidden states (.safetensors FILE or FILE:TENSOR, or .npy) of [tokens, layers, hidden]; default synthetic.")] = None,
    tokens: Annotated[int, typer.Option(help="Tokens per body (the payload T).")] = 3,
    codec: Annotated[Optional[str], typer.Option(help="Codecs to profile (a list); default all.")] = None,
    reps: Annotated[int, typer.Option(min=1, help="Repetitions (p50 reported).")] = 20,
    shape: ShapeOpt = None,
    json_out: JsonOpt = False,
):
    """Each payload codec on this CPU, off the wire: ratio, encode/decode GB/s, a lossy codec's
    error, and the link rate below which it pays (docs/CODECS.md)."""
    from hopbench.orchestration.codecs import profile_command

    profile_command(file, tokens, codec, reps, shape, json_out, print)


@app.command()
def transports(json_out: JsonOpt = False):
    """List the transports, whether they import here, and how to install them."""
    from hopbench.core import native
    from hopbench.core.transport import describe_transports, get_transport

    rows = describe_transports()
    for row in rows:  # which timed loop runs it here with the default poll mode
        row["loop"] = native.predict(get_transport(row["name"]), "auto", "auto") if row["available"] else None
    if json_out:
        import json as _json

        print(_json.dumps({"schema": "hopbench.transports", "schema_version": 1, "transports": rows},
                          indent=1))
        return
    for row in rows:
        if row["available"]:
            print(f"{row['name']:6} available  {row['version']}; timed loop: {row['loop']}")
        else:
            print(f"{row['name']:6} missing    {row['install'] or ''}  ({row['error']})")
