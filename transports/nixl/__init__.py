"""NIXL transport (NVIDIA's Inference Xfer Library, the `nixl-cu12` wheel and its bundled UCX).

Rooms: agent.py (the process's agents, settings, error maps), wire.py (setup blocks and
notifications), memory.py (registered regions), channel.py (send and recv_into),
transport.py (listen, connect, the handshake).

The hop as disaggregated serving moves it: no message is sent. Each end registers the
buffers it receives into; a cycle is the target's one-sided WRITE of the request into
the drafter's registered buffer, with a notification carrying the sequence number, and
the drafter's WRITE of the K ids into the target's registered buffer, with its own.

Choices (measured: `make bench-native`, benchmarks/nixl_pingpong.py; docs/TRANSPORTS.md):
- **Credits.** A WRITE needs a buffer the peer registered and is not reading from.
  `recv_into(buf)` registers `buf` (once: regions are cached by address while the
  channel lives) and gives the peer a credit, a notification naming that buffer (with
  its registration, the partial agent metadata, the first time); `send(buf)` takes the
  oldest credit, WRITEs into it with a data notification and waits for the WRITE to
  complete. A credit is taken once, so a WRITE never overwrites a message not yet read,
  and messages keep their length: a send of another length than the credit's buffer
  is not written, the peer's receive raises ProtocolError (the notification says how
  long it was).
- **Setup over the plan's data port, no etcd.** The listener is a TCP socket on the
  data port like the other transports'; the client's connection carries a hello, both
  agents' metadata and a channel id each way, then stays open as the liveness signal
  NIXL lacks: its end (or the peer's goodbye notification) is PeerClosed at once, not
  after the timeout. Every transport keeps the contract's one shape (listen/connect on
  a port, hopbench.core.transport), so sweep, matrix, spec and the fan-in take nixl
  unchanged, and the session's data-channel proof runs over NIXL itself.
- **One agent per process and settings** (an agent's creation costs 0.2-0.5 s: its UCX
  context), shared by every channel of the process, notifications routed to each
  channel by (peer agent, channel id); a peer's metadata is loaded once and invalidated
  when its last channel closes.
- **Progress:** poll=busy (auto) spins on the agent (NIXL's calls progress UCX); poll=
  block sleeps NIXL_progress_delay_us (default 50) between checks, in select() on the
  liveness connection: NIXL 1.5 offers no descriptor to block on, and its own progress
  thread either spins a CPU (no delay) or, with a delay, made round trips slower still
  (measured: 4 KiB on loopback, busy 140 us, sleeping 50 us between checks 680 us;
  docs/TRANSPORTS.md).
- **Settings** (--opt, routed by the prefix NIXL_): NIXL_UCX_<VAR> is UCX_<VAR> for
  NIXL's own UCX (e.g. NIXL_UCX_TLS=tcp), set only while the agent is created;
  NIXL_<param> for the UCX backend's parameters (num_workers, ucx_devices,
  ucx_error_handling_mode); NIXL_progress_delay_us. Recorded, with NIXL's version, the
  libucp NIXL loaded and the lanes UCX selected for the agent (its INFO log).
- Errors: every NIXL exception class and status is mapped by type (exception_map,
  status_map; a test checks each one the bindings export).
"""

from .agent import exception_map, status_map
from .channel import NixlChannel
from .transport import NixlListener, NixlTransport

__all__ = ["NixlChannel", "NixlListener", "NixlTransport", "exception_map", "status_map"]
