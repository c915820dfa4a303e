"""The analysis commands: fit, verdict, plot, report, export, compare."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from hopbench import results as R
from hopbench.cli.app import app
from hopbench.cli.options import (
    CycleOpt,
    DrafterTargetsOpt,
    JsonOpt,
    ResultsArg,
    ShapeOpt,
    TDraftOpt,
    TDraftRemoteOpt,
    TokSOpt,
    _quiet,
    _shape,
    recorded_shape,
)
from hopbench.errors import ConfigError
from hopbench.records import MIN_GAIN


@app.command()
def fit(results: ResultsArg, tokens: Annotated[Optional[int], typer.Option(help="Operating payload in accepted tokens (default from config).")] = None,
        shape: ShapeOpt = None, json_out: JsonOpt = False):
    """Fit latency = alpha + bytes/beta per rung x transport; regimes and the crossover."""
    from hopbench.analysis import commands as analysis

    s = _shape(shape)
    bpt, op = recorded_shape(results, s.shape.bytes_per_token, s.operating_tokens)
    analysis.run_fit(results, bpt, tokens or op, show=_quiet if json_out else print, require=True)
    if json_out:  # the document fit also writes to <folder>/analysis/fit.json
        print(R.ResultFolder(results).derived("fit.json").read_text(), end="")


def remote_inputs(text: str | None, tokens: int, targets: int = 1) -> dict:
    """--t-draft-remote: MS[+-HALF] given, or read from a folder that measured it (with
    --drafter-targets M, a drafter folder's forward of M targets), or unset."""
    if text is None:
        if targets != 1:
            raise ConfigError("--drafter-targets goes with --t-draft-remote DRAFTER_FOLDER")
        return {}
    if Path(text).is_dir():
        from hopbench.analysis.drafter import remote_time

        got = remote_time(Path(text), tokens, targets)
        return {"t_draft_remote_ms": got.ms, "t_draft_remote_pm": got.pm, "t_draft_remote_from": got.source}
    from hopbench.analysis.verdict import parse_quantity

    if targets != 1:
        raise ConfigError("--drafter-targets goes with --t-draft-remote DRAFTER_FOLDER (a measured batch)")
    try:
        if float(text) <= 0:  # 0 as given; a negative one is refused by the verdict's inputs
            return {"t_draft_remote_ms": float(text), "t_draft_remote_from": "given"}
    except ValueError:
        pass
    ms, pm = parse_quantity(text, "--t-draft-remote")
    return {"t_draft_remote_ms": ms, "t_draft_remote_pm": pm, "t_draft_remote_from": "given"}


@app.command()
def verdict(
    results: Annotated[Optional[list[Path]], typer.Argument(help="Sweep or run folders, one table each (or give --hop-ms).")] = None,
    t_draft: TDraftOpt = None,
    cycle: CycleOpt = None,
    tok_s: TokSOpt = None,
    tokens: Annotated[Optional[int], typer.Option(help="Operating payload in accepted tokens.")] = None,
    hop_ms: Annotated[Optional[str], typer.Option(help="Hop costs given directly, NAME=MS,... (no result folder needed).")] = None,
    tolerance: Annotated[float, typer.Option(help="A hop within this fraction of break-even is a dead heat (the study's 1%).")] = 0.01,
    t_draft_remote: TDraftRemoteOpt = None,
    min_gain: Annotated[float, typer.Option(help="The least projected gain worth a second box (fraction; 0.05 = 5%); below it the call is 'not worth it'.")] = MIN_GAIN,
    drafter_targets: DrafterTargetsOpt = 1,
    shape: ShapeOpt = None,
    json_out: JsonOpt = False,
):
    """Break-even hop and projected tok/s per rung x transport."""
    from hopbench.analysis import commands as analysis
    from hopbench.analysis.verdict import inputs_from, parse_hops

    s = _shape(shape)
    inputs = inputs_from(s, t_draft, cycle, tok_s, tolerance=tolerance, min_gain=min_gain,
                         **remote_inputs(t_draft_remote, tokens or s.operating_tokens, drafter_targets))
    doc = analysis.verdict_documents(results or [], inputs, tokens, s, parse_hops(hop_ms) if hop_ms else None,
                                     show=_quiet if json_out else print)
    if json_out:
        import json as _json

        print(_json.dumps(doc, indent=1, default=str))


@app.command()
def plot(results: ResultsArg, shape: ShapeOpt = None):
    """Latency vs payload with fits, hop cost vs break-even, latency CDFs (PNG + SVG)."""
    from hopbench.analysis import commands as analysis
    from hopbench.analysis.verdict import Inputs

    s = _shape(shape)
    bpt, op = recorded_shape(results, s.shape.bytes_per_token, s.operating_tokens)
    analysis.run_plot(results, bpt, Inputs(s.t_draft_ms, s.cycle_ms, s.tok_s), op)


@app.command()
def report(
    results: ResultsArg,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="The HTML file (default RESULTS/report.html, rewritten; another path must not exist).")] = None,
    min_gain: Annotated[float, typer.Option(help="The least projected gain worth a second box (0.05 = 5%).")] = MIN_GAIN,
    spec: Annotated[Optional[list[Path]], typer.Option(help="A hopbench spec result folder (repeatable): its rung's Answer uses the measured tok/s.")] = None,
    t_draft: TDraftOpt = None,
    cycle: CycleOpt = None,
    tok_s: TokSOpt = None,
    t_draft_remote: TDraftRemoteOpt = None,
    tokens: Annotated[Optional[int], typer.Option(help="As verdict's: the operating payload in accepted tokens (for --t-draft-remote FOLDER).")] = None,
    drafter_targets: DrafterTargetsOpt = 1,
    shape: ShapeOpt = None,
    json_out: JsonOpt = False,
):
    """One self-contained HTML page: question and verdict first, fit, figures, warnings, both environments, commands.
    It takes the verdict's inputs, so the page answers as `hopbench verdict` does for the same ones."""
    from hopbench.analysis import commands as analysis
    from hopbench.analysis.verdict import inputs_from

    s = _shape(shape)
    given = (t_draft, cycle, tok_s, t_draft_remote)
    inputs = inputs_from(s, t_draft, cycle, tok_s, min_gain=min_gain,
                         **remote_inputs(t_draft_remote, tokens or s.operating_tokens, drafter_targets)) \
        if any(given) or drafter_targets != 1 else None
    path = analysis.write_report(results, s, output, min_gain, spec or [], inputs)
    text = R.ResultFolder(results).derived(R.RUN_FILE).read_text()
    if json_out:
        print(text, end="")
        return
    print(f"report: {path}")
    for w in json.loads(text).get("warnings") or []:  # what changes how far the page's figures can be trusted
        print(f"warning: {w['text']}")


