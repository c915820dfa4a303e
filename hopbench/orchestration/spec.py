"""`hopbench spec`: the speculative loop itself over the link, modes side by side.

Repeats are the unit: each repeat runs every mode (local, sync, overlap) once, in a seeded
random order, over the same sequence of acceptance outcomes (so the modes are paired
within a repeat). Writes results/<stamp>-spec/: report.json (schema hopbench.spec, the
config, both environments, per repeat x mode the summary), cycles.csv (one row per cycle:
verify, wait, draft, hop, cycle, hit), summary.csv (one row per repeat x mode); rewritten
atomically after every mode, so an interrupted run keeps what it measured."""

from __future__ import annotations

import contextlib
import functools
import random
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hopbench import results as R
from hopbench.core import env as envmod
from hopbench.core import protocol as P
from hopbench.core import spec as S
from hopbench.core.client import Session
from hopbench.core.kinds import spec as SK
from hopbench.errors import ConfigError, HopbenchError
from hopbench.records import HIDDEN_DEFAULT
from hopbench.shape import Shape

SCHEMA = R.SPEC_SCHEMA
SCHEMA_VERSION = R.SPEC_SCHEMA_VERSION
SUMMARY_COLUMNS = ["mode", "repeat", "cycles", "tokens", "seconds", "tok_s", "tokens_per_cycle", "hit_rate",
                   "verify_ms", "wait_ms", "draft_ms", "hop_ms", "batch_mean"]


#: the remote draft's work model unless given: the study's local t_draft (a server with a
#: drafter model runs its forward instead: `--draft-remote model`)
DEFAULT_DRAFT_REMOTE = "sleep:15.88"


@dataclass(frozen=True)
class SpecConfig:
    """Everything `hopbench spec` was asked (recorded in report.json `config`)."""

    bytes_per_token: int  # the shape: from configs/shape.toml (hopbench.shape), never restated here
    id_bytes: int
    modes: tuple[str, ...] = ("local", "sync", "overlap")
    transport: str = "tcp"
    k: int = 2
    accept: str = S.STUDY_ACCEPTANCE
    verify: str = "sleep:73.46"  # the study: cycle 89.34 ms - t_draft 15.88 ms
    draft_local: str = "sleep:15.88"
    draft_remote: str = "sleep:15.88"  # DEFAULT_DRAFT_REMOTE; "model" where the server runs a drafter model
    fanout: int = 2
    cycles: int = 100
    warmup: int = 5
    repeats: int = 5
    seed: int = 0
    time_scale: float = 1.0
    poll: str = "auto"
    timeout_s: float = 30.0
    transport_settings: dict[str, dict[str, str]] = field(default_factory=dict)
    rung: str | None = None
    rate_mbit: float | None = None
    codec: str = "none"  # the hidden states cross encoded (docs/CODECS.md), inside the hop
    payload_from: str | None = None  # the hidden states a codec encodes (None: synthetic)
    hidden: int = HIDDEN_DEFAULT  # values per scale of a lossy codec (configs/shape.toml)
    # several targets against one batching drafter (--targets, docs/SPEC.md "Several targets"):
    # the drafts arriving within this window of the first run as one batch (--draft-remote
    # batch:A+B), at most max_batch of them (0: every target)
    batch_window_ms: float = 2.0
    max_batch: int = 0
    # mode stream (docs/STREAM.md): the aux layers (the shape's taps), each streamed as its
    # layer of the target's `layers` ends within the verify forward, which pays `stream_cost_ms`
    taps: tuple[int, ...] = ()
    layers: int | None = None
    stream_cost_ms: float = 0.0
    #: where draft_remote's A + B came from when it was given as batch:FOLDER (a hopbench
    #: drafter folder, fitted by check()); empty when typed
    draft_remote_from: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["modes"] = list(self.modes)
        d["taps"] = list(self.taps)
        return d

    def schedule(self) -> Any:
        """Mode stream's forward (hopbench.workload.stream.Schedule): the verify's own length."""
        from hopbench.workload import stream as ST

        forward = S.parse_work(self.verify, self.time_scale).nominal_ms()
        if forward is None or S.parse_work(self.verify).kind == "file":
            raise ConfigError(f"mode stream needs a verify of one length to stream the layers during (sleep:MS or "
                              f"spin:MS), not {self.verify!r}")
        if not self.taps or (self.k + 1) * self.bytes_per_token % len(self.taps):
            raise ConfigError("mode stream needs the shape's aux layers (taps), one chunk of K + 1 rows each")
        return ST.schedule(self.taps, forward, self.layers or ST.DEFAULT_LAYERS, None, self.stream_cost_ms * self.time_scale)

    def check(self) -> "SpecConfig":
        """ConfigError for modes or counts that cannot run; itself otherwise."""
        bad = [m for m in self.modes if m not in S.MODES]
        if bad or not self.modes:
            raise ConfigError(f"--modes {','.join(self.modes)!r}: expected some of {', '.join(S.MODES)}")
        if self.k < 1 or self.cycles < 1 or self.repeats < 1 or self.warmup < 0 or self.time_scale <= 0:
            raise ConfigError("--k, --cycles, --repeats must be >= 1, --warmup >= 0, --time-scale > 0")
        if "stream" in self.modes:
            self.schedule()  # its layers and forward checked before anything is measured
        if self.draft_remote.startswith("batch:") and Path(self.draft_remote[6:]).is_dir():
            from hopbench.analysis.drafter import batch_model

            a, b, source = batch_model(Path(self.draft_remote[6:]), self.k + 1)
            return replace(self, draft_remote=f"batch:{a:.4f}+{b:.4f}", draft_remote_from=source).check()
        if any(m != "local" for m in self.modes):
            from hopbench.core.transport import get_transport

            get_transport(self.transport)  # a missing extra fails here, with its install line
        if self.codec != "none":
            from hopbench.core import codecs

            return replace(self, codec=codecs.canonical(self.codec, self.hidden))
        return self

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SpecConfig":
        return cls(**{**d, "modes": tuple(d["modes"]), "taps": tuple(d.get("taps") or ())})


