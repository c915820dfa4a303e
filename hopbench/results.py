"""Result folders: report.json, samples.csv, summary.csv — written atomically, never
overwritten. docs/RESULTS.md documents every field and column."""

from __future__ import annotations

import csv
import io
import os
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from hopbench.errors import ConfigError, DiskFull, HopbenchError
from hopbench.files import atomic_write
from hopbench.version import __version__

SCHEMA = "hopbench.run"
# Schema history (report.json `schema_version`; sweep.json has its own, same numbers):
#   1  hopbench 0.1.0: the first format.
#   2  config.rate_mbit / config.rung (what the user said about the link), summary
#      p50_ci_level (achieved level of the within-run interval) and drift_p, env
#      cpu_governor; sweep summary.csv: the cell estimate with p50_ci_level/p50_ci_scope.
#      Later additive field (readers treat it as optional): result_id (report.json and
#      sweep.json), the identity export's record ids are built from. config.design (the
#      payload design) was spelled config.payload before the rename: RunConfig.from_dict
#      reads both.
# Readers accept every version up to SCHEMA_VERSION (tests/golden holds one folder of each
# older version, which must keep loading) and refuse newer ones with a clear line.
SCHEMA_VERSION = 2

def utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def new_result_id() -> str:
    """The identity a result keeps wherever its folder goes (export's record ids use it)."""
    return uuid.uuid4().hex


