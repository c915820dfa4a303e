"""Types of the core's compiled loops (hopbench/core/_native.c); hopbench.core.native wraps them."""

from typing import Any

ABI: int
#: the status names, indexed by code (hopbench/core/hb_endpoint.h enum hb_status)
STATUS: tuple[str, ...]

# each loop returns (cycles completed, status, phase 0 = receive / 1 = send, detail, exception or None)
Result = tuple[int, int, int, int, BaseException | None]

def client(endpoint: Any, timeout_ns: int, yield_every: int, progress: Any, alive: Any, request: Any, reply: Any,
           k: int, id_bytes: int, samples: Any, n: int, gap_ns: int) -> Result: ...
def echo(endpoint: Any, timeout_ns: int, yield_every: int, progress: Any, alive: Any, request: Any, reply: Any,
         k: int, id_bytes: int, total: int, crc: int) -> Result: ...
def crc32(data: bytes) -> int: ...
