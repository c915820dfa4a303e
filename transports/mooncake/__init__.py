"""Mooncake transport (Mooncake's Transfer Engine, the `mooncake-transfer-engine-non-cuda`
wheel; its CUDA build `mooncake-transfer-engine` the same way).

Rooms: engine.py (the process's engines, their settings, the notifications routed to
each channel), channel.py (send and recv_into), transport.py (listen, connect, the setup).

The hop as disaggregated serving moves hidden states over Mooncake (SGLang's
prefill/decode split, vLLM's speculators' hidden-states connector): no message is sent.
Each end registers a receive ring with its engine; a cycle is the target's one-sided
WRITE of the request into the drafter's ring, with a notification naming where it lies,
and the drafter's WRITE of the K ids into the target's ring, with its own.

Choices:
- **A ring per direction, acknowledged in the notifications.** A WRITE must land in
  memory the receiver registered and is not reading. The sender places message k at the
  next free place of the peer's ring (a message that does not fit before the end starts
  at 0; once the receiver has read everything sent, the next message starts at 0 too, in
  memory the last ones warmed: a round trip reuses the ring's head, as a fixed buffer
  would, instead of streaming through 64 MiB of cold memory, which cost 10-20% here)
  and WRITEs it with a notification `D k position length consumed`; the receiver
  copies it out into the buffer the loop gave recv_into. `consumed` is how far the sender
  has read the peer's own ring, so in a round trip every reply acknowledges its request
  and no message of its own is needed; a receiver that has read a quarter of its ring
  without sending says so in a notification alone (a WRITE of 0 bytes). A message may be
  at most a quarter of the peer's ring (MOONCAKE_ring_mib, default 64 MiB): then the
  sender can never wait on space a waiting receiver has freed but not acknowledged.
  Messages keep their length: a receive of another length raises ProtocolError (and
  frees the message's place, so the channel goes on).
- **Setup over the plan's data port, no metadata server.** The engine runs with
  Mooncake's P2PHANDSHAKE (no etcd); the listener is a TCP socket on the data port like
  every transport's, whose connection carries a hello, the channel id, the engine's RPC
  port and the ring's address each way, then stays open as the liveness signal: its end
  is PeerClosed at once, not after the timeout.
- **One engine per process, address and settings**, shared by every channel of the
  process; notifications are routed to each channel by its id.
- **Progress:** the engine moves bytes on its own threads; poll=busy spins on
  get_notifies (a call costs ~1 us) with the house's Spinner, poll=block (auto) sleeps
  MOONCAKE_progress_delay_us (default 50) between checks in select() on the liveness
  connection: a spinning Python receiver takes a CPU from the engine's own threads.
- **Settings** (--opt, prefix MOONCAKE_): MOONCAKE_protocol (tcp, the default, or rdma),
  MOONCAKE_device (the RDMA devices, e.g. mlx5_0; "" lets the engine choose),
  MOONCAKE_ring_mib, MOONCAKE_progress_delay_us. Recorded, with the wheel's version.
- Host memory only: the non-CUDA wheel registers no GPU memory (device_memory False).
- Errors: the engine answers with status codes; each call's failure is read at the
  boundary (the liveness connection says whether the peer went away) and raised as
  hopbench's own errors.
"""

from .channel import MooncakeChannel
from .transport import MooncakeListener, MooncakeTransport

__all__ = ["MooncakeChannel", "MooncakeListener", "MooncakeTransport"]