def utc_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def csv_text(columns: list[str], rows: Iterable[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


#: the longest name a result folder's suffix keeps (a filesystem's name is at most 255 bytes)
MAX_NAME = 80


def safe_name(name: str) -> str:
    """A result folder's suffix from a --name as given (docs/RESULTS.md): letters, digits, '.',
    '_' and '-' kept, every other character (a '/', a space) made '-', leading dots dropped
    (never '..'), at most MAX_NAME characters; "run" when nothing is left. The name as given
    stays in report.json."""
    import re

    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", name).lstrip(".")[:MAX_NAME].rstrip(".")
    return cleaned or "run"


def refuse_existing(path: Path | None, what: str = "result folder", option: str = "--out") -> None:
    """The one guard before anything is measured: a path the run would write that exists is
    refused (nothing is ever overwritten), naming the option that chooses another."""
    if path is not None and Path(path).exists():
        raise ConfigError(_exists(path, what, option))


def _exists(path: Path, what: str, option: str) -> str:
    return f"{what + ' ' if what else ''}{path} already exists; refusing to overwrite it (choose another {option})"


def new_folder(root: Path, name: str, out: Path | None = None) -> Path:
    """Create the result folder exclusively; an existing folder is never reused. A name makes
    one folder directly inside `root` (safe_name), never one outside it."""
    path = Path(out) if out else Path(root) / f"{utc_stamp()}-{safe_name(name)}"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir()
    except FileExistsError:
        raise ConfigError(_exists(path, "result folder", "--out")) from None
    return path


# ---------------------------------------------------------------- files checked when read
# Every report.json carries `files`: for each CSV next to it, its data rows and the SHA-256
# of its bytes, computed from the text written (report.json is written last, so a CSV
# rewritten or cut after it no longer matches). Readers verify them (verify_files) and check
# each record's types (check_record) before using a field: a bad file gets one line naming
# the file and what is wrong, never a traceback.


def manifest_entry(text: str) -> dict[str, Any]:
    import hashlib

    return {"rows": max(text.count("\n") - 1, 0), "sha256": hashlib.sha256(text.encode()).hexdigest()}


def verify_files(report_path: Path, doc: dict[str, Any]) -> None:
    """HopbenchError naming the first CSV that does not match report.json's `files` (absent
    in results written before the manifest: nothing to verify then)."""
    import hashlib

    files = doc.get("files")
    if files is None:
        return
    if not isinstance(files, dict):
        raise HopbenchError(f"{report_path}: `files` is a {type(files).__name__}, expected an object")
    for name, want in files.items():
        if not isinstance(want, dict) or not isinstance(want.get("sha256"), str) or type(want.get("rows")) is not int \
                or "/" in str(name) or name.startswith("."):
            raise HopbenchError(f"{report_path}: files.{name} is not a {{rows, sha256}} entry")
        path = report_path.parent / name
        try:
            data = path.read_bytes()
        except OSError:
            raise HopbenchError(f"{path}: missing (report.json lists it)") from None
        if hashlib.sha256(data).hexdigest() != want["sha256"]:
            rows = max(data.count(b"\n") - 1, 0)
            raise HopbenchError(f"{path}: does not match report.json (checksum differs; {rows} rows, "
                                f"{want['rows']} written): truncated or edited after it was written")


@dataclass(frozen=True)
class RunReport:
    """The header of a run's report.json (RUN_RECORD, docs/RESULTS.md), written once the
    server has accepted the plan list; the run's writer adds payloads, summary and status.
    `extra`: what a caller records beside it (doctor's pre-flight, a sweep cell's identity)."""

    peer: str
    config: dict[str, Any]
    client_env: dict[str, Any]
    server_env: dict[str, Any]
    server_software: str | None = None
    server_caps: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    created_utc: str = field(default_factory=utc_iso)
    result_id: str = field(default_factory=new_result_id)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "software": f"hopbench {__version__}",
                "created_utc": self.created_utc, "result_id": self.result_id, "peer": self.peer,
                "config": self.config, "client_env": self.client_env, "server_env": self.server_env,
                "server_software": self.server_software, "server_caps": self.server_caps, **self.extra}

    #: what a run's report.json holds besides its header: its writer's part, not the header's
    BODY = frozenset({"payloads", "files", "status", "error", "finished_utc", "summary", "updated_utc"})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunReport":
        """A report.json's header, typed (every schema version: tests/golden), the keys it does
        not name kept in `extra`; the payloads and status (the writer's) left out."""
        named = {"schema", "schema_version", "software", "created_utc", "result_id", "peer", "config", "client_env",
                 "server_env", "server_software", "server_caps"}
        return cls(peer=str(d.get("peer") or ""), config=d.get("config") or {}, client_env=d.get("client_env") or {},
                   server_env=d.get("server_env") or {}, server_software=d.get("server_software"),
                   server_caps=d.get("server_caps"),
                   extra={k: v for k, v in d.items() if k not in named and k not in cls.BODY},
                   created_utc=str(d.get("created_utc") or ""), result_id=str(d.get("result_id") or ""))


@dataclass(frozen=True)
class ShapeRecord:
    """The hop's shape as a sweep or matrix records it (what its analysis reads back)."""

    bytes_per_token: int
    k: int
    id_bytes: int


@dataclass(frozen=True)
class SweepReport:
    """sweep.json's record when a sweep or a matrix starts (SWEEP_RECORD); its writer then
    keeps status, rungs and failed_cells current. `kind`: "sweep" or "matrix" (a matrix's
    cells are a sweep's, so both are read by one reader). `extra`: what only that kind
    records (a sweep's fingerprint and placements, a matrix's nodes and pair config)."""

    kind: str
    seed: int
    config: dict[str, Any]
    shape: ShapeRecord
    preflight: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    created_utc: str = field(default_factory=utc_iso)
    result_id: str = field(default_factory=new_result_id)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SWEEP_SCHEMA, "schema_version": SCHEMA_VERSION, "kind": self.kind, "status": "running",
                "created_utc": self.created_utc, "result_id": self.result_id, "seed": self.seed,
                "config": self.config, "shape": vars(self.shape).copy(), "rungs": {}, "failed_cells": [],
                "preflight": self.preflight, **self.extra}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SweepReport":
        """A sweep.json's (or a matrix's) starting record, typed (every schema version), the keys
        it does not name kept in `extra`; what its writer keeps current (status, rungs, failed
        cells) left out."""
        named = {"schema", "schema_version", "kind", "status", "created_utc", "result_id", "seed", "config", "shape",
                 "rungs", "failed_cells", "preflight", "updated_utc"}
        sh = d.get("shape") or {}
        cfg = d.get("config") or {}
        return cls(kind=str(d.get("kind") or "sweep"), seed=int(d.get("seed") or 0), config=cfg,
                   shape=ShapeRecord(int(sh.get("bytes_per_token") or 0), int(sh.get("k") or cfg.get("k") or 0),
                                     int(sh.get("id_bytes") or 0)),
                   preflight=d.get("preflight") or {}, extra={k: v for k, v in d.items() if k not in named},
                   created_utc=str(d.get("created_utc") or ""), result_id=str(d.get("result_id") or ""))


