"""UCX's INFO log, sent to a private file and read back: the lanes UCX selects for an
endpoint are named only there ("tag(tcp/lo)", "rma_am(tcp/lo)"). Shared by the ucx
transport (ucxx's libucx) and the nixl transport (NIXL's bundled UCX): each UCX library
reads UCX_LOG_FILE and UCX_LOG_LEVEL once, when its libucs loads, so this module must be
imported before either library. A user's own UCX_LOG_* settings win (then the lanes are
not known). A child process inherits a parent hopbench's private setting (marked by
HOPBENCH_UCX_LOG); that is not the user's, so the child takes a file of its own."""

from __future__ import annotations

import atexit
import ctypes
import os
import tempfile
import threading

_inherited = os.environ.get("HOPBENCH_UCX_LOG") and os.environ.get("UCX_LOG_FILE") == os.environ["HOPBENCH_UCX_LOG"]
LOG_PATH: str | None
if _inherited or ("UCX_LOG_FILE" not in os.environ and "UCX_LOG_LEVEL" not in os.environ):
    LOG_PATH = os.path.join(tempfile.gettempdir(), f"hopbench-ucx-{os.getpid()}.log")
    os.environ["UCX_LOG_FILE"] = LOG_PATH
    os.environ["UCX_LOG_LEVEL"] = "info"
    os.environ["HOPBENCH_UCX_LOG"] = LOG_PATH

    def _remove_log(path: str = LOG_PATH) -> None:
        if os.path.exists(path):
            os.remove(path)

    atexit.register(_remove_log)
else:
    LOG_PATH = None

_libc = ctypes.CDLL(None)


class LogTail:
    """Reads the lines UCX appended to its log file since the last call."""

    def __init__(self) -> None:
        self._offset = 0
        self._lock = threading.Lock()

    def new_lines(self) -> list[str]:
        if LOG_PATH is None:
            return []
        _libc.fflush(None)  # UCX writes its log through a buffered FILE*
        with self._lock:
            try:
                with open(LOG_PATH, "rb") as fh:
                    fh.seek(self._offset)
                    data = fh.read()
                    self._offset += len(data)
            except OSError:
                return []
        return data.decode(errors="replace").splitlines()
