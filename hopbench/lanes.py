"""Lanes that bypass the network: what a UCX-based hop (ucx, nixl) moved its bytes over.

UCX decides for itself whether the peer shares this host (its INFO log says "intra-node"
or "inter-node" for each endpoint's lane configuration) and, when it does, may move the
bytes by shared memory or a kernel copy between the two processes: cma, posix, sysv,
knem, xpmem, cuda_ipc. Two network namespaces on one host are one host to UCX, so a
`hopbench run` between them measured memory, not the shaped link (issue 42: T3 in 64 us
over a 1 Gbit link that needs 1.47 ms, and a verdict of "move the drafter"). The run
warns, the record keeps the lanes, and verdict and report refuse to call such a hop.

Read from the recorded lane strings ("intra-node cfg#1 rma_am(tcp/lo) am(tcp/lo
cma/memory)", "intra-node tag(posix/memory ...)"), so old results are judged too. Lanes of
an endpoint to the process itself ("self cfg#0": NIXL's agent talking to itself) are not
the hop and are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: UCX transports that move bytes between processes of one host without a network
BYPASS = ("cma", "posix", "sysv", "knem", "xpmem", "cuda_ipc", "rocm_ipc", "ze_ipc", "mm")
_RESOURCE = re.compile(r"([A-Za-z_][\w]*)/[\w.:-]+")


def bypass(selected: Iterable[str] | None) -> list[str]:
    """The bypassing transports on the intra-node lanes of `selected` (sorted, unique)."""
    found: set[str] = set()
    for lane in selected or ():
        if not isinstance(lane, str) or not lane.startswith("intra-node"):
            continue
        found.update(t for t in _RESOURCE.findall(lane) if t in BYPASS)
    return sorted(found)


def bypass_note(found: list[str], option: str) -> str:
    """The run's warning for lanes that bypassed the network (option: the setting that keeps
    the hop on the network for this transport, e.g. UCX_TLS or NIXL_UCX_TLS)."""
    return (f"the hop bypassed the network: UCX found both ends on one host and moved the bytes by "
            f"{', '.join(found)} (memory, not the link); its round trips say nothing about the link, and verdict and "
            f"report will not call it. Two network namespaces are one host to UCX: keep the hop on the network with "
            f"--opt {option}=tcp (or the RDMA transports, e.g. {option}=rc,tcp)")