@dataclass(frozen=True)
class SpecReport:
    """The header of a `hopbench spec` report.json (SPEC_SCHEMA, docs/SPEC.md "Output"): what
    was asked, what was modelled and what measured; its runs and status follow as it goes."""

    peer: str | None
    config: dict[str, Any]
    seed: int
    acceptance: dict[str, Any]
    work: dict[str, Any]
    client_env: dict[str, Any]
    server_env: dict[str, Any] | None
    extra: dict[str, Any] = field(default_factory=dict)  # a target of several: its number and group; a codec's source
    created_utc: str = field(default_factory=utc_iso)
    result_id: str = field(default_factory=new_result_id)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SPEC_SCHEMA, "schema_version": SPEC_SCHEMA_VERSION, "software": f"hopbench {__version__}",
                "created_utc": self.created_utc, "result_id": self.result_id, "peer": self.peer, "config": self.config,
                "seed": self.seed, "acceptance": self.acceptance, "work": self.work,
                "modelled": "verify and draft durations (work models), acceptance outcomes (seeded)",
                "measured": "the network, the cadence, the transports, the hosts",
                "client_env": self.client_env, "server_env": self.server_env, **self.extra,
                "status": "running", "runs": []}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SpecReport":
        named = {"schema", "schema_version", "software", "created_utc", "result_id", "peer", "config", "seed",
                 "acceptance", "work", "modelled", "measured", "client_env", "server_env", "status", "runs",
                 "finished_utc"}
        return cls(peer=d.get("peer"), config=d.get("config") or {}, seed=int(d.get("seed") or 0),
                   acceptance=d.get("acceptance") or {}, work=d.get("work") or {}, client_env=d.get("client_env") or {},
                   server_env=d.get("server_env"), extra={k: v for k, v in d.items() if k not in named},
                   created_utc=str(d.get("created_utc") or ""), result_id=str(d.get("result_id") or ""))


class FolderLock:
    """One writer per result folder (a sweep or matrix folder while it is measured): an
    exclusive flock on <folder>/.lock holding the writer's pid. The kernel drops it when the
    writer exits, however it exits, so a crashed sweep never leaves a stale lock. A second
    writer is refused at once, naming the first's pid."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / ".lock"
        self.fd: int | None = None

    def acquire(self) -> "FolderLock":
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise HopbenchError(f"{self.path.parent} is being written by another hopbench (pid {holder}); a second "
                                "writer is refused: wait for it to finish, or start a separate one with --new") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the flock
            self.fd = None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# ---------------------------------------------------------------- the result folder's layout
# The one place that knows how a result folder is laid out (pyperf's BenchmarkSuite owns its
# file the same way): which file is its top record, where a sweep's cells live, how a cell's
# failed attempt is set aside, the order a cell's files are written in. Writers and readers
# go through ResultFolder; no other module spells a file name of the layout.

SWEEP_SCHEMA = "hopbench.sweep"
SPEC_SCHEMA, SPEC_SCHEMA_VERSION = "hopbench.spec", 1  # hopbench spec's report.json
SPEC_TARGETS_SCHEMA = "hopbench.spec-targets"  # hopbench spec --targets' report.json
RUN_FILE, SWEEP_FILE = "report.json", "sweep.json"  # a run's (or a cell's) top record; a sweep's or matrix's
SAMPLES_FILE, SUMMARY_FILE = "samples.csv", "summary.csv"
CYCLES_FILE = "cycles.csv"  # a spec run's per-cycle rows

#: every JSON document hopbench writes, name -> (schema, schema_version): the folders' top
#: records above and the --json documents (docs/RESULTS.md). Emit sites call document().
DOCUMENTS: dict[str, tuple[str, int]] = {
    "run": (SCHEMA, SCHEMA_VERSION), "sweep": (SWEEP_SCHEMA, SCHEMA_VERSION), "spec": (SPEC_SCHEMA, SPEC_SCHEMA_VERSION),
    "spec-targets": (SPEC_TARGETS_SCHEMA, 1), "run-result": ("hopbench.run-result", 1),
    "verdict": ("hopbench.verdict", 1), "compare": ("hopbench.compare", 1), "matrix-verdict": ("hopbench.matrix", 1),
    "report": ("hopbench.report", 1), "transports": ("hopbench.transports", 1), "codecs": ("hopbench.codecs", 1),
    "agreement": ("hopbench.agreement", 2), "drafter": ("hopbench.drafter", 1)}


def document(name: str, body: dict[str, Any]) -> dict[str, Any]:
    """The document `name` (DOCUMENTS): its schema and version first, then `body`."""
    schema, version = DOCUMENTS[name]
    return {"schema": schema, "schema_version": version, **body}
CELLS = "cells"
_CELL_GLOB = "*/*/*/*/" + RUN_FILE  # cells/<rung>/<transport>/<payload-gap>/r<N>/report.json
_FAILED = ".failed-"  # r<N>.failed-<stamp>[-<i>]: an attempt that did not complete, kept aside
ANALYSIS = "analysis"  # derived files (fit, verdict, figures, the report's JSON)


@dataclass(frozen=True)
class SpecTargetsReport:
    """The header of a `hopbench spec --targets` report.json (SPEC_TARGETS_SCHEMA): the peer,
    what was asked (the spec config, the target counts, their CPUs) and the server; its rows,
    errors and status are its writer's (orchestration.spectargets)."""

    peer: str
    config: dict[str, Any]
    server_env: dict[str, Any]
    server_software: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    created_utc: str = ""
    result_id: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SpecTargetsReport":
        named = {"schema", "schema_version", "software", "created_utc", "result_id", "peer", "config", "server_env",
                 "server_software", "status", "rows", "errors", "finished_utc"}
        return cls(peer=str(d.get("peer") or ""), config=d.get("config") or {}, server_env=d.get("server_env") or {},
                   server_software=d.get("server_software"), extra={k: v for k, v in d.items() if k not in named},
                   created_utc=str(d.get("created_utc") or ""), result_id=str(d.get("result_id") or ""))


