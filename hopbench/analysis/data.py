"""Reading result folders back for analysis: one Group per (rung, transport, payload,
gap) with its per-repeat medians and its pooled timed samples. Works on a sweep folder
(cells/...) and on a single `hopbench run` folder (one repeat, rung "run")."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from hopbench.errors import HopbenchError
from hopbench.estimate import LEVEL, Estimate, cell_estimate
from hopbench.lanes import bypass
from hopbench.records import CellKey, Place, Series
from hopbench.results import (
    SAMPLES_FILE,
    SCHEMA_VERSION,
    SWEEP_SCHEMA,
    ResultFolder,
    verify_files,
)
from hopbench.results import (
    SCHEMA as R_SCHEMA,
)
from hopbench.schema import RUN_RECORD, SWEEP_RECORD, check_record


def _of_cell(name: str) -> Any:
    """A Group's attribute read from its CellKey."""
    return property(lambda g: getattr(g.cell, name), doc=f"The cell's {name} (records.CellKey).")


@dataclass
class Group:
    """One measurement cell's repeats: its identity (a typed CellKey, built once when the
    folder is read) and what was measured."""

    cell: CellKey
    rate_mbit: float | None
    repeat_p50_ns: list[float] = field(default_factory=list)
    samples: list[np.ndarray] = field(default_factory=list)
    repeat_ids: list[int] = field(default_factory=list)  # the sweep's repeat index (0 for a run)
    started_unix: list[float | None] = field(default_factory=list)  # when each repeat was measured
    n_cycles: list[int] = field(default_factory=list)  # timed cycles per repeat
    software: str | None = None  # the software that measured it (as recorded)
    #: a codec's data: "synthetic" or the hidden-state file's name (None: no codec)
    payload_source: str | None = None
    #: UCX transports on lanes that bypassed the network (cma, posix, ...: hopbench.lanes)
    bypass: set[str] = field(default_factory=set)

    @property
    def key(self) -> CellKey:
        """The identity of a measurement cell (place, series, payload)."""
        return self.cell

    # the cell's identity, read through (rung: rung@placement; transport: the series' label)
    series = _of_cell("series")
    place = _of_cell("place")
    rung = _of_cell("rung")
    transport = _of_cell("transport")
    payload = _of_cell("payload")
    tokens = _of_cell("tokens")
    request_bytes = _of_cell("request_bytes")
    reply_bytes = _of_cell("reply_bytes")
    gap_ms = _of_cell("gap_ms")

    @property
    def streamed(self) -> bool:
        """Streamed during the verify forward (docs/STREAM.md): its samples are exposed hops."""
        return self.cell.series.streamed

    @property
    def pooled(self) -> np.ndarray:
        return np.concatenate(self.samples) if self.samples else np.zeros(0, dtype=np.int64)

    def estimate(self, level: float = LEVEL) -> Estimate:
        """The cell's estimate: the one aggregation every command uses (hopbench.estimate)."""
        within = self.samples[0] if len(self.repeat_p50_ns) == 1 and self.samples else None
        return cell_estimate(self.repeat_p50_ns, within, n_samples=sum(self.n_cycles) or int(self.pooled.size),
                             level=level)

    @property
    def p50_ns(self) -> float:
        return self.estimate().value