def run_spec_cli(host: str | None, port: int | None, cfg: SpecConfig, out: Path | None, results_dir: Path,
                 secret: str | None = None, say: Callable[[str], None] = print) -> Path:
    """`hopbench spec`: the folder made once the drafter answered, a line per repeat x mode,
    the analysis's table at the end. An error after the folder exists names it."""
    from hopbench.analysis import spec as A

    cfg = cfg.check()
    if cfg.draft_remote_from:
        say(f"--draft-remote {cfg.draft_remote}: {cfg.draft_remote_from}")
    R.refuse_existing(out)
    made: list[Path] = []

    def make_folder() -> Path:
        made.append(R.new_folder(results_dir, "spec", out))
        say(f"hopbench spec -> {made[0]}  ({', '.join(cfg.modes)} x {cfg.repeats} repeats x {cfg.cycles} cycles)")
        return made[0]

    def show(s: dict[str, Any]) -> None:
        hit = f"  hits {s['hit_rate']:.0%}" if s.get("hit_rate") is not None else ""
        hop = f"  hop {s['hop_ms']:.3f} ms" if s.get("hop_ms") is not None else ""
        say(f"  repeat {s['repeat']}  {s['mode']:<8} {s['tok_s']:7.2f} tok/s  {s['tokens_per_cycle']:.3f} tokens/cycle"
            f"{hop}{hit}")

    from hopbench.orchestration.runner import naming_what_was_kept

    with naming_what_was_kept(made):
        folder = run_spec(host, port, cfg, folder=make_folder, secret=secret, on_mode=show)
    report, res = A.analyse(folder)
    say(A.format_table(report, res))
    say(f"results: {folder}")
    return folder


def _summary(rows: np.ndarray, mode: str, repeat: int) -> dict[str, Any]:
    cols = {c: i for i, c in enumerate(S.CYCLE_COLUMNS)}
    timed = rows[rows[:, cols["phase"]] == 2]
    secs = float(timed[:, cols["cycle_ns"]].sum()) / 1e9
    tokens = int(timed[:, cols["tokens"]].sum())
    med = lambda c: float(np.median(timed[:, cols[c]])) / 1e6 if len(timed) else None  # noqa: E731
    return {"mode": mode, "repeat": repeat, "cycles": int(len(timed)), "tokens": tokens, "seconds": secs,
            "tok_s": tokens / secs if secs else None, "tokens_per_cycle": tokens / len(timed) if len(timed) else None,
            "hit_rate": float(timed[:, cols["hit"]].mean()) if mode == "overlap" and len(timed) else None,
            "verify_ms": med("verify_ns"), "wait_ms": med("wait_ns"), "draft_ms": med("draft_ns"),
            "hop_ms": med("hop_ns") if mode != "local" else None,
            "batch_mean": float(timed[:, cols["batch"]].mean()) if len(timed) and timed[:, cols["batch"]].any() else None}


