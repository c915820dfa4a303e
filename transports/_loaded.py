"""Which copy of a shared library this process mapped (ucx's libucp from libucx-cu12, nixl's
from its own wheel): the path recorded with each channel, since two copies of UCX in one
process behave as two libraries."""

from __future__ import annotations


def loaded_library(*needles: str) -> str | None:
    """The path of the first file mapped into this process whose /proc/self/maps line holds
    every needle (None where none is, or off Linux)."""
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                if all(n in line for n in needles):
                    return line.split()[-1]
    except OSError:
        pass
    return None
