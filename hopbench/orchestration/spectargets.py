"""`hopbench spec --targets 1,2,4`: several targets against one batching drafter (docs/SPEC.md
"Several targets").

For each M of the list, M target processes (one session each, pinned round robin over
--cpu) run the speculative loop's remote modes against one `hopbench serve`, their plans
started together (PLAN `group`); the drafter runs the drafts that arrive together as one
batch (`--draft-remote batch:A+B`: a batch of b drafts takes A + b*B ms). Co-located (mode
local) is each target's own reference, paired as `spec` pairs its modes: every target runs
local beside its remote modes, in the one seeded order, over the same acceptance outcomes
(common random numbers) and under the same load; its gain is the interval of its per-repeat
ratio remote / local (an unpaired co-located run drew other outcomes: 2.10 vs 2.20 tokens per
cycle read as +5.6% for cycles 1.5% longer, issue 42). Each target keeps its own spec
folder (m<M>/t<i>); the run's report.json (schema hopbench.spec-targets) holds per M and
mode each target's tok/s with its interval over repeats, the aggregate (the targets' tok/s
summed per repeat), the mean batch size, and whether every target still beats co-located;
the capacity is the largest M up to which every M measured does."""

from __future__ import annotations

import dataclasses
import functools
import random
import uuid
from pathlib import Path
from typing import Any, Callable

from hopbench import results as R
from hopbench.errors import ConfigError
from hopbench.orchestration.spec import SpecConfig, run_spec
from hopbench.records import CONNECT_TIMEOUT_S
from hopbench.version import __version__

SCHEMA, SCHEMA_VERSION = R.DOCUMENTS["spec-targets"]


@dataclasses.dataclass(frozen=True)
class SpecTargetJob:
    host: str
    port: int
    cfg: SpecConfig
    folder: Path
    secret: str | None
    cpu: int | None
    group: dict[str, Any]
    target: int


def _spec_target_main(job: SpecTargetJob, done: Any) -> None:
    """A `spec` target: its remote modes against the drafter, its own spec folder."""
    from hopbench.orchestration.clients import target_process

    target_process(job.target, job.cpu, done, lambda: run_spec(
        job.host, job.port, job.cfg, folder=lambda: R.new_folder(job.folder.parent, "", job.folder),
        secret=job.secret, group=job.group, target=job.target))


def _estimate(values: list[float]) -> dict[str, Any]:
    from hopbench.estimate import cell_estimate

    if not values:
        return {"value": None, "lo": None, "hi": None, "level": None, "n": 0}
    e = cell_estimate(values)
    return {"value": e.value, "lo": e.lo, "hi": e.hi, "level": e.level, "n": e.n_repeats}


def _per_repeat(folder: Path, mode: str) -> tuple[dict[int, float], list[float]]:
    """A target's tok/s per repeat of one mode, and its batch sizes' means."""
    reading = R.ResultFolder(folder).read_or_none()
    if reading is None:
        return {}, []
    runs = [r for r in reading.record.get("runs", []) if r.get("mode") == mode and r.get("tok_s") is not None]
    return {int(r["repeat"]): float(r["tok_s"]) for r in runs}, [r["batch_mean"] for r in runs if r.get("batch_mean")]