def _report_head(cfg: SpecConfig, peer: str | None, seed: int, acceptance: Any, work: tuple[Any, Any],
                 client_env: dict[str, Any], server_env: dict[str, Any] | None,
                 group: dict[str, Any] | None, target: int, source: Any) -> dict[str, Any]:
    """The spec report's header (results.SpecReport): what was asked, modelled (`work`: the
    verify and the local draft work models) and measured."""
    verify, local_draft = work
    return R.SpecReport(
        peer=peer, config=cfg.to_dict(), seed=seed,
        acceptance={"spec": acceptance.spec, "probs": list(acceptance.probs), "mean_tokens": acceptance.mean_tokens,
                    "ranked": acceptance.ranked()},
        work={"verify": verify.describe(), "draft_local": local_draft.describe(),
              "draft_remote": {"spec": cfg.draft_remote, "scale": cfg.time_scale}},
        client_env=client_env, server_env=server_env,
        extra={**({"target": target, "group": group} if group else {}),
               **({"payload_source": source.record} if source is not None else {})}).to_dict()


def _with_servers_drafter(cfg: SpecConfig, d: Any) -> SpecConfig:
    """The remote draft as the server can run it: its drafter model's forward where it runs one
    and the work model is the default; a `model` draft it cannot run refused now, before any
    mode (records.DrafterInfo `d`, or None)."""
    if d is not None and cfg.draft_remote == DEFAULT_DRAFT_REMOTE:
        cfg = replace(cfg, draft_remote="model")
    if cfg.draft_remote == "model":
        if d is None:
            raise ConfigError("--draft-remote model: the server runs no drafter model (start it with "
                              "`hopbench serve --drafter SHAPE`)")
        if d.row_bytes != cfg.bytes_per_token:
            raise ConfigError(f"--draft-remote model: the server's {d.name} drafter takes rows of {d.row_bytes:,} B, "
                              f"this run's tokens are {cfg.bytes_per_token:,} B: give --shape the drafter's shape "
                              "(configs/shape-tiny.toml for the tiny preset)")
    return cfg


def _remote_plan(cfg: SpecConfig, info: Any, mode: str, seed: int, acceptance: Any,
                 group: dict[str, Any] | None) -> P.Plan:
    """The plan of a remote mode's repeat: the drafter's spec block (its mode, draft work,
    ranked outcomes, batching for a group of targets) and the payload's codec."""
    return P.Plan(transport=cfg.transport, request_bytes=info.request_bytes,
                  reply_bytes=info.reply_bytes, k=cfg.k, id_bytes=cfg.id_bytes,
                  cycles=cfg.cycles, warmup=cfg.warmup,
                  transport_settings=cfg.transport_settings.get(cfg.transport, {}),
                  spec=P.SpecPlan(mode, cfg.bytes_per_token, S.wire_work(cfg.draft_remote),
                                  chunks=len(cfg.taps) if mode == "stream" else None, fanout=info.fanout, seed=seed,
                                  ranked=tuple(acceptance.ranked()), scale=cfg.time_scale,
                                  batch_window_ms=cfg.batch_window_ms if group else None,
                                  max_batch=(cfg.max_batch or group["size"]) if group else None),
                  codec=None if cfg.codec == "none" else cfg.codec,
                  codec_group=0 if cfg.codec == "none" else cfg.hidden,
                  group=P.GroupPlan.from_dict(group) if group else None)