@dataclass(frozen=True)
class Reading:
    """A result folder's top record as read: `header`, typed by its schema (RunReport,
    SweepReport, SpecReport: what was asked and where), and `record`, the record as its writer
    keeps it current (status, payloads or runs or rungs), for the parts no header types and
    for the documents that print it whole."""

    header: "RunReport | SweepReport | SpecReport | SpecTargetsReport"
    record: dict[str, Any]

    @property
    def status(self) -> str | None:
        status = self.record.get("status")
        return None if status is None else str(status)


class ResultFolder:
    """A hopbench result folder: a run (report.json + its CSVs), a sweep or matrix
    (sweep.json + cells/...), or a spec run (report.json + cycles.csv + summary.csv)."""

    def __init__(self, path: "str | os.PathLike[str]"):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"ResultFolder({str(self.path)!r})"

    # -- what it is
    @property
    def kind(self) -> str | None:
        """"sweep" (sweep.json: a sweep or a matrix), "run" (report.json), None (neither)."""
        if (self.path / SWEEP_FILE).exists():
            return "sweep"
        if (self.path / RUN_FILE).exists():
            return "run"
        return None

    @property
    def is_sweep(self) -> bool:
        return self.kind == "sweep"

    @property
    def top_path(self) -> Path:
        """The top record: sweep.json where there is one, else report.json."""
        return self.path / (SWEEP_FILE if self.is_sweep else RUN_FILE)

    def file(self, name: str) -> Path:
        return self.path / name

    def read_top(self) -> dict[str, Any]:
        """The top record, parsed (not checked: analysis.data.read_folder checks it)."""
        import json

        return json.loads(self.top_path.read_text())

    def read_header(self) -> "RunReport | SweepReport | SpecReport | SpecTargetsReport":
        """The top record's header, typed by its schema (a run's, a sweep's or matrix's, a
        spec's, spec targets'); HopbenchError for another file."""
        return self.read().header

    def read(self) -> "Reading":
        """The top record as a Reading: its header typed by its schema, and the record as its
        writer keeps it (status, payloads, runs, rungs); HopbenchError for another file,
        OSError or ValueError for one that cannot be read or parsed."""
        top = self.read_top()
        kinds: dict[str, Any] = {SCHEMA: RunReport, SWEEP_SCHEMA: SweepReport, SPEC_SCHEMA: SpecReport,
                                 SPEC_TARGETS_SCHEMA: SpecTargetsReport}
        kind = kinds.get(str(top.get("schema"))) if isinstance(top, dict) else None
        if kind is None:
            raise HopbenchError(f"{self.top_path}: not a run, sweep or spec record")
        return Reading(kind.from_dict(top), top)

    def read_or_none(self) -> "Reading | None":
        """read(), or None for a folder whose record is missing, half-written or another's
        (the readers that look over many folders, or a target that never wrote one)."""
        try:
            return self.read()
        except (OSError, ValueError, HopbenchError):
            return None

    def resume_seed(self) -> int:
        """A sweep folder's seed, read before its lock is taken: from the record as it stands,
        a second writer's half-made one too (that writer is then refused by the lock, not here)."""
        return int(self.read_top()["seed"])

    @staticmethod
    def find_resumable(root: "str | os.PathLike[str]", name: str, match: Callable[["Reading"], bool]) -> Path | None:
        """The newest unfinished sweep or matrix folder under root whose name ends with
        `-{name}` (new_folder's stamp first) and whose record `match` accepts, if any."""
        for path in sorted(Path(root).glob(f"*-{name}"), reverse=True):
            rf = ResultFolder(path)
            reading = rf.read_or_none() if rf.is_sweep else None
            if reading is not None and reading.status != "complete" and match(reading):
                return path
        return None

    def analysis_dir(self) -> Path:
        """Where derived files go, created on first use (for writing)."""
        out = self.path / ANALYSIS
        out.mkdir(exist_ok=True)
        return out

    def derived(self, name: str) -> Path:
        """A derived file's path (for reading: nothing is created)."""
        return self.path / ANALYSIS / name

    # -- a sweep's cells
    def cell_dir(self, key: str) -> Path:
        return self.path / CELLS / key

    def cell_reports(self) -> list[Path]:
        """Every cell's report.json, sorted; a cell's attempts that did not complete were set
        aside (r<N>.failed-...): their payloads may be whole, but the repeat is the one that
        completed, so they are not cells."""
        return sorted(p for p in (self.path / CELLS).glob(_CELL_GLOB) if _FAILED not in p.parent.name)

    def cell_done(self, key: str) -> bool:
        return run_complete(self.cell_dir(key))

    def set_aside(self, key: str, tag: str = "") -> Path | None:
        """Move an earlier attempt of a cell out of the way (kept, never deleted)."""
        d = self.cell_dir(key)
        if not d.exists():
            return None
        aside = d.with_name(f"{d.name}{_FAILED}{utc_stamp()}{'-' + tag if tag else ''}")
        d.rename(aside)
        return aside

    # -- writing
    def write_sweep(self, doc: dict[str, Any]) -> None:
        """A sweep's or matrix's top record (a run's is written with its CSVs: write_run)."""
        import json

        atomic_write(self.path / SWEEP_FILE, json.dumps(doc, indent=1, default=str) + "\n")

    def write_run(self, doc: dict[str, Any], csvs: dict[str, str]) -> None:
        """A run's (or cell's) files: the CSVs first, then report.json carrying their manifest
        (`files`), written last, so a report.json means its CSVs are whole."""
        import json

        try:
            for name, text in csvs.items():
                atomic_write(self.path / name, text)
            doc["files"] = {name: manifest_entry(text) for name, text in csvs.items()}
            atomic_write(self.path / RUN_FILE, json.dumps(doc, indent=1, default=str) + "\n")
        except DiskFull as exc:  # the last report.json written whole still matches the CSVs it names
            self.mark_error(str(exc))
            raise

    def mark_error(self, reason: str) -> None:
        """report.json's status made "error" with the reason, all else as it was (its payloads
        and manifest still the CSVs on disk), where a file that small can still be written."""
        import json

        try:
            old = json.loads((self.path / RUN_FILE).read_text())
        except (OSError, ValueError):
            return  # nothing was written whole: nothing to mark
        try:
            atomic_write(self.path / RUN_FILE, json.dumps({**old, "status": "error", "error": reason}, indent=1,
                                                          default=str) + "\n")
        except DiskFull:
            pass

    def write_files(self, files: dict[str, str]) -> None:
        """Files received whole from elsewhere (a matrix agent): report.json last, it marks
        the cell done."""
        self.path.mkdir(parents=True)
        for name in sorted(files, key=lambda n: n == RUN_FILE):
            if name in (SAMPLES_FILE, SUMMARY_FILE, RUN_FILE):
                atomic_write(self.path / name, files[name])


def run_complete(folder: Path) -> bool:
    """A run (or cell) folder whose report.json says complete."""
    import json

    try:
        return json.loads((Path(folder) / RUN_FILE).read_text()).get("status") == "complete"
    except (OSError, ValueError):
        return False


def result_folders(parent: Path) -> list[Path]:
    """The run folders directly inside parent (e.g. spec-rungs' per-rung folders)."""
    return sorted(p for p in Path(parent).iterdir() if (p / RUN_FILE).exists())


def sweep_folders(parent: Path) -> list[Path]:
    """The sweep (or matrix) folders directly inside parent, newest name first."""
    return sorted((p for p in Path(parent).glob("*") if (p / SWEEP_FILE).exists()), reverse=True)


def spec_folders(folder: Path) -> list[Path]:
    """A `hopbench spec` folder (its cycles.csv), or the spec folders directly inside a
    spec-rungs parent, one per rung."""
    folder = Path(folder)
    if (folder / CYCLES_FILE).exists():
        return [folder]
    return sorted(p.parent for p in folder.glob(f"*/{CYCLES_FILE}"))
