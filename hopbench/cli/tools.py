"""The tools: doctor, codecs, transports."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Optional

import typer

from hopbench.cli.app import app
from hopbench.cli.options import (
    DRAFTER_PRESETS,
    JsonOpt,
    PortOpt,
    ShapeOpt,
    _address,
)
from hopbench.errors import ConfigError


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
    agreement: Annotated[bool, typer.Option(help="Each codec's effect on a real network's predictions instead: top-1 agreement and KL, on the shipped proxy (SmolLM2-135M; needs the proxy extra) or on --drafter.")] = False,
    drafter: Annotated[Optional[str], typer.Option(help="With --agreement: the user's drafter (a preset or its config.json), fed with FILE's states, T = --tokens rows a body (needs the drafter extra).")] = None,
    drafter_weights: Annotated[Optional[Path], typer.Option(help="With --drafter: its weights (.safetensors), shapes checked against the config; default random (its drafts then mean nothing).")] = None,
    save: Annotated[Optional[Path], typer.Option(help="With --agreement: also write the record to this new file (run --agreement-from reads it).")] = None,
    json_out: JsonOpt = False,
):
    """Each payload codec on this CPU, off the wire: ratio, encode/decode GB/s, a lossy codec's
    error, and the link rate below which it pays (docs/CODECS.md)."""
    if agreement:
        from hopbench.orchestration.agreement import agreement_command

        agreement_command(codec, json_out, functools.partial(print, flush=True), drafter=drafter, weights=drafter_weights, file=file, tokens=tokens,
                          save=save)
        return
    if drafter or drafter_weights or save:
        raise typer.BadParameter("--drafter, --drafter-weights and --save go with --agreement")
    from hopbench.orchestration.codecs import profile_command

    profile_command(file, tokens, codec, reps, shape, json_out, print)


@app.command()
def drafter(
    shape: Annotated[str, typer.Option(help=f"A preset ({DRAFTER_PRESETS}) or the drafter's config.json.")] = "dspark-glm5",
    rows: Annotated[str, typer.Option(help="Row counts a forward runs on (a target's accepted tokens, or several targets' batched).")] = "1,3,6,12,24,48,96,192",
    targets: Annotated[str, typer.Option(help="Targets a forward serves at once (its batch: each target's rows and context).")] = "1",
    k: Annotated[int, typer.Option(min=1, max=64, help="Draft depth K (the ids a forward samples; a block drafter's block holds K + 1).")] = 2,
    context: Annotated[int, typer.Option(min=0, help="Context tokens each target's forward attends over (its KV cache, read every forward); 0: none.")] = 4096,
    repeats: Annotated[int, typer.Option(min=5, help="Timed forwards per row count (after 3 warm-up).")] = 50,
    weights: Annotated[Optional[Path], typer.Option(help="The drafter's real weights (.safetensors); default random (time does not depend on the values).")] = None,
    device: Annotated[Optional[str], typer.Option(help="cuda or cpu (default: cuda where torch sees a GPU).")] = None,
    results_dir: Annotated[Path, typer.Option(help="Where the result folder goes.")] = Path("results"),
    name: Annotated[str, typer.Option(help="Suffix of the result folder's name.")] = "drafter",
    out: Annotated[Optional[Path], typer.Option(help="The result folder (must not exist).")] = None,
):
    """What a drafter of this shape costs on this GPU, no peer needed: its forward against the
    rows, with and without CUDA graphs, against the weight-read floor (docs/DRAFTER.md)."""
    from hopbench.config import parse_int_list
    from hopbench.orchestration.drafterjob import DrafterJob, drafter_command

    if device not in (None, "cuda", "cpu"):
        raise ConfigError(f"--device {device}: cuda or cpu")
    say = functools.partial(print, flush=True)  # each line reaches a pipe when it is printed
    drafter_command(DrafterJob(shape, weights, tuple(parse_int_list(rows, "--rows")),
                               tuple(parse_int_list(targets, "--targets")), k, context, repeats, device, results_dir,
                               name, out), say)


@app.command()
def transports(json_out: JsonOpt = False):
    """List the transports, whether they import here, and how to install them."""
    from hopbench.core import native
    from hopbench.core.transport import describe_transports, get_transport

    rows = describe_transports()
    for row in rows:  # which timed loop runs it here with the default poll mode
        row["loop"] = str(native.predict(get_transport(row["name"]), "auto", "auto")) if row["available"] else None
    if json_out:
        import json as _json

        from hopbench import results as R

        print(_json.dumps(R.document("transports", {"transports": rows}), indent=1))
        return
    for row in rows:
        if row["available"]:
            print(f"{row['name']:6} available  {row['version']}; timed loop: {row['loop']}")
        else:
            print(f"{row['name']:6} missing    {row['install'] or ''}  ({row['error']})")
