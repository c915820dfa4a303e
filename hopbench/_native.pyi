"""Types of the compiled loop (hopbench/core/_native.c); hopbench.core.native wraps it."""

from typing import Any

ABI: int
ST_OK: int
ST_TIMEOUT: int
ST_CLOSED: int
ST_OSERR: int
ST_BAD_REPLY: int
ST_INTERRUPTED: int
ST_UCS: int
ST_SHORT: int
ST_BAD_SEQ: int

# each loop returns (cycles completed, status, phase 0 = receive / 1 = send, detail, exception or None)
Result = tuple[int, int, int, int, BaseException | None]

# the endpoint's handle is spread in front of the arguments (hopbench.core.transport.NativeEndpoint):
# tcp_client(fd, busy, timeout_ns, yield_every, request, reply, k, id_bytes, samples, n, gap_ns, progress)
# tcp_echo(fd, busy, timeout_ns, yield_every, request, reply, k, id_bytes, total, crc, progress)
# ucx_client(worker, ep, send_tag, recv_tag, timeout_ns, alive, yield_every, request, reply, k, id_bytes, samples, n,
#            gap_ns)
# ucx_echo(worker, ep, send_tag, recv_tag, timeout_ns, alive, yield_every, request, reply, k, id_bytes, total, crc)
def tcp_client(*args: Any) -> Result: ...
def tcp_echo(*args: Any) -> Result: ...
def ucx_client(*args: Any) -> Result: ...
def ucx_echo(*args: Any) -> Result: ...
def ucx_bind(libucp_path: str) -> None: ...
def ucs_status_string(status: int) -> str: ...
def layout() -> dict[str, int]: ...