@app.command()
def export(
    results: ResultsArg,
    into: Annotated[Optional[Path], typer.Option(help="Case-study data file to upsert runs[] into (default RESULTS/analysis/case-studies.json).")] = None,
    study: Annotated[Optional[str], typer.Option(help="Study name recorded in every record and part of its id (default 'unnamed').")] = None,
    csv_out: Annotated[Optional[Path], typer.Option("--csv", help="Also write the records as CSV here (must not exist).")] = None,
    shape: ShapeOpt = None,
):
    """Upsert summaries as runs[] records (stable ids; everything else in the file kept)."""
    from hopbench.analysis.export import export_folder

    export_folder(results, into, study or "unnamed", csv_out, _shape(shape))


@app.command()
def compare(a: Annotated[str, typer.Argument(help="Baseline: a result folder, or run folders A1,A2,... (one run = one repeat).")],
            b: Annotated[str, typer.Argument(help="Folder(s) to compare against it, the same way.")],
            run_spread: Annotated[Optional[float], typer.Option(help="Run-to-run spread (relative SD of one run's median) to judge one run against one run; default: measured where a side has repeats, else 0.10.")] = None,
            paired: Annotated[bool, typer.Option(help="Pair run i of A with run i of B (only when they were interleaved in time; checked).")] = True,
            json_out: JsonOpt = False):
    """Per matching cell: B - A with a 95% CI, repeats as the unit, paired where pairing is real."""
    from hopbench.analysis import compare as CMP
    from hopbench.analysis.data import first_header, load_runs

    fa = [Path(x) for x in a.split(",") if x]
    fb = [Path(x) for x in b.split(",") if x]
    ga, _ = load_runs(fa)
    gb, _ = load_runs(fb)
    pairs = CMP.match(ga, gb)
    if not pairs:
        raise ConfigError(f"no matching cells between {a} and {b}")
    rows = []
    for x, y in pairs:
        real = paired and CMP.interleaved(x, y)
        rows.append(CMP.compare_groups(x, y, paired=real, run_spread=run_spread))
    warnings = CMP.baseline_warnings(first_header(fa[0]), first_header(fb[0]))
    if json_out:
        import json as _json

        print(_json.dumps(R.document("compare", {"a": a, "b": b, "comparisons": [c.to_dict() for c in rows],
                                                 "baseline_warnings": warnings}), indent=1, default=str))
        return
    print(CMP.format_table(rows))
    for w in warnings:
        typer.secho(f"warning: {w}", fg="yellow", err=True)
