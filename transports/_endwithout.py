"""A process that loaded NIXL ends without running its shared libraries' destructors.

Why (issue 42): nixl-cu12 bundles its own libibverbs, libnl-3 and libnl-route-3. On a
host with rdma-core (libibverbs1, libnl-route-3-200: every RDMA-capable Linux host, and
any with `ibverbs-providers`), the system's copies load too: NIXL's UCX module
libuct_ib_efa links both, and on a host with RDMA devices the bundled libibverbs
dlopens the system's provider drivers, which link the system's libibverbs. Both
libnl-route copies then register their traffic-control ops in one registry (the first
copy's `rtnl_tc_register` serves both: symbol lookup order), the second copy's ops are
refused as duplicates, and its destructor unregisters ops that were never linked:
SIGSEGV in `rtnl_tc_unregister` from `_dl_fini`, after the results were printed, so
`hopbench run --transport nixl` exits 139 and a test process dies.

Which copy loads is NIXL's and the host's business; how the process ends is ours. The
library destructors are all that runs after Python has finalized, and none of them has
anything left to save for hopbench (its files are closed by then). So: C stdio is
flushed and closed (fcloseall), then `_exit(status)` with the status `exit()` was given,
both registered as C exit handlers once NIXL is imported; glibc runs exit handlers last
in, first out, and `_dl_fini` was registered by the loader before any of them. Both
handlers are libc's own functions (no Python runs after finalization). `on_exit` hands
its handler the exit status, which is what `_exit` takes first.

Only glibc has `on_exit`; elsewhere nothing is registered (and nixl-cu12 ships for
manylinux, i.e. glibc, only)."""

from __future__ import annotations

import ctypes

_done = False


def end_without_library_destructors() -> bool:
    """Register the two exit handlers, once per process. True when they are in place."""
    global _done
    if _done:
        return True
    try:
        libc = ctypes.CDLL(None)
        on_exit, cxa_atexit = libc.on_exit, libc.__cxa_atexit
        end, flush = libc._exit, libc.fcloseall
    except (OSError, AttributeError):
        return False
    pointer = ctypes.c_void_p
    on_exit.argtypes = [pointer, pointer]
    cxa_atexit.argtypes = [pointer, pointer, pointer]
    if on_exit(ctypes.cast(end, pointer), None) != 0:
        return False
    # registered after on_exit, so it runs before it: stdio's buffers reach their files
    cxa_atexit(ctypes.cast(flush, pointer), None, None)
    _done = True
    return True
