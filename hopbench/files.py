"""Files written whole: a reader sees the old file or the new one, never a torn one, and a
full disk is one DiskFull naming the file (the result folders' writes, hopbench.results, and
every other file hopbench writes go through atomic_write)."""

from __future__ import annotations

import errno
import os
import signal
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from hopbench.errors import DiskFull


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write via a temporary file in the same folder, fsync, rename: a reader sees the old
    file or the new one, never a torn one (also when the process is killed mid-write)."""
    path = Path(path)
    mode = "wb" if isinstance(data, bytes) else "w"
    # Ctrl-C or a terminate (SIGINT, SIGTERM) waits for the write: one arriving between the
    # temporary file's creation and its rename or removal left a .tmp behind (issue 42: seen
    # in a target of an interrupted run --clients); raised again as soon as the write is done
    with signals_held():
        try:
            _write_replacing(path, data, mode)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            why = (exc.strerror or "no space left on device").lower()
            raise DiskFull(f"{path}: not written, {why} ({len(data):,} B); the files written before it are kept "
                           "whole") from None


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM noted, not acted on, for the block, then raised again with their own
    handlers (Python runs signal handlers in the main thread only: elsewhere nothing is held)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    held = {sig: h for sig, h in kept.items() if h is not None}  # None: a handler not set from Python
    for sig in held:
        signal.signal(sig, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)
        for signum in pending:
            signal.raise_signal(signum)


def _write_replacing(path: Path, data: str | bytes, mode: str) -> None:
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


__all__ = ["atomic_write", "signals_held"]