def summarize_m(m: int, folders: list[Path], errors: dict[int | None, str | None], modes: list[str],
                local: dict[str, Any]) -> list[dict[str, Any]]:
    """Per mode at this M: each target's tok/s (interval over repeats), its paired ratio to its
    own co-located runs (remote / local per repeat, the same acceptance outcomes) and gain, the
    aggregate (summed per repeat), the mean batch, and whether every target beats co-located
    (its ratio's interval above 1). `local`: co-located's tok/s, for the lines only."""
    out = []
    locals_ = [_per_repeat(f, "local")[0] for f in folders]
    for mode in modes:
        per = [(_per_repeat(f, mode), i + 1) for i, f in enumerate(folders)]
        targets: list[dict[str, Any]] = []
        for ((reps, batches), t), own in zip(per, locals_):
            est = _estimate(list(reps.values()))
            # paired: this target's remote / its own co-located, repeat by repeat (the same outcomes)
            ratio = _estimate([reps[k] / own[k] for k in sorted(set(reps) & set(own)) if own[k] > 0])
            low = ratio["lo"] if ratio["lo"] is not None else ratio["value"]
            targets.append({"target": t, "tok_s": est, "batch_mean": sum(batches) / len(batches) if batches else None,
                            "local_tok_s": _estimate(list(own.values())), "ratio": ratio,
                            "gain": ratio["value"] - 1 if ratio["value"] is not None else None,
                            "error": errors.get(t), "beats": bool(low is not None and low > 1)})
        by_target = [reps for (reps, _), _ in per]
        common = set(by_target[0]).intersection(*by_target[1:]) if by_target else set()
        agg = _estimate([sum(reps[k] for reps in by_target) for k in sorted(common)])
        values: list[float] = [t["tok_s"]["value"] for t in targets if t["tok_s"]["value"] is not None]
        worst = min(values, default=None)
        slowest = next((t["tok_s"] for t in targets if t["tok_s"]["value"] == worst), None) if values else None
        out.append({"targets": m, "mode": mode, "per_target": targets, "aggregate_tok_s": agg,
                    "worst_tok_s": worst, "worst_tok_s_ci": [slowest["lo"], slowest["hi"]] if slowest else None,
                    "all_beat": all(t["beats"] for t in targets) and len(targets) == m,
                    "gain_worst": next((t["gain"] for t in targets if t["tok_s"]["value"] == worst), None)
                    if values else None})
    return out


def capacity(rows: list[dict[str, Any]], mode: str) -> int | None:
    """The largest M measured up to which every M has every target beating co-located."""
    cap = None
    for r in sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["targets"]):
        if not r["all_beat"]:
            break
        cap = r["targets"]
    return cap


def _admitted(host: str, port: int, cfg: SpecConfig, targets: list[int], secret: str | None, cpu: str | None,
              warn: Callable[[str], None]) -> tuple[list[str], dict[str, Any], Any, list[Any]]:
    """What is checked before any target runs: the remote modes, the counts against the
    server's sessions, the CPUs each target is pinned to. Returns the modes, the server's
    environment and software, and the CPUs."""
    from hopbench.orchestration.clients import admitted

    modes = [m for m in cfg.modes if m != "local"]
    if not modes:
        raise ConfigError("--targets needs a remote mode (sync or overlap) besides local")
    if any(m < 1 for m in targets):
        raise ConfigError(f"--targets {','.join(map(str, targets))}: target counts are 1 or more")
    server_env, software, cpus = admitted(host, port, (cfg.timeout_s, CONNECT_TIMEOUT_S), secret,
                                         (max(targets), "--targets"), cpu, warn)
    return modes, server_env, software, cpus


def _one_m(m: int, jobs: list[SpecTargetJob], modes: list[str], doc: dict[str, Any]) -> list[dict[str, Any]]:
    """M targets at once (their jobs), each paired with its own co-located run: M's rows, the
    errors and the co-located tok/s (the first M's) kept in `doc`."""
    from hopbench.orchestration.clients import run_targets

    errors = run_targets(jobs, _spec_target_main)
    doc["errors"].update({f"{m}/{t}": e for t, e in errors.items() if e})
    folders = [j.folder for j in jobs]
    if "local_tok_s" not in doc:  # what co-located makes, for the lines: the first M's targets' local runs
        doc["local_tok_s"] = _estimate([v for f in folders for v in _per_repeat(f, "local")[0].values()])
    rows = summarize_m(m, folders, errors, modes, doc["local_tok_s"])
    doc["rows"].extend(rows)
    return rows


def _save(top: Path, doc: dict[str, Any], status: str) -> None:
    doc["status"] = status
    doc["finished_utc"] = R.utc_iso()
    summary = [{"targets": r["targets"], "mode": r["mode"], "target": t["target"], "tok_s": t["tok_s"]["value"],
                "tok_s_lo": t["tok_s"]["lo"], "tok_s_hi": t["tok_s"]["hi"], "batch_mean": t["batch_mean"],
                "beats_colocated": t["beats"]} for r in doc["rows"] for t in r["per_target"]]
    R.ResultFolder(top).write_run(doc, {R.SUMMARY_FILE: R.csv_text(
        ["targets", "mode", "target", "tok_s", "tok_s_lo", "tok_s_hi", "batch_mean", "beats_colocated"], summary)})