def _timed_samples(samples_csv: Path, want: dict[str, int]) -> dict[str, np.ndarray]:
    """payload -> its timed (non-warm-up) round trips, in cycle order (pandas reads the CSV);
    want: payload -> the timed count its report.json records (a cut or padded file is refused)."""
    from hopbench.analysis.deps import pandas

    pd = pandas()
    try:
        cols = _columns(pd, pd.read_csv(samples_csv, usecols=list(_USED), dtype={"payload": str}))
    except (ValueError, TypeError, KeyError, pd.errors.ParserError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HopbenchError(f"{samples_csv}: not a hopbench samples file ({first[:120]})") from None
    return _split_timed(samples_csv, *cols, want)


_USED = ("payload", "warmup", "rtt_ns")  # the samples.csv columns analysis reads


def _columns(pd, df) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # noqa: ANN001
    """(payload codes, labels, warm-up flags, round trips) of parsed sample rows; NaN or text
    in a number column is a ValueError."""
    codes, labels = pd.factorize(df["payload"])
    return (codes, np.asarray(labels, dtype=object), df["warmup"].astype("int64").to_numpy(),
            df["rtt_ns"].astype("int64").to_numpy())


def _split_timed(path: Path, codes: np.ndarray, labels: np.ndarray, warm: np.ndarray, rtt: np.ndarray,
                 want: dict[str, int]) -> dict[str, np.ndarray]:
    """One file's rows -> payload -> its timed round trips in cycle order, checked against
    the counts report.json records."""
    if (codes < 0).any():
        raise HopbenchError(f"{path}: not a hopbench samples file (a row without a payload)")
    timed = warm == 0
    codes, rtt = codes[timed], rtt[timed]
    if codes.size and (codes == codes[0]).all():  # a sweep cell: one payload per file
        out = {str(labels[codes[0]]): rtt}
    else:
        out = {str(labels[k]): rtt[codes == k] for k in dict.fromkeys(codes.tolist())}
    for label, n in want.items():
        got = out[label].size if label in out else 0
        if label in out and got != n:
            raise HopbenchError(f"{path}: payload {label} has {got} timed rows, report.json says n = {n}")
    return out


def _timed_samples_many(files: list[tuple[Path, dict[str, int]]]) -> dict[Path, dict[str, np.ndarray] | HopbenchError]:
    """_timed_samples for many files at the cost of one: the files sharing a header are parsed
    by one pandas call over their rows joined (a sweep's 1,080 cells: 0.3 s, not 2.7 s of
    per-file parser set-up), then split by each file's row count. Where the joined parse
    fails or its rows do not add up, each of those files is read on its own, so an error
    still names its file."""
    import io

    from hopbench.analysis.deps import pandas

    pd = pandas()
    out: dict[Path, dict[str, np.ndarray] | HopbenchError] = {}
    batches: dict[bytes, list[tuple[Path, dict[str, int], bytes]]] = {}
    for path, want in files:
        try:
            head, _, body = path.read_bytes().partition(b"\n")
        except OSError as exc:
            out[path] = HopbenchError(f"{path}: cannot be read ({exc})")
            continue
        if body and not body.endswith(b"\n"):
            body += b"\n"
        batches.setdefault(head, []).append((path, want, body))
    for head, items in batches.items():
        counts = [body.count(b"\n") for _, _, body in items]
        try:
            names = head.decode().split(",")
            df = pd.read_csv(io.BytesIO(b"".join(body for _, _, body in items)), header=None, names=names,
                             usecols=list(_USED), dtype={"payload": str})
            if len(df) != sum(counts):
                raise ValueError("rows do not add up")
            codes, labels, warm, rtt = _columns(pd, df)
        except (ValueError, TypeError, KeyError, UnicodeDecodeError, pd.errors.ParserError):
            for path, want, _ in items:
                try:
                    out[path] = _timed_samples(path, want)
                except HopbenchError as exc:
                    out[path] = exc
            continue
        start = 0
        for (path, want, _), n in zip(items, counts):
            sl = slice(start, start + n)
            start += n
            try:
                out[path] = _split_timed(path, codes[sl], labels, warm[sl], rtt[sl], want)
            except HopbenchError as exc:
                out[path] = exc
    return out


def _read_json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise HopbenchError(f"{path} not found: not a hopbench result folder") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HopbenchError(f"{path}: cannot be read ({exc})") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise HopbenchError(f"{path}: not valid JSON ({str(exc)[:120]})") from None
    if not isinstance(doc, dict):
        raise HopbenchError(f"{path}: a JSON {type(doc).__name__}, expected an object")
    return doc


def check_schema(doc: dict, path: Path, expected: str) -> None:
    """Older schema versions are read; a newer one (or another kind of file) is refused."""
    from hopbench.version import __version__

    if doc.get("schema") != expected:
        raise HopbenchError(f"{path}: not a {expected} file (schema {str(doc.get('schema'))[:60]!r})")
    v = doc.get("schema_version")
    if type(v) is not int or v < 1:
        raise HopbenchError(f"{path}: schema_version {str(v)[:40]!r} is not a version")
    if v > SCHEMA_VERSION:
        raise HopbenchError(f"{path} was written by a newer hopbench ({doc.get('software') or 'schema ' + str(v)}: "
                            f"schema {v}); this hopbench {__version__} reads up to schema {SCHEMA_VERSION}: upgrade it")


def _warn(msg: str) -> None:
    import sys

    if msg not in _WARNED:  # a folder read by several steps of one command says it once
        _WARNED.add(msg)
        print(f"hopbench: warning: {msg}", file=sys.stderr)


_WARNED: set[str] = set()


@dataclass
class Folder:
    """A result folder read and checked once: its kind, its top record, and its cells (a
    run is its own one cell), each cell's report checked against its type spec and its
    CSVs against the report's manifest. A sweep's bad cell is left out with a warning (the
    rest is still an answer); a run's is an error."""

    path: Path
    kind: str  # "sweep" or "run"
    top: dict
    cells: list[tuple[Path, dict]]
    left_out: list[str]


class Reading(os.PathLike):
    """A result folder as one analysis command reads it: read and checked once, its Groups
    built once. The command hands this object to each of its steps (fit, verdict, figures,
    the document), which then share that reading; a path given instead is read afresh (a
    sweep reads what it just wrote). Path-like: `Path(reading)` is the folder's path."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._folder: Folder | None = None
        self._groups: tuple[list[Group], dict] | None = None

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"Reading({str(self.path)!r})"

    @property
    def folder(self) -> Folder:
        """The folder read and checked. A sweep's bad cell is warned about when it is read."""
        if self._folder is None:
            self._folder = _read_folder(self.path)
        return self._folder

    def groups(self) -> tuple[list[Group], dict]:
        """Its Groups (shared by the steps: treat them as read-only) and its top record."""
        if self._groups is None:
            self._groups = _load_groups(self)
        return self._groups


def reading(folder: str | Path | Reading) -> Reading:
    """The reading a step was handed, or a fresh one of a path."""
    return folder if isinstance(folder, Reading) else Reading(folder)


def read_folder(folder: str | Path | Reading) -> Folder:
    """The folder read and checked (once per Reading). A sweep's bad cell is warned about
    here, when it is read (once per process: _warn)."""
    return reading(folder).folder


def _read_folder(folder: Path) -> Folder:
    rf = ResultFolder(folder)
    kind = rf.kind
    if kind is None:
        raise HopbenchError(f"{folder}: neither a sweep (sweep.json) nor a run (report.json) folder")
    top = _read_json(rf.top_path)
    if kind == "sweep":
        check_schema(top, rf.top_path, SWEEP_SCHEMA)
        check_record(top, SWEEP_RECORD, str(rf.top_path))
        paths = rf.cell_reports()
    else:
        check_schema(top, rf.top_path, R_SCHEMA)
        paths = [rf.top_path]
    cells: list[tuple[Path, dict]] = []
    left_out: list[str] = []
    seen: dict[tuple, Path] = {}
    for rp in paths:
        try:
            run = top if kind == "run" else _read_json(rp)
            check_schema(run, rp, R_SCHEMA)
            check_record(run, RUN_RECORD, str(rp))
            verify_files(rp, run)
            cell = (run.get("sweep") or {}).get("cell") or {}
            ident = (cell.get("repeat"), tuple(sorted((cell_of(run, p) for p in run["payloads"]), key=repr)))
            if kind == "sweep" and ident in seen:
                raise HopbenchError(f"{rp}: the same cell and repeat as {seen[ident]} (a duplicated cell)")
            seen[ident] = rp
        except HopbenchError as exc:
            if kind == "run":
                raise
            left_out.append(str(rp.parent))
            _warn(f"{exc}; left out: {rp.parent.relative_to(folder)}")
            continue
        cells.append((rp, run))
    return Folder(folder, kind, top, cells, left_out)


def series_of(plan: dict[str, Any], design: Any = None, stream_from: Any = None) -> Series:
    """A plan's series, from the plan's own fields: its transport and codec, the payload
    design (`design`: the payload entry's), streamed when the plan carries a stream (from the
    forward's clock, "layers", or from a real producer, "target": the entry's `stream_from`),
    and the size of its group of targets."""
    group = plan.get("group")
    size = group.get("size") if isinstance(group, dict) else None
    drafter = plan.get("drafter")
    early = drafter.get("early", "off") if isinstance(drafter, dict) else None
    return Series(str(plan["transport"]), str(plan.get("codec") or "none"),
                  design if isinstance(design, str) and design else "taps",
                  ("target" if stream_from == "target" else "layers") if isinstance(plan.get("stream"), dict) else "off",
                  size if isinstance(size, int) else 1,
                  "off" if early is None else ("model" if early == "off" else early))


def place_of(run: dict[str, Any], plan: dict[str, Any]) -> Place:
    """Where a recorded payload was measured: a sweep cell's planned rung and placement (as
    planned: a cell's `place`, or older cells' flat `rung` and `placement` keys), a run's rung,
    and the plan's think time."""
    cell: dict[str, Any] = (run.get("sweep") or {}).get("cell") or {}
    planned: dict[str, Any] = cell["place"] if isinstance(cell.get("place"), dict) else cell
    gap = float(plan.get("gap_ms") or 0.0)
    if isinstance(planned.get("rung"), str):
        return Place(planned["rung"], str(planned.get("placement") or ""), gap)
    return Place(str(run.get("rung") or (run.get("config") or {}).get("rung") or "run"), "", gap)


def cell_of(run: dict[str, Any], p: dict[str, Any]) -> CellKey:
    """A recorded payload's identity, built once from its typed fields (never from a label)."""
    plan = p["plan"]
    return CellKey(place_of(run, plan), series_of(plan, p.get("design"), p.get("stream_from")), str(p["payload"]),
                   p.get("tokens"),
                   int(plan["request_bytes"]), int(plan["reply_bytes"]))


def load_groups(folder: str | Path | Reading) -> tuple[list[Group], dict]:
    """Groups of a sweep or run folder, plus its top-level report (sweep.json/report.json).
    Reads every schema version up to the current one (tests/golden). Callers get their own
    list (the Groups of one Reading are shared: treat them as read-only)."""
    groups, top = reading(folder).groups()
    return list(groups), top


def _load_groups(r: Reading) -> tuple[list[Group], dict]:
    f = r.folder
    folder, top = f.path, f.top
    if f.kind == "sweep":
        rates = {k: (v.get("rate_mbit") if isinstance(v, dict) else None) for k, v in (top.get("rungs") or {}).items()}
    else:
        cfg = top.get("config") or {}
        rates = {cfg.get("rung") or "run": cfg.get("rate_mbit")}
    groups: dict[CellKey, Group] = {}
    wants = {rp: {p["payload"]: int(p["summary"].get("n") or 0) for p in run["payloads"] if p["summary"].get("complete")}
             for rp, run in f.cells}
    read = _timed_samples_many([(rp.parent / SAMPLES_FILE, w) for rp, w in wants.items()
                                if (rp.parent / SAMPLES_FILE).exists()])
    for rp, run in f.cells:
        rung = run.get("rung") or (run.get("config") or {}).get("rung") or "run"
        samples = read.get(rp.parent / SAMPLES_FILE, {})
        if isinstance(samples, HopbenchError):
            if f.kind == "run":
                raise samples
            _warn(f"{samples}; left out: {rp.parent.relative_to(folder)}")
            continue
        for p in run["payloads"]:
            s = p["summary"]
            if not s.get("complete") or not s.get("n") or s.get("p50_ns") is None:
                continue
            key = cell_of(run, p)  # a codec is its own series, and so is a design, a stream, M
            g = groups.get(key)
            if g is None:
                g = groups[key] = Group(key, rates.get(key.rung, rates.get(rung)))
            g.repeat_p50_ns.append(float(s["p50_ns"]))
            repeat = ((run.get("sweep") or {}).get("cell") or {}).get("repeat")  # checked: an int or absent/null
            g.repeat_ids.append(int(repeat) if repeat is not None else len(g.repeat_ids))
            g.started_unix.append(p.get("started_unix"))
            g.n_cycles.append(int(s.get("n") or 0))
            g.software = g.software or run.get("software")
            src = (p.get("codec") or {}).get("source")
            if src and g.payload_source is None:
                g.payload_source = "synthetic" if src.get("synthetic") else Path(str(src.get("file"))).name
            for side in ("data_channel", "server_channel"):
                ch = p.get(side)
                g.bypass.update(bypass(ch.get("selected")) if isinstance(ch, dict) else ())
            if p["payload"] in samples:
                g.samples.append(samples[p["payload"]])
    if not groups:
        raise HopbenchError(f"{folder}: no complete measurements found"
                            + (f" ({len(f.left_out)} cell(s) left out: see the warnings)" if f.left_out else ""))
    return sorted(groups.values(), key=lambda g: (g.rung, g.transport, g.request_bytes, g.gap_ms)), top


def load_runs(folders: Sequence[str | Path]) -> tuple[list[Group], dict]:
    """Several `hopbench run` folders of the same cells as one set of repeats: run i is
    repeat i (in the order given). One folder: load_groups."""
    if len(folders) == 1:
        return load_groups(folders[0])
    merged: dict[CellKey, Group] = {}
    top: dict = {}
    for i, f in enumerate(folders):
        if ResultFolder(f).is_sweep:
            raise HopbenchError(f"{f}: a sweep folder; give sweeps one at a time (their repeats are inside)")
        groups, t = load_groups(f)
        top = top or t
        for g in groups:  # copies: the loaded Groups may be shared (Reading)
            g = replace(g, repeat_ids=[i] * len(g.repeat_ids), repeat_p50_ns=list(g.repeat_p50_ns), bypass=set(g.bypass),
                        samples=list(g.samples), started_unix=list(g.started_unix), n_cycles=list(g.n_cycles))
            m = merged.get(g.key)
            if m is None:
                merged[g.key] = g
                continue
            m.repeat_p50_ns += g.repeat_p50_ns
            m.samples += g.samples
            m.repeat_ids += g.repeat_ids
            m.started_unix += g.started_unix
            m.n_cycles += g.n_cycles
            m.bypass |= g.bypass
    return sorted(merged.values(), key=lambda g: (g.rung, g.transport, g.request_bytes, g.gap_ms)), top


def first_header(folder: str | Path | Reading) -> dict:
    """The recorded environment of a result folder, as compare's baseline check reads it:
    a run's report header, or a sweep's first cell's (with the sweep's creation time)."""
    f = read_folder(folder)
    head = dict(f.cells[0][1]) if f.cells else {}
    if f.kind == "sweep":
        head["created_utc"] = f.top.get("created_utc", head.get("created_utc"))
    plans = [p.get("plan", {}) for p in head.get("payloads", [])]
    head["transport_settings"] = {p.get("transport"): p.get("transport_settings") for p in plans}
    head.pop("payloads", None)
    return head


def result_id(folder: str | Path | Reading) -> str:
    """A result's identity, kept when its folder is moved or renamed: the id written when it
    was created (`result_id`), or, for results older than that field, a hash of what was
    recorded at creation (schema, creation time, config, seed, peer) - never the folder name."""
    folder = Path(folder)  # any hopbench result (run, sweep, matrix, spec): its top record only
    top = _read_json(ResultFolder(folder).top_path)
    if top.get("result_id"):
        return str(top["result_id"])
    key = json.dumps([top.get(k) for k in ("schema", "created_utc", "fingerprint", "seed", "peer", "config")],
                     sort_keys=True, default=str)
    return "h-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def recorded_shape(folder: str | Path | Reading, default_bytes_per_token: int | None = None,
                   default_operating_tokens: int | None = None) -> tuple[int, int]:
    """(bytes per token, operating tokens) as recorded with the result (a sweep's shape and
    config, a run's config); the defaults given, else today's configs/shape.toml, only where
    the result predates them."""
    if default_bytes_per_token is None or default_operating_tokens is None:
        from hopbench.shape import load_shape

        scfg = load_shape()
        default_bytes_per_token = default_bytes_per_token or scfg.shape.bytes_per_token
        default_operating_tokens = default_operating_tokens or scfg.operating_tokens
    if ResultFolder(Path(folder)).kind is None:
        return default_bytes_per_token, default_operating_tokens
    f = read_folder(folder)
    if f.kind == "sweep":
        bpt = (f.top.get("shape") or {}).get("bytes_per_token")
        op = (f.top.get("config") or {}).get("operating_tokens")
    else:
        bpt, op = (f.top.get("config") or {}).get("bytes_per_token"), None
    return int(bpt or default_bytes_per_token), int(op or default_operating_tokens)