def _models(cfg: SpecConfig) -> tuple[Any, Any, Any, Any]:
    """What the spec models, parsed and checked before connecting: the acceptance outcomes,
    the verify and local draft work, the remote draft's form, and a codec's hidden states."""
    acceptance = S.parse_acceptance(cfg.accept, cfg.k)
    verify = S.parse_work(cfg.verify, cfg.time_scale)
    local_draft = S.parse_work(cfg.draft_local, cfg.time_scale)
    if not cfg.draft_remote.startswith("gpu-read"):  # checked here; a GPU read is set up by the drafter
        S.parse_work(S.wire_work(cfg.draft_remote), cfg.time_scale, files=False)  # as the PLAN will carry it
    source = None
    if cfg.codec != "none":
        from hopbench.workload.hidden import source_for

        source = source_for(cfg.payload_from, len(cfg.taps), cfg.hidden)
    return acceptance, verify, local_draft, source


def _measure_mode(session: Session | None, cfg: SpecConfig, mode: str, seed: int, outcomes: Any,
                  models: tuple[Any, Any, Any, Any], group: dict[str, Any] | None) -> tuple[Any, dict[str, Any]]:
    """One mode of one repeat: its cycle rows and the data channel's record (local: none)."""
    acceptance, verify, local_draft, source = models
    info = S.SpecPlanInfo(mode if mode != "local" else "sync", cfg.k, cfg.id_bytes, cfg.bytes_per_token, cfg.cycles,
                          cfg.warmup, seed, cfg.fanout if mode == "overlap" else 0,
                          len(cfg.taps) if mode == "stream" else 0)
    if mode == "local":
        return SK.target_rows(SK.LocalTarget(verify, local_draft, time.perf_counter_ns), info, outcomes,
                              time.perf_counter_ns), {}
    assert session is not None
    m = session.measure(_remote_plan(cfg, info, mode, seed, acceptance, group), source=source,
                        stream=cfg.schedule() if mode == "stream" else None, spec=S.SpecInputs(info, outcomes, verify))
    return np.column_stack([m.stages[c] for c in S.CYCLE_COLUMNS]), m.data_info


def _save(folder: Path, report: dict[str, Any], cycles_rows: list[dict], summaries: list[dict], status: str) -> None:
    """The spec folder as far as it got: report.json (with `status`), the cycles and the summary."""
    report["status"] = status
    report["finished_utc"] = R.utc_iso()
    R.ResultFolder(folder).write_run(report, {
        R.CYCLES_FILE: R.csv_text(["mode", "repeat", *S.CYCLE_COLUMNS], cycles_rows),
        R.SUMMARY_FILE: R.csv_text(SUMMARY_COLUMNS, summaries)})


def run_spec(host: str | None, port: int | None, cfg: SpecConfig, *, folder: Path | Callable[[], Path],
             secret: str | None = None, on_mode: Callable[[dict], None] | None = None,
             group: dict[str, Any] | None = None, target: int = 0) -> Path:
    """Measure every mode `repeats` times; returns the result folder. One of several targets
    (hopbench.orchestration.spectargets): `group` starts its plans with the others' and lets
    the drafter batch their drafts; `target` (1..M) draws its own acceptance outcomes."""
    acceptance, verify, local_draft, source = _models(cfg)
    remote_modes = [m for m in cfg.modes if m != "local"]
    if remote_modes and (host is None or port is None):
        raise ConfigError(f"modes {', '.join(remote_modes)} need --peer (a hopbench serve to be the drafter)")
    seed = cfg.seed or random.SystemRandom().randrange(1, 2**31)
    client_env = envmod.collect(peer_host=host)
    with contextlib.ExitStack() as opened:
        session = None
        if remote_modes:
            assert host is not None and port is not None
            session = opened.enter_context(Session(host, port, timeout_s=cfg.timeout_s, poll=cfg.poll, secret=secret,
                                                   transport_settings=cfg.transport_settings, client_env=client_env))
            cfg = _with_servers_drafter(cfg, session.drafter)
        folder = folder() if callable(folder) else R.new_folder(Path(folder).parent, "", folder)
        report = _report_head(cfg, f"{host}:{port}" if host else None, seed, acceptance, (verify, local_draft),
                              client_env, session.server_env if session else None, group, target, source)
        cycles_rows: list[dict] = []
        summaries: list[dict] = []
        save = functools.partial(_save, folder, report, cycles_rows, summaries)

        order_rng = random.Random(seed)
        from hopbench.orchestration.runner import saving_status

        with saving_status(save, report):
            for rep in range(cfg.repeats):
                total = 1 + cfg.warmup + cfg.cycles
                outcomes = acceptance.draw(total, seed + rep + 7919 * target)  # the same for every mode
                modes = list(cfg.modes)
                order_rng.shuffle(modes)
                for mode in modes:
                    rows, channel_info = _measure_mode(session, cfg, mode, seed + rep, outcomes,
                                                       (acceptance, verify, local_draft, source), group)
                    cycles_rows.extend({"mode": mode, "repeat": rep, **dict(zip(S.CYCLE_COLUMNS, map(int, r)))}
                                       for r in rows)
                    s = _summary(rows, mode, rep)
                    summaries.append(s)
                    report["runs"].append({**s, "data_channel": channel_info})
                    save("running")
                    if on_mode:
                        on_mode(s)
            if session is not None:
                session.bye()
    return folder


