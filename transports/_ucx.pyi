"""Types of the UCX transport's C part (transports/_ucx.c)."""

from typing import Any

ABI: int

def endpoint(worker: int, ep: int, send_tag: int, recv_tag: int) -> Any:
    """A ucxx endpoint as a capsule holding an hb_endpoint (hopbench/core/hb_endpoint.h)."""

def bind(libucp_path: str) -> None: ...
def status_string(status: int) -> str: ...
def layout() -> dict[str, int]: ...