def run_spec_targets(host: str, port: int, cfg: SpecConfig, targets: list[int], folder: Callable[[], Path], *,
                     secret: str | None = None, cpu: str | None = None, say: Callable[[str], None] = print,
                     warn: Callable[[str], None] = print) -> Path:
    modes, server_env, software, cpus = _admitted(host, port, cfg, targets, secret, cpu, warn)
    seed = cfg.seed or random.SystemRandom().randrange(1, 2**31)  # one seed: every target runs the modes in one order
    cfg = dataclasses.replace(cfg, seed=seed)
    top = folder()
    doc: dict[str, Any] = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "software": f"hopbench {__version__}",
                           "created_utc": R.utc_iso(), "result_id": R.new_result_id(), "peer": f"{host}:{port}",
                           "config": {**cfg.to_dict(), "targets": targets, "cpus": cpus}, "server_env": server_env,
                           "server_software": software, "status": "running", "rows": [], "errors": {}}
    from hopbench.orchestration.runner import saving_status

    with saving_status(functools.partial(_save, top, doc), doc) as status:
        for m in targets:
            gid = uuid.uuid4().hex[:16]
            say(f"M = {m}: {m} target(s) at once against the drafter ({', '.join(modes)}, each paired with its own "
                f"co-located run over the same acceptance outcomes; group {gid})")
            paired = dataclasses.replace(cfg, modes=("local", *modes))
            jobs = [SpecTargetJob(host, port, paired, top / f"m{m}" / f"t{i + 1}", secret, cpus[i],
                                  {"id": gid, "size": m}, i + 1) for i in range(m)]
            for r in _one_m(m, jobs, modes, doc):
                say(format_row(r, doc["local_tok_s"]))
            _save(top, doc, "running")
        doc["capacity"] = {mode: capacity(doc["rows"], mode) for mode in modes}
        if doc["errors"]:
            status[0] = "error"
    return top


def format_row(r: dict[str, Any], local: dict[str, Any]) -> str:
    def est(e: dict[str, Any]) -> str:
        if e["value"] is None:
            return "-"
        return f"{e['value']:.2f}" + (f" [{e['lo']:.2f}..{e['hi']:.2f}]" if e["lo"] is not None else "")
    per = "; ".join(f"t{t['target']} {est(t['tok_s'])}" + (f" ({t['gain']:+.1%} paired)" if t.get("gain") is not None
                                                           else "")
                    + (f" (batch {t['batch_mean']:.2f})" if t["batch_mean"] else "")
                    + (f" FAILED: {t['error']}" if t["error"] else "") for t in r["per_target"])
    call = "every target beats co-located" if r["all_beat"] else "NOT every target beats co-located"
    return (f"  M = {r['targets']} {r['mode']:<8} per target tok/s: {per}; aggregate {est(r['aggregate_tok_s'])}; "
            f"co-located {local['value'] or 0:.2f}: {call}")


def summary_lines(doc: dict[str, Any]) -> list[str]:
    out = []
    for mode, cap in (doc.get("capacity") or {}).items():
        measured = sorted({r["targets"] for r in doc["rows"] if r["mode"] == mode})
        if cap is None:
            out.append(f"{mode}: not even M = {measured[0]} beats co-located ({doc['local_tok_s']['value']:.2f} tok/s)")
            continue
        row = next(r for r in doc["rows"] if r["mode"] == mode and r["targets"] == cap)
        more = " (the most measured: more may fit)" if cap == measured[-1] else ""
        ci = row.get("worst_tok_s_ci") or [None, None]
        iv = f" [{ci[0]:.2f}..{ci[1]:.2f}]" if ci[0] is not None else ""
        out.append(f"{mode}: one drafter serves up to {cap} targets{more}: at M = {cap} the slowest target makes "
                   f"{row['worst_tok_s']:.2f}{iv} tok/s against {doc['local_tok_s']['value']:.2f} co-located "
                   f"({row['gain_worst']:+.1%} paired); every target's ratio to its own co-located runs (the same "
                   "acceptance outcomes) is above 1 over repeats up to there")
    return out


__all__ = ["capacity", "run_spec_targets", "summarize_m", "summary_lines"]