SPEC_KEYS = {"rungs", "modes", "transport", "k", "accept", "verify", "draft_local", "draft_remote", "fanout", "cycles",
             "warmup", "repeats", "time_scale", "seed", "layers", "stream_cost_ms"}


def run_spec_rungs(config_path: Path, results_root: Path, shape: Shape,
                   log: Callable[[str], None] = print) -> Path:
    """`hopbench spec` on each emulated (or loopback) rung of a spec config: a link, a server
    in its namespace, the target in the other; one spec folder per rung under one parent."""
    import json
    import subprocess
    import sys

    from hopbench.config import check_keys, load_toml
    from hopbench.config_sweep import load_rung
    from hopbench.orchestration import netem
    from hopbench.orchestration.serverproc import ready_port

    data = load_toml(config_path, allowed={"spec"})
    s = data.get("spec", {})
    check_keys(s, SPEC_KEYS, str(config_path), "spec.")
    rungs = [load_rung(n) for n in s.get("rungs", ["loopback"])]
    ok, why = netem.available()
    if any(r.kind == "emulated" for r in rungs) and not ok:
        raise ConfigError(f"emulated rungs need network namespaces: {why}")
    parent = R.new_folder(results_root, "spec-rungs")
    keys = {f.name for f in fields(SpecConfig)}
    given: dict[str, Any] = {k: tuple(v) if k == "modes" else v for k, v in s.items() if k in keys}
    base = SpecConfig(**given, bytes_per_token=shape.bytes_per_token, id_bytes=shape.id_bytes,
                      taps=tuple(shape.aux_layers)).check()
    for r in rungs:
        link = netem.Link.create(rate_mbit=r.rate_mbit, mtu=r.mtu) if r.kind == "emulated" else None
        try:
            host = link.server_addr if link else "127.0.0.1"
            srv = subprocess.Popen((link.exec_prefix("server") if link else []) +
                                   [sys.executable, "-m", "hopbench", "serve", "--bind", f"{host}:0"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            try:
                port = ready_port(srv)
                log(f"rung {r.name}: server {host}:{port}" + (f", {r.rate_mbit:g} Mbit/s" if r.rate_mbit else ""))
                cfg = replace(base, rung=r.name, rate_mbit=r.rate_mbit)
                job = json.dumps({"host": host, "port": port, "config": cfg.to_dict(), "out": str(parent / r.name)})
                # the target runs in the client's namespace: this module's entry point, the library, in a process there
                cmd = (link.exec_prefix("client") if link else []) + [sys.executable, "-m", __name__, job]
                done = subprocess.run(cmd, text=True)
                if done.returncode:
                    raise ConfigError(f"spec on rung {r.name} failed (exit {done.returncode})")
            finally:
                srv.terminate()
                srv.wait(10)
        finally:
            if link:
                link.destroy()
    return parent


def _main(argv: list[str]) -> None:
    """`python -m hopbench.orchestration.spec JOB`: one rung's target loop (run_spec_rungs)."""
    import json

    job = json.loads(argv[0])
    try:
        run_spec_cli(job["host"], job["port"], SpecConfig.from_dict(job["config"]), Path(job["out"]),
                     Path(job["out"]).parent)
    except HopbenchError as exc:
        raise SystemExit(f"hopbench: error: {exc}") from None


if __name__ == "__main__":
    import sys as _sys

    _main(_sys.argv[1:])
