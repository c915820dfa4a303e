"""Result folders: report.json, samples.csv, summary.csv — written atomically, never
overwritten. docs/RESULTS.md documents every field and column."""

from __future__ import annotations

import csv
import io
import os
import tempfile
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from hopbench.errors import HopbenchError

SCHEMA = "hopbench.run"
# Schema history (report.json `schema_version`; sweep.json has its own, same numbers):
#   1  hopbench 0.1.0: the first format.
#   2  config.rate_mbit / config.rung (what the user said about the link), summary
#      p50_ci_level (achieved level of the within-run interval) and drift_p, env
#      cpu_governor; sweep summary.csv: the cell estimate with p50_ci_level/p50_ci_scope.
#      Later additive field (readers treat it as optional): result_id (report.json and
#      sweep.json), the identity export's record ids are built from.
# Readers accept every version up to SCHEMA_VERSION (tests/golden holds one folder of each
# older version, which must keep loading) and refuse newer ones with a clear line.
SCHEMA_VERSION = 2

SAMPLE_COLUMNS = ["payload", "transport", "tokens", "request_bytes", "reply_bytes", "seq", "phase", "warmup", "rtt_ns"]
SUMMARY_COLUMNS = [
    "payload", "transport", "tokens", "request_bytes", "reply_bytes", "k", "n",
    "min_ns", "p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns", "mean_ns", "std_ns",
    "p50_ci_lo_ns", "p50_ci_hi_ns", "drift_rel", "drift", "complete",
]

#: GPU plans (--memory cuda) add these: where each end's payload lives, then per-cycle
#: stage times (docs/RESULTS.md "GPU stages"); host-only runs keep the columns above
GPU_COLUMNS = ["client_memory", "server_memory", "gpu_path"]
STAGE_COLUMNS = ["d2h_ns", "transfer_ns", "h2d_ns", "server_h2d_ns", "server_d2h_ns", "wire_ns"]


def sample_columns(gpu: bool) -> list[str]:
    return SAMPLE_COLUMNS + GPU_COLUMNS + STAGE_COLUMNS if gpu else SAMPLE_COLUMNS


def stage_summary_keys(stage_column: str) -> tuple[str, str, str]:
    """summary.csv's p50 and CI columns for one stage column ("d2h_ns" -> "d2h_p50_ns", ...)."""
    base = stage_column.removesuffix("_ns")
    return f"{base}_p50_ns", f"{base}_p50_ci_lo_ns", f"{base}_p50_ci_hi_ns"


def summary_columns(gpu: bool) -> list[str]:
    if not gpu:
        return SUMMARY_COLUMNS
    return SUMMARY_COLUMNS + GPU_COLUMNS + [k for s in STAGE_COLUMNS for k in stage_summary_keys(s)]


def utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def new_result_id() -> str:
    """The identity a result keeps wherever its folder goes (export's record ids use it)."""
    return uuid.uuid4().hex


def utc_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write via a temporary file in the same folder, fsync, rename: a reader sees the old
    file or the new one, never a torn one (also when the process is killed mid-write)."""
    path = Path(path)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes 0600 files: keep the mode of the file being replaced, else the umask's
        try:
            perm = os.stat(path).st_mode & 0o777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            perm = 0o666 & ~umask
        os.fchmod(fd, perm)
        with os.fdopen(fd, mode) as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def csv_text(columns: list[str], rows: Iterable[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


def new_folder(root: Path, name: str, out: Path | None = None) -> Path:
    """Create the result folder exclusively; an existing folder is never reused."""
    path = Path(out) if out else Path(root) / f"{utc_stamp()}-{name}"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir()
    except FileExistsError:
        raise HopbenchError(f"result folder {path} already exists; refusing to overwrite it (choose another --out)") from None
    return path
