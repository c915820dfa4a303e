"""Types of the TCP transport's C part (transports/_tcp.c)."""

from typing import Any

ABI: int

def endpoint(fd: int, busy: int) -> Any:
    """The socket as a capsule holding an hb_endpoint (hopbench/core/hb_endpoint.h)."""
